"""The member/non-member shift check ("blind baseline"): can the two sets be told apart without the model?

Cross-fitted ridge regression on model-free image (and caption) features, a label-permutation test of its AUC and
the smallest detectable AUC (Das, Zhang and Tramèr 2024; the method and its measured error rates:
docs/external-models.md; keys: docs/cli.md §4.10). Caption document frequencies come from both sets without their
labels, so the permutation test stays exact. At most ``max_per_set`` records of each set are used (seeded).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ..core.errors import BadInput
from .roc import membership_metrics
from .split_verdict import flagged  # the check's verdict, also imported from here by the runs

#: the "material shift" bound on the AUC's 95 % CI lower bound
SHIFT_AUC_BOUND = 0.6
#: the permutation test's level, and the power at which the detectable AUC is stated
ALPHA = 0.05
POWER = 0.8
DEFAULT_PERMUTATIONS = 1000
FEATURE_SEED = 0
N_FILTERS = 32
POOL = 4
MAX_SIDE = 32
DEFAULT_FOLDS = 5
DEFAULT_MAX_PER_SET = 2000
HIST_BINS = 16
CLASSIFIER = ("ridge regression of the member label (intercept, penalty = number of features) on standardised "
              "pixel statistics and a fixed random-convolution feature map, stratified k-fold out-of-fold scores")
CAPTION_FEATURES = 1 << 11
CAPTION_NGRAMS = (1, 5)
CAPTION_CLASSIFIER = ("ridge regression of the member label (intercept) on the pixel features (standardised "
                      "pixel statistics and a fixed random-convolution feature map), on the captions' TF-IDF of "
                      f"hashed character {CAPTION_NGRAMS[0]}-{CAPTION_NGRAMS[1]}-grams, and on both; stratified k-fold out-of-fold scores, one "
                      "max-statistic permutation test over the three")
#: how a verdict names each feature set
FEATURE_NAMES = {"pixels": "pixels", "captions": "captions", "both": "pixels and captions"}


def _pixel_statistics(x: torch.Tensor) -> torch.Tensor:
    n, c = x.shape[:2]
    flat = x.reshape(n, c, -1)
    q = torch.quantile(flat, torch.tensor([0.05, 0.25, 0.5, 0.75, 0.95], dtype=x.dtype), dim=2).permute(1, 2, 0)
    step = 1.0 / 127.5
    levels = (flat + 1.0) * 127.5
    on_grid = ((levels - levels.round()).abs() < 1e-3).float().mean(2)
    dx = (x[..., :, 1:] - x[..., :, :-1]).abs().reshape(n, c, -1).mean(2) if x.shape[-1] > 1 else flat.new_zeros(n, c)
    dy = (x[..., 1:, :] - x[..., :-1, :]).abs().reshape(n, c, -1).mean(2) if x.shape[-2] > 1 else flat.new_zeros(n, c)
    per_channel = torch.cat([
        flat.mean(2, keepdim=True), flat.std(2, keepdim=True, correction=0), flat.amin(2, keepdim=True),
        flat.amax(2, keepdim=True), q, (flat <= -1 + step / 2).float().mean(2, keepdim=True),
        (flat >= 1 - step / 2).float().mean(2, keepdim=True), dx[..., None], dy[..., None], on_grid[..., None],
    ], dim=2)
    idx = ((x.reshape(n, -1) + 1.0) / 2.0 * HIST_BINS).long().clamp_(0, HIST_BINS - 1)
    hist = torch.zeros(n, HIST_BINS, dtype=x.dtype).scatter_add_(1, idx, torch.ones_like(idx, dtype=x.dtype))
    return torch.cat([per_channel.reshape(n, -1), hist / idx.shape[1]], dim=1)


def _random_filters(channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(FEATURE_SEED)
    w = torch.randn(N_FILTERS, channels, 3, 3, generator=g) / (channels * 9) ** 0.5
    b = (torch.rand(N_FILTERS, generator=g) - 0.5) * 0.2
    return w, b


def _random_convolution(x: torch.Tensor) -> torch.Tensor:
    if max(x.shape[-2:]) > MAX_SIDE:
        x = F.adaptive_avg_pool2d(x, (min(x.shape[-2], MAX_SIDE), min(x.shape[-1], MAX_SIDE)))
    w, b = _random_filters(x.shape[1])
    h = F.relu(F.conv2d(x, w, b, padding=1))
    avg = F.adaptive_avg_pool2d(h, (min(POOL, h.shape[-2]), min(POOL, h.shape[-1]))).flatten(1)
    return torch.cat([avg, h.amax(dim=(2, 3))], dim=1)


@torch.no_grad()
def split_features(x: torch.Tensor, batch: int = 1024) -> np.ndarray:
    """The model-free features of images N×C×H×W in [−1, 1] (docs/external-models.md), float64 N×F."""
    out = []
    for i in range(0, len(x), batch):
        xb = x[i:i + batch].detach().to("cpu", torch.float32)
        out.append(torch.cat([_pixel_statistics(xb), _random_convolution(xb)], dim=1).double().numpy())
    return np.concatenate(out) if out else np.zeros((0, 0))


def caption_features(captions) -> np.ndarray:
    """TF-IDF of the captions' hashed character n-grams, rows of unit L2 norm, float64 N×:data:`CAPTION_FEATURES`."""
    # lazy: scikit-learn's text features load only when records carry captions
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

    counts = HashingVectorizer(analyzer="char", ngram_range=CAPTION_NGRAMS, n_features=CAPTION_FEATURES,
                               alternate_sign=False, norm=None).transform([str(c) for c in captions])
    return TfidfTransformer(sublinear_tf=True).fit_transform(counts).toarray()


