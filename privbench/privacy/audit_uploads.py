"""Auditing PFDM's upload mechanism itself: how tight is the analytic LDP ε of one upload?

A likelihood-ratio test between two candidate records, run on uploads made by privbench's own
:func:`privbench.core.mechanisms.ldp_upload` (so a wrong ᾱ index, a clip that does not bind or too little noise
shows up), gives a Clopper–Pearson bound and a GDP estimate (docs/accountants.md §4: the test, the candidates, the
flag).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from scipy import special

from ..core.constants import DEFAULT_CONFIDENCE, DEFAULT_DELTA
from ..core.errors import BadInput
from ..core.mechanisms import clip_l2, ldp_upload, upload_sigma
from ..core.schedule import alphas_cumprod, t0_to_model_t
from ..core.scores import cp_upper, stratified_halves, threshold_counts, validate_scores
from ..core.seeding import sub_seed
from .accountants.ldp_analytic import epsilon_analytic_gaussian
from .accountants.ldp_paper import epsilon_paper_bound
from .compare import REPLACE_ONE, UPLOAD_GAME, bound_confidence, comparable_claim

_GDP_ASSUMPTION = ("the mechanism's trade-off curve is that of a Gaussian (μ-GDP); true for PFDM's Gaussian upload, "
                   "so this is an estimate of its actual ε for the candidate pair, at the stated confidence")
_CP_ASSUMPTION = ("trials are independent uploads of a fair-coin choice between the two candidates (true by "
                  "construction here); valid for any mechanism; limited by the number of trials (see ceiling)")


def gdp_epsilon(scores: Any, labels: Any, *, delta: float = DEFAULT_DELTA, confidence: float = DEFAULT_CONFIDENCE, seed: int = 0) -> dict:
    """GDP-based ε estimate (docs/accountants.md §4) with split threshold selection; scores oriented higher = label 1."""
    s, y = validate_scores(scores, labels)
    alpha = 1.0 - float(confidence)
    sel, ev = stratified_halves(y, seed)

    def mu_lb(fp, fn, n_out, n_in):
        fpr = cp_upper(fp, n_out, alpha / 2)
        fnr = cp_upper(fn, n_in, alpha / 2)
        return float(special.ndtri(1.0 - fpr) - special.ndtri(fnr)) if fpr < 1 and fnr < 1 else -math.inf

    ss, ys = s[sel], y[sel]
    thr, fp, fn = threshold_counts(ss, ys)  # entry 0 is +inf ("flag nobody"), then every distinct score
    n_in, n_out = int(ys.sum()), int((~ys).sum())
    best, tau = -math.inf, None
    # candidate thresholds: a grid of at most 400 of them keeps this fast for large trial counts
    idx = np.arange(1, thr.size)
    cand = idx if idx.size <= 400 else idx[np.unique(np.linspace(0, idx.size - 1, 400).astype(int))]
    for i in cand:
        m = mu_lb(int(fp[i]), int(fn[i]), n_out, n_in)
        if m > best:
            best, tau = m, float(thr[i])
    se, ye = s[ev], y[ev]
    if tau is None:
        mu = 0.0
    else:
        fp_e = int(np.count_nonzero(se[~ye] >= tau))
        fn_e = int(np.count_nonzero(se[ye] < tau))
        mu = max(0.0, mu_lb(fp_e, fn_e, int((~ye).sum()), int(ye.sum())))
    eps = 0.0 if mu <= 0 else epsilon_analytic_gaussian(mu / 2.0, 1.0, delta)
    return {"epsilon": float(eps), "mu_lower_bound": float(mu), "threshold": tau, "confidence": float(confidence),
            "delta": float(delta), "assumption": _GDP_ASSUMPTION,
            "threshold_selection": f"split: threshold chosen on a seeded (seed={seed}) stratified half "
                                   f"({sel.size} trials) by its own μ bound, evaluated once on the other half "
                                   f"({ev.size} trials)"}


def _candidates(candidates, clip: float, shape: tuple[int, ...], records=None) -> tuple[torch.Tensor, torch.Tensor, str]:
    d = int(np.prod(shape))
    if isinstance(candidates, (tuple, list)) and len(candidates) == 2:
        x, xp = (torch.as_tensor(c, dtype=torch.float64).reshape(1, *shape) for c in candidates)
        return x, xp, "given pair"
    if candidates == "worst":
        v = torch.full((1, *shape), 1.0 / math.sqrt(d), dtype=torch.float64)
        return clip * v, -clip * v, f"worst case of the analysis: ±C·v along one unit direction (distance 2C = {2 * clip:g})"
    if candidates == "images":
        one = torch.ones((1, *shape), dtype=torch.float64)
        return one, -one, "most distant valid images: all pixels +1 vs all −1 (clipped to norm C)"
    if candidates == "records":
        if records is None or len(records) < 2:
            raise BadInput("candidates='records' needs at least 2 records")
        r = torch.as_tensor(records, dtype=torch.float64).flatten(1)
        if r.shape[0] > 2000:
            r = r[torch.randperm(r.shape[0], generator=torch.Generator().manual_seed(0))[:2000]]
        dist = torch.cdist(r, r)
        i, j = divmod(int(dist.argmax()), dist.shape[1])
        return r[i].reshape(1, *shape), r[j].reshape(1, *shape), "most distant pair of real records"
    raise BadInput(f"candidates={candidates!r}: choose worst, images, records or pass (x, x_prime)")


def audit_upload_mechanism(clip: float, t0: int, *, delta: float = DEFAULT_DELTA, confidence: float = DEFAULT_CONFIDENCE,
                           n_trials: int = 20000, shape: tuple[int, ...] = (1, 8, 8), candidates="worst",
                           records=None, alpha_bars: torch.Tensor | None = None, seed: int = 0,
                           chunk: int = 4096, flag_bound_confidence: float | None = None) -> dict:
    """Empirical ε lower bounds of PFDM's upload mechanism at (C, t0), next to its analytic ε (docs/accountants.md §4).

    ``alpha_bars``: ᾱ of each 0-indexed model timestep (default: :func:`~privbench.core.schedule.alphas_cumprod`);
    ``n_trials`` uploads of each candidate. ``epsilon_lower_bound`` is the Clopper–Pearson bound.
    """
    # lazy: privacy.audit loads scipy.optimize/stats; only when uploads are audited
    from .audit import clopper_pearson_epsilon

    if not isinstance(n_trials, int) or n_trials < 10:
        raise BadInput(f"n_trials={n_trials!r}: must be an integer >= 10")
    own_family = flag_bound_confidence is None
    flag_conf = bound_confidence(confidence, 2) if own_family else float(flag_bound_confidence)
    if not (float(confidence) <= flag_conf < 1.0):
        raise BadInput(f"flag_bound_confidence={flag_bound_confidence!r}: must be in [confidence, 1)")
    ac = (alphas_cumprod() if alpha_bars is None else torch.as_tensor(alpha_bars)).double()
    mt = t0_to_model_t(int(t0), len(ac))
    ab = float(ac[mt])
    sigma = upload_sigma(ab)
    x, xp, desc = _candidates(candidates, float(clip), tuple(shape), records)
    c, _ = clip_l2(x, clip)
    cp_, _ = clip_l2(xp, clip)
    dist = float((c - cp_).flatten().norm())
    mc, mcp = math.sqrt(ab) * c.flatten(), math.sqrt(ab) * cp_.flatten()

    scores, labels = [], []
    for hyp, cand in ((1, x), (0, xp)):
        done, part = 0, 0
        while done < n_trials:
            n = min(chunk, n_trials - done)
            g = torch.Generator().manual_seed(sub_seed(seed, hyp, part))
            xs = cand.expand(n, *cand.shape[1:]).contiguous()
            z = torch.randn(xs.shape, generator=g, dtype=torch.float64)
            up, _ = ldp_upload(xs, float(clip), ab, z)
            u = up.float().double().flatten(1)  # uploads are stored as float32
            s = (((u - mcp) ** 2).sum(1) - ((u - mc) ** 2).sum(1)) / (2.0 * (1.0 - ab))
            scores.append(s.numpy())
            labels.append(np.full(n, hyp, dtype=np.int64))
            done += n
            part += 1
    s, y = np.concatenate(scores), np.concatenate(labels)
    cp = clopper_pearson_epsilon(s, y, delta=delta, confidence=confidence, threshold_selection="split", seed=seed,
                                 both_directions=False)
    gdp = gdp_epsilon(s, y, delta=delta, confidence=confidence, seed=seed)
    analytic = epsilon_analytic_gaussian(float(clip), sigma, delta)
    analytic_pair = epsilon_analytic_gaussian(dist / 2.0, sigma, delta) if dist > 0 else 0.0
    lb = cp["epsilon_lower_bound"]
    cp_f = clopper_pearson_epsilon(s, y, delta=delta, confidence=flag_conf, threshold_selection="split", seed=seed,
                                   both_directions=False)["epsilon_lower_bound"]
    gdp_f = gdp_epsilon(s, y, delta=delta, confidence=flag_conf, seed=seed)["epsilon"]
    claim = comparable_claim(analytic, delta, REPLACE_ONE, empirical=REPLACE_ONE, game=UPLOAD_GAME)
    return {
        "mechanism": "PFDM upload x~ = sqrt(abar)*CLIP(x, C) + sqrt(1-abar)*z (privbench.core.mechanisms.ldp_upload)",
        "attack": "likelihood-ratio test holding the upload and both candidates: "
                  "log p(u|x) - log p(u|x') (the Neyman-Pearson optimal test for the pair)",
        "clip": float(clip), "t0": int(t0), "alpha_bar": ab, "sigma": sigma, "delta": float(delta),
        "confidence": float(confidence), "n_trials": int(n_trials), "candidates": desc, "pair_distance": dist,
        "sensitivity": 2.0 * float(clip),
        "analytic_epsilon": analytic, "analytic_epsilon_pair": analytic_pair,
        "paper_bound": epsilon_paper_bound(float(clip), sigma, delta),
        "epsilon_lower_bound": lb, "ceiling": cp["ceiling"],
        "clopper_pearson": {k: cp[k] for k in ("epsilon_lower_bound", "ceiling", "threshold_selection", "fpr_upper",
                                              "fnr_upper", "n_evaluation")} | {"assumption": _CP_ASSUMPTION},
        "gdp": gdp,
        "exceeds_analytic": bool(cp_f > analytic + 1e-9 or gdp_f > analytic + 1e-9),
        "flag_bounds": {"clopper_pearson": cp_f, "gdp": gdp_f},
        "flag_bound_confidence": flag_conf,
        "flag_confidence": float(confidence) if own_family else None,
        "neighbouring_relation": claim,
        "tightness_gdp": (gdp["epsilon"] / analytic) if analytic > 0 else None,
    }
