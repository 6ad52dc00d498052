"""Membership-inference metrics from per-record scores: exact AUC, ASR and TPR@FPR (docs/conventions.md §1–§2).

ORACLE: :func:`membership_metrics`, :func:`asr` and :func:`tpr_at_fpr` choose their thresholds with the labels they
are evaluated on; :func:`calibrated_metrics` does not (docs/conventions.md §3).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from ..core.errors import BadInput
from ..core.scores import cumulative_counts, max_false_positives, sorted_groups, stratified_halves, validate_scores
from ..core.validation import integer_at_least

__all__ = [
    "roc_points",
    "auc",
    "asr",
    "tpr_at_fpr",
    "membership_metrics",
    "calibrated_metrics",
    "fpr_key",
]

DEFAULT_FPRS = (0.01, 0.001)
#: how TPR@x compares the FPR with x: "le" (FPR ≤ x, the default) or "lt" (FPR < x, Carlini et al.'s LiRA code)
TPR_RULES = ("le", "lt")

# Bootstrap work is chunked so that one chunk holds about this many (resample × record) cells.
_CHUNK_CELLS = 2_000_000


# ----------------------------------------------------------------------------------------------------------
# validation and naming

# the membership metrics that are a TPR at a fixed FPR, with that FPR
FPR_OF = {"tpr_at_1pct_fpr": 0.01, "tpr_at_0_1pct_fpr": 0.001}
FPR_LABEL = {"tpr_at_1pct_fpr": "1%", "tpr_at_0_1pct_fpr": "0.1%"}


def resolvable(metric: str, n_nonmembers: Any) -> bool:
    """Whether ``n_nonmembers`` can resolve the FPR of ``metric`` (x ≥ 1/n); unknown counts are not refused."""
    if metric not in FPR_OF or n_nonmembers is None:
        return True
    try:
        n = int(n_nonmembers)
    except (TypeError, ValueError):
        return True
    return n * FPR_OF[metric] >= 1 - 1e-9


INVERTED_NOTE = ("inverted: the AUC's 95 % CI lies below 0.5, so the attack's premise (members score higher) fails "
                 "on this target; the AUC is not a leakage measure here, and neither is a low value of it")


def is_inverted(auc, ci) -> bool:
    """Whether an AUC is inverted: its bootstrap CI lies entirely below 0.5 (without a CI: never)."""
    try:
        return auc is not None and ci is not None and ci[1] is not None and float(ci[1]) < 0.5
    except (TypeError, ValueError, IndexError):  # a malformed interval decides nothing
        return False


def unresolvable_reason(metric: str, n_nonmembers: int) -> str:
    need = math.ceil(1 / FPR_OF[metric] - 1e-9)
    return (f"n/a: a TPR at {FPR_LABEL[metric]} FPR needs at least {need} non-members; this target was attacked "
            f"with {int(n_nonmembers)}, so its smallest non-zero FPR is 1/{int(n_nonmembers)} = "
            f"{100 / int(n_nonmembers):.2g}%")



def _check_fpr(fpr: Any, name: str = "fpr") -> float:
    try:
        f = float(fpr)
    except (TypeError, ValueError):
        raise BadInput(f"{name}: expected a number in [0, 1], got {fpr!r}") from None
    if not (0.0 <= f <= 1.0) or math.isnan(f):
        raise BadInput(f"{name}: expected a number in [0, 1], got {fpr!r}")
    return f


def fpr_key(fpr: float) -> str:
    """JSON key for a target FPR: 0.01 → ``tpr_at_1pct_fpr``, 0.001 → ``tpr_at_0_1pct_fpr``."""
    pct = f"{round(float(fpr) * 100.0, 10):g}".replace(".", "_")
    return f"tpr_at_{pct}pct_fpr"


def _fpr_label(fpr: float) -> str:
    return f"TPR@{round(float(fpr) * 100.0, 10):g}%FPR"


def _check_rule(rule: Any) -> str:
    if rule not in TPR_RULES:
        raise BadInput(f"tpr_rule: {rule!r}: choose le (FPR <= x) or lt (FPR < x)")
    return rule


def allowed_false_positives(fpr: float, n_neg: int, rule: str = "le") -> int:
    """The most false positives a threshold may have at target FPR ``fpr`` with ``n_neg`` non-members: FP ≤ x·n
    (``le``) or FP < x·n (``lt``), on integer counts."""
    if rule == "lt":
        return max(int(math.ceil(fpr * n_neg - 1e-9)) - 1, 0) if fpr > 0 else 0
    return max_false_positives(fpr, n_neg)


# ----------------------------------------------------------------------------------------------------------
# core: cumulative counts at every distinct threshold


def _metrics_from_counts(
    tp: np.ndarray, fp: np.ndarray, n_pos: int, n_neg: int, fprs: Iterable[float], rule: str = "le"
) -> dict[str, np.ndarray]:
    """AUC, ASR and TPR@FPR for each row of cumulative integer counts (shape (B, G + 1)), exact."""
    tp = tp.astype(np.int64, copy=False)
    fp = fp.astype(np.int64, copy=False)
    denom = float(n_pos) * float(n_neg)
    # trapezoid over the exact ROC = Mann–Whitney with ties counted ½
    twice_u = np.sum((fp[:, 1:] - fp[:, :-1]) * (tp[:, 1:] + tp[:, :-1]), axis=1)
    auc_v = twice_u / (2.0 * denom)
    # ½(TPR + 1 − FPR) = ½ + (TP·n_neg − FP·n_pos) / (2·n_pos·n_neg)
    asr_v = 0.5 + np.max(tp * n_neg - fp * n_pos, axis=1) / (2.0 * denom)
    out = {"auc": auc_v, "asr": asr_v}
    rows = np.arange(tp.shape[0])
    for f in fprs:
        # FP is nondecreasing along a row: the last point with FP ≤ the allowed count has the largest TPR
        last = np.count_nonzero(fp <= allowed_false_positives(f, n_neg, rule), axis=1) - 1
        out[fpr_key(f)] = tp[rows, last] / n_pos
    return out


def _point_metrics(s: np.ndarray, y: np.ndarray, fprs: Iterable[float], rule: str = "le") -> dict[str, float]:
    order, ends, _ = sorted_groups(s)
    yy = y[order]
    tp, fp = cumulative_counts(yy[None, :].astype(np.int64), (~yy)[None, :].astype(np.int64), ends)
    m = _metrics_from_counts(tp, fp, int(y.sum()), int((~y).sum()), fprs, rule)
    return {k: float(v[0]) for k, v in m.items()}


# ----------------------------------------------------------------------------------------------------------
# public single metrics


def roc_points(scores: Any, labels: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact ROC over every distinct threshold: ``(fpr, tpr, thresholds)``, increasing, member iff score ≥
    ``thresholds[i]``; the first point is (0, 0) at +inf, as ``sklearn.metrics.roc_curve(drop_intermediate=False)``."""
    s, y = validate_scores(scores, labels)
    order, ends, thr = sorted_groups(s)
    yy = y[order]
    tp, fp = cumulative_counts(yy[None, :].astype(np.int64), (~yy)[None, :].astype(np.int64), ends)
    n_pos = int(y.sum())
    n_neg = int(y.shape[0] - n_pos)
    return fp[0] / n_neg, tp[0] / n_pos, np.r_[np.inf, thr]