def _subsample(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """The rows kept of a set of ``n`` records: all, or ``k`` drawn without replacement (seeded), in order."""
    if n <= k:
        return np.arange(n)
    return np.sort(rng.choice(n, size=k, replace=False))


def fold_assignment(labels: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """The fold of each record: stratified (each class shuffled by ``seed``, then dealt round-robin)."""
    rng = np.random.default_rng([seed, 0x5F])
    out = np.empty(len(labels), dtype=np.int64)
    for c in (0, 1):
        idx = np.flatnonzero(labels == c)
        out[idx[rng.permutation(len(idx))]] = np.arange(len(idx)) % folds
    return out


def _fold_design(blocks, tr: np.ndarray, te: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(training rows, held-out rows, ridge penalty) of one fold. ``blocks``: (features, standardise) pairs; an
    unstandardised block (captions) is centred and weighted by √(standardised columns) to weigh as much as a
    standardised one, and λ = standardised columns (at least 1) × blocks."""
    unit = sum(x.shape[1] for x, standardise in blocks if standardise) or 1
    parts_tr, parts_te = [], []
    for x, standardise in blocks:
        x = np.asarray(x, dtype=np.float64)
        mu = x[tr].mean(0)
        if standardise:
            sd = x[tr].std(0)
            sd[sd == 0] = 1.0
        else:
            sd = 1.0 / math.sqrt(unit)
        parts_tr.append((x[tr] - mu) / sd)
        parts_te.append((x[te] - mu) / sd)
    return np.hstack(parts_tr), np.hstack(parts_te), float(unit * len(blocks))


def _ridge_out_of_fold(blocks, fold: np.ndarray, folds: int, y: np.ndarray) -> np.ndarray:
    """Out-of-fold ridge scores of every column of ``y`` (n × P label columns) on the feature ``blocks``; ridge is
    linear in the labels, so each fold is solved once for all columns."""
    out = np.empty(y.shape, dtype=np.float64)
    for g in range(folds):
        te, tr = fold == g, fold != g
        ztr, zte, lam = _fold_design(blocks, tr, te)
        ytr = y[tr]
        mean = ytr.mean(0)
        yc = ytr - mean
        if ztr.shape[1] <= ztr.shape[0]:   # primal: features × features
            w = np.linalg.solve(ztr.T @ ztr + lam * np.eye(ztr.shape[1]), ztr.T @ yc)
        else:                              # dual: records × records
            w = ztr.T @ np.linalg.solve(ztr @ ztr.T + lam * np.eye(ztr.shape[0]), yc)
        out[te] = zte @ w + mean
    return out


def _column_aucs(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The rank AUC (ties ½) of every column of ``scores`` against that column of ``labels`` (same member count)."""
    # lazy: runs.external imports this module
    from scipy.stats import rankdata

    n1 = int(labels[:, 0].sum())
    n0 = len(labels) - n1
    return ((rankdata(scores, axis=0) * labels).sum(0) - n1 * (n1 + 1) / 2) / (n1 * n0)


def _permuted_labels(labels: np.ndarray, fold: np.ndarray, folds: int, seed: int, permutations: int) -> np.ndarray:
    """n × (1 + permutations): the labels, then ``permutations`` copies permuted within each fold (seeded)."""
    rng = np.random.default_rng([seed, 0x9E4])
    y = np.repeat(labels.astype(np.float64)[:, None], permutations + 1, axis=1)
    for g in range(folds):
        idx = np.flatnonzero(fold == g)
        order = np.argsort(rng.random((len(idx), permutations)), axis=0)
        y[idx, 1:] = y[idx, 0][order]
    return y


def _p_value(null: np.ndarray, observed: float) -> float:
    # ≥ with a rounding margin: a permutation that ties the observed AUC counts against it
    return (1 + int((null >= observed - 1e-12).sum())) / (1 + len(null))


def permutation_tests(feature_sets: dict, labels: np.ndarray, *, folds: int, seed: int,
                      permutations: int) -> tuple[dict, np.ndarray]:
    """({name: (out-of-fold scores, observed AUC, p-value)}, permuted AUCs) of each named feature set against 0.5: a
    max-statistic permutation test with the same folds and within-fold label permutations for each."""
    labels = np.asarray(labels)
    fold = fold_assignment(labels, folds, seed)
    y = _permuted_labels(labels, fold, folds, seed, permutations)
    runs = {}
    for name, blocks in feature_sets.items():
        scores = _ridge_out_of_fold(blocks, fold, folds, y)
        runs[name] = (scores[:, 0], _column_aucs(scores, y))
    null = np.max([aucs[1:] for _, aucs in runs.values()], axis=0)
    return {name: (s, float(a[0]), _p_value(null, a[0])) for name, (s, a) in runs.items()}, null


def critical_auc(null: np.ndarray, alpha: float = ALPHA) -> float | None:
    """The AUC the observed one must exceed for p ≤ ``alpha`` (None: these permutations cannot reach ``alpha``)."""
    allowed = math.floor(alpha * (1 + len(null)) + 1e-9) - 1   # permuted AUCs that may reach the observed one
    if allowed < 0:
        return None
    return float(np.sort(null)[::-1][allowed])


def detectable_auc(null: np.ndarray, *, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest out-of-fold AUC the test detects with ``power``: c + z_power · sd(null) (the AUC's spread
    shrinks away from 0.5, Hanley & McNeil 1982, so sd does not understate it). None when no AUC ≤ 1 is."""
    c = critical_auc(null, alpha)
    if c is None:
        return None
    # lazy: runs.external imports this module
    from scipy.stats import norm

    x = c + float(norm.ppf(power)) * float(np.std(null))
    return x if x <= 1.0 else None


def check_permutations(permutations) -> int:
    """``permutations`` if at least 19 (fewer permutations cannot give p ≤ 0.05), else BadInput."""
    if not isinstance(permutations, int) or isinstance(permutations, bool) or permutations < 1 / ALPHA - 1:
        raise BadInput(f"--permutations {permutations!r}: expected an integer >= {round(1 / ALPHA - 1)} "
                       f"(fewer cannot give p <= {ALPHA})")
    return permutations


def _set_result(scores: np.ndarray, p: float, labels: np.ndarray, bootstrap: int, seed: int) -> dict:
    met = membership_metrics(scores, labels, bootstrap=bootstrap, seed=seed)
    ci = met["ci95"]["auc"]
    return {"auc": met["auc"], "ci95": ci, "p_value": p, "shift": bool(p <= ALPHA),
            "material": bool(ci is not None and ci[0] > SHIFT_AUC_BOUND)}


def shift_tests(feature_sets: dict, labels: np.ndarray, *, folds: int = DEFAULT_FOLDS, seed: int = 0,
                permutations: int = DEFAULT_PERMUTATIONS, bootstrap: int = 1000) -> dict:
    """The shift check of several named feature sets (lists of :func:`_fold_design` blocks); keys: docs/cli.md §4.10
    (top level: the set with the highest AUC, the first on ties)."""
    check_permutations(permutations)
    labels = np.asarray(labels, dtype=np.int64)
    runs, null = permutation_tests(feature_sets, labels, folds=folds, seed=seed, permutations=permutations)
    sets = {name: _set_result(s, p, labels, bootstrap, seed) for name, (s, _, p) in runs.items()}
    top = max(sets, key=lambda name: runs[name][1])
    res = sets[top]
    return {"auc": res["auc"], "ci95": res["ci95"], "p_value": res["p_value"], "permutations": int(permutations),
            "alpha": ALPHA, "shift": res["shift"], "detectable_auc": detectable_auc(null), "power": POWER,
            "material": res["material"], "bound": SHIFT_AUC_BOUND, "features": top, "feature_sets": sets}


def shift_test(features: np.ndarray, labels: np.ndarray, *, folds: int = DEFAULT_FOLDS, seed: int = 0,
               permutations: int = DEFAULT_PERMUTATIONS, bootstrap: int = 1000) -> dict:
    """The shift check of model-free ``features`` (n × F, standardised), without the feature-set keys."""
    out = shift_tests({"features": [(features, True)]}, labels, folds=folds, seed=seed, permutations=permutations,
                      bootstrap=bootstrap)
    del out["features"], out["feature_sets"]
    return out


def _check_sets(members: torch.Tensor, nonmembers: torch.Tensor, folds, member_captions, nonmember_captions) -> None:
    if members.dim() != 4 or nonmembers.dim() != 4 or members.shape[1:] != nonmembers.shape[1:]:
        raise BadInput(f"members {tuple(members.shape[1:])} and non-members {tuple(nonmembers.shape[1:])} must be "
                       f"images of one C×H×W shape (a different size alone tells them apart)")
    if not isinstance(folds, int) or isinstance(folds, bool) or folds < 2:
        raise BadInput(f"--folds {folds!r}: expected an integer >= 2")
    if min(len(members), len(nonmembers)) < folds:
        raise BadInput(f"the shift check needs at least {folds} members and {folds} non-members ({folds}-fold "
                       f"cross-validation); got {len(members)} and {len(nonmembers)}")
    if (member_captions is None) != (nonmember_captions is None):
        has, lacks = ("members", "non-members") if nonmember_captions is None else ("non-members", "members")
        raise BadInput(f"the {has} have captions and the {lacks} have none: give captions with both sets or with "
                       f"neither (a caption's presence alone tells them apart)")
    for what, x, caps in (("members", members, member_captions), ("non-members", nonmembers, nonmember_captions)):
        if caps is not None and len(caps) != len(x):
            raise BadInput(f"{len(caps)} captions for {len(x)} {what}: give one caption per record")


def split_shift(members: torch.Tensor, nonmembers: torch.Tensor, *, folds: int = DEFAULT_FOLDS, seed: int = 0,
                bootstrap: int = 1000, max_per_set: int = DEFAULT_MAX_PER_SET,
                permutations: int = DEFAULT_PERMUTATIONS, member_captions=None, nonmember_captions=None) -> dict:
    """The shift check of two record sets N×C×H×W in [−1, 1], with optional captions (one per record, both sets):
    ``check-split --json`` (docs/cli.md §4.10) without ``members``, ``nonmembers`` and ``records_range``."""
    _check_sets(members, nonmembers, folds, member_captions, nonmember_captions)
    check_permutations(permutations)
    rng = np.random.default_rng(seed)
    keep_m, keep_n = _subsample(len(members), max_per_set, rng), _subsample(len(nonmembers), max_per_set, rng)
    pixels = split_features(torch.cat([members[torch.as_tensor(keep_m)], nonmembers[torch.as_tensor(keep_n)]]))
    labels = np.r_[np.ones(len(keep_m), dtype=np.int64), np.zeros(len(keep_n), dtype=np.int64)]
    common = {"folds": folds, "seed": seed, "permutations": permutations, "bootstrap": bootstrap}
    if member_captions is None:
        out = shift_test(pixels, labels, **common)
        n_features, classifier = int(pixels.shape[1]), CLASSIFIER
    else:
        captions = caption_features([member_captions[i] for i in keep_m] + [nonmember_captions[i] for i in keep_n])
        blocks = {"pixels": [(pixels, True)], "captions": [(captions, False)], "both": [(pixels, True),
                                                                                       (captions, False)]}
        out = shift_tests(blocks, labels, **common)
        for name, b in blocks.items():
            out["feature_sets"][name]["n_features"] = int(sum(x.shape[1] for x, _ in b))
        out["detected_by"] = [name for name, r in out["feature_sets"].items() if flagged(r)]
        n_features, classifier = out["feature_sets"][out["features"]]["n_features"], CAPTION_CLASSIFIER
    out.update({"folds": folds, "n_members": int(len(keep_m)), "n_nonmembers": int(len(keep_n)),
                "n_features": n_features, "seed": int(seed), "bootstrap": int(bootstrap), "classifier": classifier})
    out["verdict"] = verdict(out)
    return out


def _by_feature_set(res: dict) -> str:
    """``; by feature set: pixels AUC … (p = …), …`` and which sets flag a shift ('' without captions)."""
    sets = res.get("feature_sets")
    if not sets:
        return ""
    each = ", ".join(f"{name} AUC {r['auc']:.3f} (p = {r['p_value']:.3g})" for name, r in sets.items())
    found = [name for name, r in sets.items() if flagged(r)]
    if not found:
        return f"; by feature set: {each}"
    alone = ("; the captions alone tell the sets apart" if "captions" in found and "pixels" not in found else
             "; the pixels alone tell the sets apart" if "pixels" in found and "captions" not in found else "")
    return f"; by feature set: {each}; flagged on: {', '.join(found)}{alone}"


def verdict(res: dict) -> str:
    """One line: what the shift check found (``res``: :func:`shift_test`'s or :func:`split_shift`'s dict)."""
    ci = res.get("ci95")
    where = f"AUC {res['auc']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
    p = f"p = {res['p_value']:.3g}"
    on = f" on the {FEATURE_NAMES[res['features']]}" if res.get("feature_sets") else ""
    sets = _by_feature_set(res)
    if res["material"]:
        return (f"material member/non-member shift: a model-free classifier{on} tells members from non-members with "
                f"{where} ({p}; 95 % CI lower bound > {res['bound']}); an attack's AUC on these records is not "
                f"evidence of leakage{sets}")
    if res["shift"]:
        return (f"member/non-member shift detected: a model-free classifier{on} reaches {where} ({p}); an attack's "
                f"AUC up to about this is not evidence of leakage{sets}")
    x = res.get("detectable_auc")
    power = f"{round(100 * res['power'])} %"
    seen = (f"detectable: AUC >= {x:.3f} at {power} power" if x is not None else
            f"no AUC is detectable at {power} power with these sizes")
    return f"no member/non-member shift detected ({p}; {where}); {seen}{sets}"
