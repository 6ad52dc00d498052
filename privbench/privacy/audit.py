"""Empirical ε lower bounds from membership scores: Clopper–Pearson and one-run (docs/accountants.md §3).

Labels: 1 = member (IN trial), 0 = non-member; higher score = member. The bounds are lower bounds only, valid under
the returned ``assumption``; :mod:`privbench.privacy.compare` converts a formal ε to their neighbouring relation.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import optimize, stats

from ..core.constants import DEFAULT_CONFIDENCE, DEFAULT_DELTA
from ..core.errors import BadInput
from ..core.scores import cp_upper, threshold_counts
from ..core.scores import stratified_halves as _stratified_halves
from ..core.scores import validate_scores as _validate
from ..core.validation import audit_delta, integer_at_least
from ..core.validation import confidence as check_confidence

__all__ = [
    "clopper_pearson_epsilon",
    "cp_epsilon_from_counts",
    "one_run_epsilon",
    "one_run_epsilon_from_counts",
]

_CP_ASSUMPTION = (
    "Members and non-members are treated as IN and OUT trials of the same randomised mechanism, drawn i.i.d. "
    "(each record's score is an independent trial whose IN/OUT status does not depend on the others); the "
    "bound is about the mechanism that produced these scores (training plus attack) at the stated δ, and it "
    "is a lower bound only: a value of 0 does not show that the model is private."
)

_ONE_RUN_ASSUMPTION = (
    "Steinke-Nasr-Jagielski one-run theorem: each of the m records must be included in training by an "
    "independent fair coin flip, and the guesses may depend on the trained model only. privbench's member "
    "split instead draws exact member/non-member counts from a random permutation (sampling without "
    "replacement), so inclusions are weakly negatively correlated rather than independent; this small gap "
    "is not accounted for in the bound. With that split a member displaces another record (a replace-one game), "
    "so privbench compares the bound with the formal epsilon expressed for replace-one."
)


# ----------------------------------------------------------------------------------------------------------
# Clopper–Pearson


def _eps_from_rates(fpr: np.ndarray, fnr: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """(ε, side) from the two DP constraints (side 1: ln((1−δ−FNR)/FPR), 2: ln((1−δ−FPR)/FNR)); −inf where neither
    ratio is positive, +inf for a rate of 0."""
    fpr = np.asarray(fpr, dtype=np.float64)
    fnr = np.asarray(fnr, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        n1 = 1.0 - delta - fnr
        n2 = 1.0 - delta - fpr
        e1 = np.where(n1 > 0, np.log(np.where(n1 > 0, n1, 1.0)) - np.log(fpr), -np.inf)
        e2 = np.where(n2 > 0, np.log(np.where(n2 > 0, n2, 1.0)) - np.log(fnr), -np.inf)
    side = np.where(e2 > e1, 2, 1)
    return np.maximum(e1, e2), side


def _cp_eps(fp, fn, n_out: int, n_in: int, delta: float, alpha: float):
    """CP bound with total failure probability ``alpha`` (α/2 per rate). Returns (ε≥0, FPR̄, FNR̄, side)."""
    fpr_u = cp_upper(fp, n_out, alpha / 2.0)
    fnr_u = cp_upper(fn, n_in, alpha / 2.0)
    eps, side = _eps_from_rates(fpr_u, fnr_u, delta)
    return np.maximum(eps, 0.0), fpr_u, fnr_u, side


def cp_epsilon_from_counts(
    tp: int, fp: int, n_in: int, n_out: int, delta: float = DEFAULT_DELTA, confidence: float = DEFAULT_CONFIDENCE
) -> float:
    """Fixed-threshold Clopper–Pearson ε lower bound from counts (docs/accountants.md §3.2).

    ``tp`` of ``n_in`` IN trials and ``fp`` of ``n_out`` OUT trials were flagged IN. Valid only if the threshold
    was fixed before seeing these trials.
    """
    n_in = integer_at_least(n_in, "n_in", 1)
    n_out = integer_at_least(n_out, "n_out", 1)
    tp = integer_at_least(tp, "tp", 0)
    fp = integer_at_least(fp, "fp", 0)
    if tp > n_in:
        raise BadInput(f"tp: must be <= n_in ({n_in}), got {tp}")
    if fp > n_out:
        raise BadInput(f"fp: must be <= n_out ({n_out}), got {fp}")
    d = audit_delta(delta)
    alpha = 1.0 - check_confidence(confidence)
    eps, _, _, _ = _cp_eps(fp, n_in - tp, n_out, n_in, d, alpha)
    return float(eps)


def _nontrivial(fp: np.ndarray, fn: np.ndarray, n_out: int) -> np.ndarray:
    """Indices of thresholds other than "flag nobody" and "flag everybody" (never ε > 0)."""
    idx = np.arange(fp.size)
    return idx[(fn < fn[0]) & (fp < n_out)]


def _pareto(fp: np.ndarray, fn: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Keep the (FP, FN) points among ``idx`` that no other point beats in both counts."""
    if idx.size == 0:
        return idx
    f, g = fp[idx], fn[idx]
    # along the threshold sequence FP is nondecreasing and FN nonincreasing
    nxt_dom = np.r_[(f[1:] == f[:-1]) & (g[1:] < g[:-1]), False]  # next point: same FP, fewer FN
    prv_dom = np.r_[False, (g[:-1] == g[1:]) & (f[:-1] < f[1:])]  # previous point: same FN, fewer FP
    return idx[~(nxt_dom | prv_dom)]