def auc(scores: Any, labels: Any) -> float:
    """Exact rank AUC (Mann–Whitney, ties count ½), members positive, higher score = member."""
    s, y = validate_scores(scores, labels)
    return _point_metrics(s, y, ())["auc"]


def asr(scores: Any, labels: Any) -> float:
    """Attack success rate: max over thresholds of ½(TPR + 1 − FPR). ORACLE: thresholds use these labels."""
    s, y = validate_scores(scores, labels)
    return _point_metrics(s, y, ())["asr"]


def tpr_at_fpr(scores: Any, labels: Any, fpr: float, rule: str = "le") -> float:
    """Largest TPR among thresholds whose FPR ≤ ``fpr`` (``rule="lt"``: FPR < ``fpr``). ORACLE."""
    f = _check_fpr(fpr)
    s, y = validate_scores(scores, labels)
    return _point_metrics(s, y, (f,), _check_rule(rule))[fpr_key(f)]


# ----------------------------------------------------------------------------------------------------------
# bootstrap


def _bootstrap(
    s: np.ndarray, y: np.ndarray, fprs: Iterable[float], n_boot: int, seed: int, rule: str = "le"
) -> dict[str, np.ndarray]:
    """Stratified bootstrap: members and non-members are resampled separately (sizes kept). Vectorised."""
    fprs = tuple(fprs)
    order, ends, _ = sorted_groups(s)
    yy = y[order]
    pos_pos = np.flatnonzero(yy)  # positions (in sorted order) of members
    neg_pos = np.flatnonzero(~yy)
    n_pos, n_neg, n = pos_pos.size, neg_pos.size, yy.size
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_CELLS // max(n, 1))
    acc: dict[str, list[np.ndarray]] = {}
    done = 0
    while done < n_boot:
        b = min(chunk, n_boot - done)
        rows = np.arange(b)[:, None]
        ip = pos_pos[rng.integers(0, n_pos, size=(b, n_pos))]
        ineg = neg_pos[rng.integers(0, n_neg, size=(b, n_neg))]
        wpos = np.bincount((rows * n + ip).ravel(), minlength=b * n).reshape(b, n)
        wneg = np.bincount((rows * n + ineg).ravel(), minlength=b * n).reshape(b, n)
        tp, fp = cumulative_counts(wpos, wneg, ends)
        for k, v in _metrics_from_counts(tp, fp, n_pos, n_neg, fprs, rule).items():
            acc.setdefault(k, []).append(v)
        done += b
    return {k: np.concatenate(v) for k, v in acc.items()}


