"""Set-level membership ("was this dataset used to train the model?"): CDI-style dataset inference (Dubiński et
al., CVPR 2025; the method, its sources and how it differs from the official code: docs/attacks.md §12).

Under H0 (P was not used, P and U exchangeable) the held-out scores of P and U have the same distribution, so the
p-value controls the type-I error; the larger of the two halves' p-values is valid at any level, since
Pr[max(p₁, p₂) ≤ α] ≤ Pr[p₁ ≤ α] ≤ α. ``folds=1`` reproduces the official code's single split, ``one_sided=False``
its two-sided test; features are standardized (``StandardScaler``) as the official code.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from ..core.errors import BadInput

METHOD = ("CDI-style dataset inference: logistic regression on per-record membership features (suspect vs "
          "reference), cross-fitted on two halves, one-sided Welch t-test (suspect > reference) on each held-out "
          "half, p = the larger of the two")


def _fit_score(xf: np.ndarray, yf: np.ndarray, xs: np.ndarray, seed: int) -> np.ndarray:
    # lazy: scikit-learn loads only when a test is fitted
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    ss = StandardScaler().fit(xf)
    clf = LogisticRegression(random_state=seed, max_iter=1000).fit(ss.transform(xf), yf)
    return clf.decision_function(ss.transform(xs))


def set_inference_test(suspect: np.ndarray, reference: np.ndarray, *, seed: int = 0, folds: int = 2,
                       one_sided: bool = True) -> dict:
    """p-value that ``suspect`` (n_p × f features) was used, against ``reference`` (n_u × f, known unused)."""
    p_feat, u_feat = np.asarray(suspect, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if p_feat.ndim == 1:
        p_feat, u_feat = p_feat[:, None], u_feat[:, None]
    if min(len(p_feat), len(u_feat)) < 4:
        raise BadInput(f"dataset inference needs at least 4 suspect and 4 reference records; got {len(p_feat)} "
                       f"and {len(u_feat)}")
    if not (np.isfinite(p_feat).all() and np.isfinite(u_feat).all()):
        raise BadInput("dataset inference: a feature is not finite (NaN or inf) for some record")
    rng = np.random.default_rng([seed, 0xCD1])
    half_p = rng.permutation(len(p_feat)) < len(p_feat) // 2
    half_u = rng.permutation(len(u_feat)) < len(u_feat) // 2
    per_fold = []
    for side in ([True, False] if folds == 2 else [True]):
        fp, fu = half_p == side, half_u == side
        xf = np.vstack([p_feat[fp], u_feat[fu]])
        yf = np.r_[np.ones(fp.sum()), np.zeros(fu.sum())]
        sp, su = _fit_score(xf, yf, p_feat[~fp], seed), _fit_score(xf, yf, u_feat[~fu], seed)
        t = stats.ttest_ind(sp, su, equal_var=False, alternative="greater" if one_sided else "two-sided")
        per_fold.append({"p_value": float(t.pvalue), "t_statistic": float(t.statistic), "n_suspect": int(len(sp)),
                         "n_reference": int(len(su)), "mean_score_suspect": float(sp.mean()),
                         "mean_score_reference": float(su.mean())})
    method = METHOD if one_sided else METHOD.replace("one-sided", "two-sided")
    if folds != 2:
        method = method.replace("cross-fitted on two halves", "fitted on one half").replace(
            " on each held-out half, p = the larger of the two", " on the held-out half")
    return {"p_value": max(f["p_value"] for f in per_fold), "method": method, "folds": per_fold}