_SELECTIONS = ("split", "bonferroni")


def clopper_pearson_epsilon(
    scores: Any,
    labels: Any,
    *,
    delta: float = DEFAULT_DELTA,
    confidence: float = DEFAULT_CONFIDENCE,
    threshold_selection: str = "split",
    seed: int = 0,
    both_directions: bool = True,
) -> dict[str, Any]:
    """Clopper–Pearson empirical ε lower bound from membership scores (docs/accountants.md §3.2).

    ``threshold_selection``: ``"split"`` (seeded by ``seed``) or ``"bonferroni"``; ``both_directions`` also tries
    member iff score ≤ τ. Returns the keys of docs/cli.md §4.6 ``clopper_pearson``: ``threshold`` in raw score
    units (None if none usable), ``direction`` +1 ⇒ member iff score ≥ threshold, −1 ⇒ iff ≤; ``n_evaluation``:
    the records the bound was computed on.
    """
    s, y = _validate(scores, labels)
    d = audit_delta(delta)
    conf = check_confidence(confidence)
    alpha = 1.0 - conf
    if threshold_selection not in _SELECTIONS:
        raise BadInput(f"threshold_selection: expected one of {', '.join(_SELECTIONS)}, got {threshold_selection!r}")
    seed = integer_at_least(seed, "seed", 0)
    n_in = int(y.sum())
    n_out = int(y.size - n_in)
    directions = (1, -1) if both_directions else (1,)

    if threshold_selection == "split":
        best, ceiling, n_eval, how = _split_selection(s, y, n_in, n_out, d, alpha, conf, seed, directions,
                                                      both_directions)
    else:
        best, ceiling, n_eval, how = _bonferroni_selection(s, y, n_in, n_out, d, alpha, directions, both_directions)

    if best is None:
        eps, dr, thr_raw, fu, nu = 0.0, 1, None, None, None
    else:
        eps, dr, tau, fu, nu = best
        thr_raw = float(dr * tau)
    return {
        "epsilon_lower_bound": float(max(eps, 0.0)),
        "confidence": conf,
        "delta": d,
        "threshold_selection": how,
        "threshold": thr_raw,
        "direction": int(dr),
        "fpr_upper": fu,
        "fnr_upper": nu,
        "ceiling": ceiling,
        "n_members": n_in,
        "n_nonmembers": n_out,
        "n_evaluation": n_eval,
        "assumption": _CP_ASSUMPTION,
    }


def _split_selection(s, y, n_in: int, n_out: int, d: float, alpha: float, conf: float, seed: int, directions,
                     both_directions: bool):
    """``threshold_selection="split"``: (best (eps, direction, tau, fpr_u, fnr_u) or None, ceiling, n, how)."""
    if n_in < 2 or n_out < 2:
        raise BadInput(
            f"labels: the split threshold selection needs at least 2 members and 2 non-members "
            f"(got {n_in} and {n_out}); use threshold_selection='bonferroni'"
        )
    sel, ev = _stratified_halves(y, seed)
    ys, ye = y[sel], y[ev]
    ns_in, ns_out = int(ys.sum()), int((~ys).sum())
    ne_in, ne_out = int(ye.sum()), int((~ye).sum())
    cand = None  # (cp_eps_on_selection, smoothed point estimate, direction, tau)
    for dr in directions:
        thr, fp, fn = threshold_counts(dr * s[sel], ys)
        idx = _nontrivial(fp, fn, ns_out)
        if idx.size == 0:
            continue
        e_cp, _, _, _ = _cp_eps(fp[idx], fn[idx], ns_out, ns_in, d, alpha)
        # tie-break (e.g. when every CP bound is 0): a point estimate with ½ pseudo-counts
        e_pt, _ = _eps_from_rates((fp[idx] + 0.5) / (ns_out + 1.0), (fn[idx] + 0.5) / (ns_in + 1.0), d)
        j = int(np.lexsort((e_pt, e_cp))[-1])
        c = (float(e_cp[j]), float(e_pt[j]), dr, float(thr[idx[j]]))
        if cand is None or c[:2] > cand[:2]:
            cand = c
    best = None
    if cand is not None:
        _, _, dr, tau = cand
        se = dr * s[ev]
        fp_e = int(np.count_nonzero(se[~ye] >= tau))
        fn_e = int(np.count_nonzero(se[ye] < tau))
        e, fu, nu, _ = _cp_eps(fp_e, fn_e, ne_out, ne_in, d, alpha)
        best = (float(e), dr, tau, float(fu), float(nu))
    ceiling = float(_cp_eps(0, 0, ne_out, ne_in, d, alpha)[0])
    how = (
        f"split: threshold{' and score direction' if both_directions else ''} chosen on a seeded "
        f"(seed={seed}) stratified half ({sel.size} records) by its own Clopper-Pearson bound, then the bound "
        f"was computed once on the other half ({ev.size} records) at {conf:g} confidence"
    )
    return best, ceiling, int(ev.size), how