def _resolution_warnings(fprs: Iterable[float], n_neg: int, rule: str = "le") -> list[str]:
    out = []
    for f in fprs:
        label = _fpr_label(f)
        if f < 1.0 / n_neg or (rule == "lt" and allowed_false_positives(f, n_neg, rule) == 0):
            out.append(
                f"{label} is not resolvable with {n_neg} non-members (smallest FPR step 1/{n_neg}"
                + (", and FPR < x allows no false positive)" if rule == "lt" else ")")
            )
        elif f < 1.0:
            k = allowed_false_positives(f, n_neg, rule)
            if k < 10:
                out.append(
                    f"{label} rests on at most {k} false positive(s) among {n_neg} non-members; it is very noisy"
                )
    return out


def membership_metrics(
    scores: Any, labels: Any, *, bootstrap: int = 1000, seed: int = 0, tpr_rule: str = "le"
) -> dict[str, Any]:
    """AUC, ASR, TPR@1%FPR, TPR@0.1%FPR with stratified-bootstrap 95 % CIs (``ci95``; None with ``bootstrap=0``).
    ORACLE: ``asr`` and the TPRs use thresholds chosen on these same labels (docs/conventions.md §3)."""
    s, y = validate_scores(scores, labels)
    n_boot = integer_at_least(bootstrap, "bootstrap", 0)
    seed = integer_at_least(seed, "seed", 0)
    rule = _check_rule(tpr_rule)
    fprs = DEFAULT_FPRS
    point = _point_metrics(s, y, fprs, rule)
    keys = ["auc", "asr"] + [fpr_key(f) for f in fprs]
    ci: dict[str, list[float] | None] = {k: None for k in keys}
    if n_boot > 0:
        boot = _bootstrap(s, y, fprs, n_boot, seed, rule)
        for k in keys:
            lo, hi = np.percentile(boot[k], [2.5, 97.5])
            ci[k] = [float(lo), float(hi)]
    n_neg = int((~y).sum())
    warnings = _resolution_warnings(fprs, n_neg, rule)
    if s.min() == s.max():
        warnings.append(f"all {s.size} scores are equal ({s[0] + 0.0:g}): the score told no record from another, so "
                        "AUC 0.5 and the TPRs measure nothing (a setting that under- or overflows the score?)")
    a = point["auc"]
    if a < 0.5 and ((ci["auc"] is not None and ci["auc"][1] < 0.5) or (ci["auc"] is None and a < 0.45)):
        warnings.append(
            f"AUC {a:.3f} is below 0.5: the score may have the wrong sign (higher must mean member); "
            "only calibrated_metrics may claim leakage in the flipped direction"
        )
    result: dict[str, Any] = {k: float(point[k]) for k in keys}
    result["ci95"] = ci
    result["warnings"] = warnings
    return result


