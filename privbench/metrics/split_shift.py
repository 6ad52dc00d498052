"""The member/non-member shift check ("blind baseline"): can the two sets be told apart without the model?

Das, Zhang and Tramèr (2024, "Blind Baselines Beat Membership Inference Attacks for Foundation Models") showed that
model-free classifiers beat published membership attacks on eight evaluation sets, because members and non-members
came from different distributions. If the records alone separate the two sets, an attack's AUC on them is not
evidence of leakage.

:func:`split_shift` fits a model-free classifier — logistic regression (scikit-learn, L2, C = 0.1) on standardised
features — with stratified k-fold cross-validation (default 5 folds, shuffled by ``seed``) and reports the AUC of its
out-of-fold scores (members positive) with a stratified-bootstrap 95 % interval
(:func:`privbench.metrics.roc.membership_metrics`). The features of an image in [−1, 1] (:func:`split_features`):

* pixel statistics per channel: mean, standard deviation, min, max, the 5/25/50/75/95 % quantiles, the fractions of
  pixels at the bottom and the top 8-bit level, the mean absolute horizontal and vertical differences (sharpness:
  resizing, blur, JPEG), and the fraction of pixels on the 8-bit grid (quantisation); a 16-bin histogram of all
  pixels;
* a fixed random-convolution feature map: 32 random 3×3 filters (weights N(0, 1/fan_in), drawn from a generator
  seeded with :data:`FEATURE_SEED` — the same map for every call), ReLU, average-pooled to 4×4 and max-pooled
  globally (images larger than 32×32 are first area-averaged to 32×32).

A shift is reported when the interval's lower bound exceeds :data:`SHIFT_AUC_BOUND` (0.6). The classifier sees at
most ``max_per_set`` records of each set (a seeded subsample; the result says how many).
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.nn.functional as F

from ..core.errors import BadInput
from .roc import membership_metrics

SHIFT_AUC_BOUND = 0.6
FEATURE_SEED = 0
N_FILTERS = 32
POOL = 4
MAX_SIDE = 32
DEFAULT_FOLDS = 5
DEFAULT_MAX_PER_SET = 2000
HIST_BINS = 16
#: inverse L2 strength of the logistic regression (strong: there are often more features than records)
LOGISTIC_C = 0.1
CLASSIFIER = ("logistic regression (scikit-learn, L2, C=0.1, lbfgs) on standardised pixel statistics and a fixed "
              "random-convolution feature map, stratified k-fold out-of-fold scores")


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
    """The model-free features of images N×C×H×W in [−1, 1] (see the module doc), float64 N×F."""
    out = []
    for i in range(0, len(x), batch):
        xb = x[i:i + batch].detach().to("cpu", torch.float32)
        out.append(torch.cat([_pixel_statistics(xb), _random_convolution(xb)], dim=1).double().numpy())
    return np.concatenate(out) if out else np.zeros((0, 0))


def _subsample(x: torch.Tensor, k: int, rng: np.random.Generator) -> torch.Tensor:
    if len(x) <= k:
        return x
    return x[torch.as_tensor(np.sort(rng.choice(len(x), size=k, replace=False)))]


def out_of_fold_scores(features: np.ndarray, labels: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Scores of each record by a classifier that never saw it (stratified k-fold, shuffled by ``seed``)."""
    # lazy: scikit-learn only when the split check runs (runs.external imports this module)
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    scores = np.zeros(len(labels))
    for train, test in StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(features, labels):
        clf = make_pipeline(StandardScaler(), LogisticRegression(C=LOGISTIC_C, max_iter=1000))
        with warnings.catch_warnings():  # a separable split stops early: its scores are still a valid ranking
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf.fit(features[train], labels[train])
        scores[test] = clf.decision_function(features[test])
    return scores


def split_shift(members: torch.Tensor, nonmembers: torch.Tensor, *, folds: int = DEFAULT_FOLDS, seed: int = 0,
                bootstrap: int = 1000, max_per_set: int = DEFAULT_MAX_PER_SET) -> dict:
    """The shift check of two record sets N×C×H×W in [−1, 1] (see the module doc): ``{auc, ci95, shift,
    bound, folds, n_members, n_nonmembers, n_features, seed, classifier, verdict}``."""
    if members.dim() != 4 or nonmembers.dim() != 4 or members.shape[1:] != nonmembers.shape[1:]:
        raise BadInput(f"members {tuple(members.shape[1:])} and non-members {tuple(nonmembers.shape[1:])} must be "
                       f"images of one C×H×W shape (a different size alone tells them apart)")
    if not isinstance(folds, int) or isinstance(folds, bool) or folds < 2:
        raise BadInput(f"--folds {folds!r}: expected an integer >= 2")
    if min(len(members), len(nonmembers)) < folds:
        raise BadInput(f"the shift check needs at least {folds} members and {folds} non-members ({folds}-fold "
                       f"cross-validation); got {len(members)} and {len(nonmembers)}")
    rng = np.random.default_rng(seed)
    m, n = _subsample(members, max_per_set, rng), _subsample(nonmembers, max_per_set, rng)
    feats = split_features(torch.cat([m, n]))
    labels = np.r_[np.ones(len(m), dtype=np.int64), np.zeros(len(n), dtype=np.int64)]
    scores = out_of_fold_scores(feats, labels, folds, seed)
    met = membership_metrics(scores, labels, bootstrap=bootstrap, seed=seed)
    ci = met["ci95"]["auc"]
    shift = ci is not None and ci[0] > SHIFT_AUC_BOUND
    return {"auc": met["auc"], "ci95": ci, "shift": bool(shift), "bound": SHIFT_AUC_BOUND, "folds": folds,
            "n_members": int(len(m)), "n_nonmembers": int(len(n)), "n_features": int(feats.shape[1]),
            "seed": int(seed), "bootstrap": int(bootstrap), "classifier": CLASSIFIER, "verdict": verdict(met["auc"],
                                                                                                      ci, shift)}


def verdict(auc: float, ci, shift: bool) -> str:
    """One line: what the shift check found."""
    where = f"AUC {auc:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
    if shift:
        return (f"member/non-member shift: a model-free classifier tells members from non-members with {where} "
                f"(95 % CI lower bound > {SHIFT_AUC_BOUND}); an attack's AUC on these records is not evidence of "
                f"leakage")
    return f"no member/non-member shift detected: a model-free classifier reaches {where}"