def _bonferroni_selection(s, y, n_in: int, n_out: int, d: float, alpha: float, directions, both_directions: bool):
    """``threshold_selection="bonferroni"``: as :func:`_split_selection`, on all records."""
    pts = []  # (direction, thresholds, fp, fn, frontier indices)
    for dr in directions:
        thr, fp, fn = threshold_counts(dr * s, y)
        front = _pareto(fp, fn, _nontrivial(fp, fn, n_out))
        pts.append((dr, thr, fp, fn, front))
    n_cand = sum(p[4].size for p in pts)
    a = alpha / max(n_cand, 1)
    best = None
    for dr, thr, fp, fn, front in pts:
        if front.size == 0:
            continue
        e, fu, nu, _ = _cp_eps(fp[front], fn[front], n_out, n_in, d, a)
        j = int(np.argmax(e))
        c = (float(e[j]), dr, float(thr[front[j]]), float(fu[j]), float(nu[j]))
        if best is None or c[0] > best[0]:
            best = c
    ceiling = float(_cp_eps(0, 0, n_out, n_in, d, alpha)[0])
    how = (
        f"bonferroni: every threshold on the Pareto frontier of (FP, FN) counts "
        f"({n_cand} candidates{', both score directions' if both_directions else ''}) was bounded on all "
        f"{y.size} records at significance {alpha:g}/{max(n_cand, 1)} each, and the best bound is reported"
    )
    return best, ceiling, int(y.size), how


# ----------------------------------------------------------------------------------------------------------
# one-run auditing (Steinke, Nasr, Jagielski 2023)


def _one_run_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """p(ε) = P[Bin(r, q) ≥ v] + α·δ·2m with q = 1/(1+e^−ε), α = max_{i=1..v} P[v > Bin(r, q) ≥ v−i]/i."""
    q = 1.0 / (1.0 + math.exp(-eps))
    tail = float(stats.binom.sf(v - 1, r, q))
    corr = 0.0
    if v >= 1 and delta > 0:
        i = np.arange(1, v + 1)
        window = np.cumsum(stats.binom.pmf(v - i, r, q))  # P[v−i ≤ Bin < v]
        corr = float(np.max(window / i))
    return min(1.0, tail + corr * delta * 2.0 * m)


def one_run_epsilon_from_counts(
    m: int, r: int, v: int, delta: float = DEFAULT_DELTA, confidence: float = DEFAULT_CONFIDENCE
) -> float:
    """Largest ε with p(ε) < 1 − confidence for ``v`` correct out of ``r`` guesses on ``m`` records (docs/accountants.md §3.3).

    A doubled bracket, then Brent's method (p is nondecreasing in ε); 0 when even ε = 0 is not rejected."""
    m = integer_at_least(m, "m", 1)
    r = integer_at_least(r, "r", 0)
    v = integer_at_least(v, "v", 0)
    if not (v <= r <= m):
        raise BadInput(f"m/r/v: need 0 <= v <= r <= m, got m={m}, r={r}, v={v}")
    d = audit_delta(delta)
    p = 1.0 - check_confidence(confidence)
    return _one_run_bound(m, r, v, d, p)