# ----------------------------------------------------------------------------------------------------------
# calibrated (non-oracle) metrics


def _rates_at(s: np.ndarray, y: np.ndarray, tau: float) -> tuple[float, float]:
    pred = s >= tau
    return float(np.mean(pred[y])), float(np.mean(pred[~y]))


def _calibration_roc(sc: np.ndarray, yc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact ROC of the calibration half: TP and FP counts per threshold (+inf first)."""
    order, ends, thr = sorted_groups(sc)
    yy = yc[order]
    tp, fp = cumulative_counts(yy[None, :].astype(np.int64), (~yy)[None, :].astype(np.int64), ends)
    return tp[0], fp[0], np.r_[np.inf, thr]


def _calibrated_tpr(f: float, fp: np.ndarray, thresholds: np.ndarray, nc_neg: int, rule: str, se: np.ndarray,
                    ye: np.ndarray, warnings: list[str]) -> dict[str, Any]:
    """TPR and FPR on the evaluation half at the threshold calibrated for target FPR ``f`` (appends ``warnings``)."""
    ok = np.flatnonzero(fp <= allowed_false_positives(f, nc_neg, rule))
    i = int(ok[-1])  # largest TPR among qualifying points (TP is nondecreasing along the curve)
    tau = thresholds[i]
    t_e, f_e = _rates_at(se, ye, tau)
    if f < 1.0 / nc_neg:
        warnings.append(
            f"{_fpr_label(f)} cannot be calibrated with {nc_neg} calibration non-members "
            f"(smallest FPR step 1/{nc_neg})"
        )
    if f_e > f:
        warnings.append(
            f"{_fpr_label(f)}: the calibrated threshold gives FPR {f_e:.4g} on the evaluation half "
            f"({int((~ye).sum())} non-members), above the target {f:g}"
        )
    return {"tpr": t_e, "fpr": f_e, "threshold": None if math.isinf(tau) else float(tau)}


def calibrated_metrics(
    scores: Any, labels: Any, *, seed: int = 0, fprs: Iterable[float] = DEFAULT_FPRS, tpr_rule: str = "le"
) -> dict[str, Any]:
    """Non-oracle metrics, chosen on a calibration half, reported on an evaluation half (docs/conventions.md §3;
    keys: docs/cli.md §5 ``calibrated``). A None threshold: only "flag nobody" met the target (tpr = fpr = 0)."""
    s, y = validate_scores(scores, labels)
    seed = integer_at_least(seed, "seed", 0)
    rule = _check_rule(tpr_rule)
    fprs = tuple(_check_fpr(f, "fprs") for f in fprs)
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    if n_pos < 2 or n_neg < 2:
        raise BadInput(
            f"labels: calibrated metrics need at least 2 members and 2 non-members (got {n_pos} and {n_neg})"
        )
    cal, ev = stratified_halves(y, seed)
    sc, yc = s[cal], y[cal]
    se, ye = s[ev], y[ev]

    direction = 1 if _point_metrics(sc, yc, ())["auc"] >= 0.5 else -1
    sc = direction * sc
    se = direction * se

    tp, fp, thresholds = _calibration_roc(sc, yc)
    nc_pos, nc_neg = int(yc.sum()), int((~yc).sum())
    bal = 0.5 * (tp / nc_pos + 1.0 - fp / nc_neg)
    i_best = int(np.argmax(bal))  # first maximum = highest threshold among ties
    acc_tau = thresholds[i_best]

    tpr_e, fpr_e = _rates_at(se, ye, acc_tau)
    result: dict[str, Any] = {
        "direction": int(direction),
        "auc": _point_metrics(se, ye, ())["auc"],
        "accuracy": 0.5 * (tpr_e + 1.0 - fpr_e),
        "accuracy_threshold": None if math.isinf(acc_tau) else float(acc_tau),
    }
    warnings: list[str] = []
    for f in fprs:
        result[fpr_key(f)] = _calibrated_tpr(f, fp, thresholds, nc_neg, rule, se, ye, warnings)
    result["n_calibration"] = int(cal.size)
    result["n_evaluation"] = int(ev.size)
    result["warnings"] = warnings
    return result
