"""Score helpers shared by the metrics and the audits: validation of (scores, labels), exact threshold counts,
stratified halves and the Clopper–Pearson upper bound. Label 1 = member, higher score = member, and a threshold τ
flags ``score >= τ`` (docs/conventions.md §1).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .errors import BadInput


def to_numpy(a: Any, name: str) -> np.ndarray:
    if hasattr(a, "detach") and hasattr(a, "cpu"):  # torch tensor, without importing torch
        a = a.detach().cpu().numpy()
    try:
        arr = np.asarray(a)
    except Exception as exc:  # noqa: BLE001 - whatever numpy raises for an exotic input: one line
        raise BadInput(f"{name}: cannot be read as an array ({exc}); pass a 1-D sequence of numbers") from None
    return arr


def validate_scores(scores: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """Return (scores float64, labels bool), or raise BadInput with one line naming the problem."""
    s = to_numpy(scores, "scores")
    y = to_numpy(labels, "labels")
    if s.ndim != 1:
        raise BadInput(f"scores: expected a 1-D array of per-record scores, got shape {tuple(s.shape)}")
    if y.ndim != 1:
        raise BadInput(f"labels: expected a 1-D array of 0/1 membership labels, got shape {tuple(y.shape)}")
    if s.shape[0] != y.shape[0]:
        raise BadInput(f"scores/labels: lengths differ ({s.shape[0]} scores, {y.shape[0]} labels); they must be aligned")
    if not (s.dtype == bool or np.issubdtype(s.dtype, np.number)):
        raise BadInput(f"scores: expected real numbers, got dtype {s.dtype}")
    if np.iscomplexobj(s):
        raise BadInput("scores: expected real numbers, got complex values")
    s = s.astype(np.float64)
    if not np.all(np.isfinite(s)):
        bad = int(np.count_nonzero(~np.isfinite(s)))
        raise BadInput(f"scores: {bad} value(s) are NaN or infinite; all scores must be finite")
    if y.dtype == bool:
        yb = y
    else:
        if not np.issubdtype(y.dtype, np.number):
            raise BadInput(f"labels: expected 0/1 (1 = member), got dtype {y.dtype}")
        ok = (y == 0) | (y == 1)
        if not np.all(ok):
            raise BadInput("labels: only 0 (non-member) and 1 (member) are allowed")
        yb = y == 1
    n_pos = int(yb.sum())
    n_neg = int(yb.shape[0] - n_pos)
    if n_pos == 0 or n_neg == 0:
        raise BadInput(
            f"labels: both classes are needed (got {n_pos} members and {n_neg} non-members)"
        )
    return s, yb


def max_false_positives(fpr: float, n_neg: int) -> int:
    """Largest false-positive count whose FPR is ≤ fpr (integer comparison, robust to float rounding)."""
    return int(math.floor(fpr * n_neg + 1e-9))


def sorted_groups(s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort descending; return (order, group_end_positions, distinct_thresholds_descending)."""
    order = np.argsort(-s, kind="mergesort")
    ss = s[order]
    # last position of every run of equal scores
    ends = np.flatnonzero(np.r_[ss[1:] != ss[:-1], True])
    return order, ends, ss[ends]


def cumulative_counts(wpos: np.ndarray, wneg: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative TP and FP counts (including the leading (0, 0) point) for each row of weights: ``wpos``/``wneg``
    (B, n) in score-descending order count each record as a positive / negative; returns integer arrays (B, G + 1)."""
    tp = np.cumsum(wpos, axis=1, dtype=np.int64)[:, ends]
    fp = np.cumsum(wneg, axis=1, dtype=np.int64)[:, ends]
    zeros = np.zeros((tp.shape[0], 1), dtype=tp.dtype)
    return np.concatenate([zeros, tp], axis=1), np.concatenate([zeros, fp], axis=1)


def stratified_halves(y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded stratified split into (first, second) index arrays; the first half gets floor(n_c / 2) per class."""
    rng = np.random.default_rng(seed)
    first, second = [], []
    for cls in (True, False):
        idx = np.flatnonzero(y == cls)
        idx = idx[rng.permutation(idx.size)]
        h = idx.size // 2
        first.append(idx[:h])
        second.append(idx[h:])
    return np.sort(np.concatenate(first)), np.sort(np.concatenate(second))


def threshold_counts(s: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every distinct threshold of s (descending, preceded by +inf): (thresholds, FP, FN)."""
    order = np.argsort(-s, kind="mergesort")
    ss, yy = s[order], y[order]
    ends = np.flatnonzero(np.r_[ss[1:] != ss[:-1], True])
    tp = np.r_[0, np.cumsum(yy)[ends]]
    fp = np.r_[0, np.cumsum(~yy)[ends]]
    return np.r_[np.inf, ss[ends]], fp, int(yy.sum()) - tp


def cp_upper(k, n: int, a: float):
    """One-sided (1 − a) Clopper–Pearson upper bound on a rate with k events out of n (1 when k = n); k may be an
    array (then an array is returned)."""
    from scipy import stats  # lazy: scipy.stats only for this bound; core.scores needs numpy only

    k_arr = np.asarray(k, dtype=np.float64)
    full = k_arr >= n
    b = np.where(full, 1.0, n - k_arr)
    out = np.where(full, 1.0, stats.beta.ppf(1.0 - a, k_arr + 1.0, b))
    return float(out) if np.ndim(k) == 0 else out