@lru_cache(maxsize=65536)
def _one_run_bound(m: int, r: int, v: int, d: float, p: float) -> float:
    """:func:`one_run_epsilon_from_counts` on checked arguments at significance ``p`` (cached: counts repeat)."""
    if r == 0 or _one_run_p_value(m, r, v, 0.0, d) >= p:
        return 0.0
    lo, hi = 0.0, 1.0
    while _one_run_p_value(m, r, v, hi, d) < p:
        lo, hi = hi, hi * 2.0
        if hi > 1e4:  # pragma: no cover - p(ε) → 1 as ε grows whenever r ≥ 1
            return lo
    # the answer is the largest evaluated ε still rejected, within 1e-10 of the root of p(ε) − p
    best = [lo]

    def g(e: float) -> float:
        gap = _one_run_p_value(m, r, v, e, d) - p
        if gap < 0 and e > best[0]:
            best[0] = e
        return gap

    optimize.brentq(g, lo, hi, xtol=1e-10, rtol=4 * np.finfo(float).eps, maxiter=200)
    return float(best[0])


def _guess(y: np.ndarray, r: int, rng_order: np.ndarray) -> int:
    """Correct guesses when the top ⌊r/2⌋ scores are called members and the bottom ⌈r/2⌉ non-members."""
    ys = y[rng_order]
    k_top = r // 2
    k_bot = r - k_top
    correct = int(ys[:k_top].sum())
    if k_bot:
        correct += int((~ys[ys.size - k_bot :]).sum())
    return correct


def one_run_epsilon(
    scores: Any,
    labels: Any,
    *,
    delta: float = DEFAULT_DELTA,
    confidence: float = DEFAULT_CONFIDENCE,
    n_guesses: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """One-run ε lower bound (Steinke, Nasr & Jagielski 2023; docs/accountants.md §3.3).

    Guesses assume higher = member: a wrongly-signed score gets 0 here, unlike :func:`clopper_pearson_epsilon`.
    ``n_guesses=None`` keeps the best of up to 10 guess counts, each bounded at α/k (Bonferroni); a count fixed
    in advance is bounded at α. Returns the keys of docs/cli.md §4.6 ``one_run`` plus ``confidence_per_count``
    and ``n_counts_tried``; ``ceiling`` is the bound when every guess is correct.
    """
    s, y = _validate(scores, labels)
    d = audit_delta(delta)
    conf = check_confidence(confidence)
    seed = integer_at_least(seed, "seed", 0)
    m = int(y.size)
    n_in = int(y.sum())
    n_out = m - n_in

    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.permutation(m), -s))  # score descending, random among ties

    alpha = 1.0 - conf
    if n_guesses is None:
        eps, r, v, grid, a_count, ceiling, selection = _best_guess_count(y, order, d, alpha, conf)
    else:
        r = integer_at_least(n_guesses, "n_guesses", 1)
        if r > m:
            raise BadInput(f"n_guesses: must be between 1 and the number of records ({m}), got {r}")
        grid = [r]
        a_count = alpha
        v = _guess(y, r, order)
        eps = _one_run_bound(m, r, v, d, a_count)
        ceiling = _one_run_bound(m, r, r, d, a_count)
        selection = f"r = {r} fixed by the caller (in advance of the scores), bounded at {conf:g}"

    warnings = []
    if n_in != n_out:
        warnings.append(
            f"members ({n_in}) and non-members ({n_out}) are unbalanced; the theorem assumes each record is a "
            "member with probability 1/2"
        )
    return {
        "epsilon_lower_bound": float(eps),
        "ceiling": float(ceiling),
        "n_guesses": int(r),
        "n_correct": int(v),
        "m": m,
        "confidence": conf,
        "confidence_per_count": float(1.0 - a_count),
        "n_counts_tried": len(grid),
        "delta": d,
        "n_guesses_selection": selection,
        "n_members": n_in,
        "n_nonmembers": n_out,
        "assumption": _ONE_RUN_ASSUMPTION,
        "warnings": warnings,
    }


def _best_guess_count(y, order, d: float, alpha: float, conf: float):
    """``n_guesses=None``: (ε, r, v, counts tried, α per count, ceiling, the sentence)."""
    m = int(y.size)
    grid = sorted({min(m, max(2, 2 * int(round(f * m / 2.0)))) for f in np.arange(1, 11) / 10.0})
    a_count = alpha / len(grid)
    best = None
    for r in grid:
        v = _guess(y, r, order)
        e = _one_run_bound(m, r, v, d, a_count)
        if best is None or e > best[0]:
            best = (e, r, v)
    eps, r, v = best
    ceiling = max(_one_run_bound(m, g, g, d, a_count) for g in grid)
    selection = (
        f"r chosen as the best of {len(grid)} guess counts ({', '.join(map(str, grid))}) on the same data, "
        f"Bonferroni-corrected for that choice: each count was bounded at confidence 1 - {alpha:g}/{len(grid)} "
        f"= {1.0 - a_count:.4g}, so the reported maximum holds at {conf:g}"
    )
    return eps, r, v, grid, a_count, ceiling, selection
