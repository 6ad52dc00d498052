"""``ldp-analytic``: the exact ε of PFDM's Gaussian upload (analytic Gaussian mechanism, Balle & Wang 2018, Thm 8;
replace-one, Δ = 2C): μ-GDP with μ = Δ/σ. The number privbench reports for a PFDM upload."""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from ...core.errors import BadInput
from ...core.registry import ACCOUNTANTS
from ...core.validation import open_unit, real
from .base import LDPAccountant, check_clip, check_sigma
from .ldp_paper import epsilon_paper_bound


def _log1mexp(x: float) -> float:
    """log(1 − e^x) for x < 0, accurate at both ends."""
    return math.log(-math.expm1(x)) if x > -math.log(2.0) else math.log1p(-math.exp(x))


def _log_delta_gaussian(mu: float, epsilon: float) -> float:
    """log δ(ε) of μ-GDP: δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ), computed in log space."""
    a = mu / 2.0 - epsilon / mu
    b = -mu / 2.0 - epsilon / mu
    la = float(special.log_ndtr(a))
    x = epsilon + float(special.log_ndtr(b)) - la  # log(e^ε Φ(b) / Φ(a)) < 0
    if x >= 0.0:  # only through rounding, when δ(ε) underflows relative to Φ(a): "δ is 0"
        return -1e300  # finite, so that root-finding still brackets
    return la + _log1mexp(x)


def delta_analytic_gaussian(clip: float, sigma: float, epsilon: float) -> float:
    """The exact δ at which the Gaussian mechanism (Δ = 2C, noise σ) is (ε, δ)-DP (Balle & Wang Thm 8)."""
    c, s = check_clip(clip), check_sigma(sigma)
    e = real(epsilon, "epsilon")
    if not (e >= 0 and math.isfinite(e)):
        raise BadInput(f"epsilon={epsilon!r}: must be a finite number >= 0")
    if math.isinf(s):
        return 0.0
    return math.exp(_log_delta_gaussian(2.0 * c / s, e))


def epsilon_analytic_gaussian(clip: float, sigma: float, delta: float) -> float:
    """The exact (smallest) ε of the Gaussian mechanism with Δ = 2C and noise σ at δ (docs/accountants.md §1)."""
    c, s, d = check_clip(clip), check_sigma(sigma), open_unit(delta, "delta")
    if math.isinf(s):
        return 0.0
    mu = 2.0 * (c / s)  # 2C first could overflow where μ does not
    log_target = math.log(d)
    if _log_delta_gaussian(mu, 0.0) <= log_target:  # δ(0) = 2Φ(μ/2) − 1 already small enough
        return 0.0

    def g(e: float) -> float:
        return _log_delta_gaussian(mu, e) - log_target

    hi = max(epsilon_paper_bound(c, s, d), 1e-12)  # a valid upper bound on the exact ε
    while g(hi) > 0.0 and math.isfinite(hi):  # only through rounding; expand defensively
        hi *= 2.0
    if math.isinf(hi):  # ε ≈ μ²/2 is past a double's range
        return math.inf
    if g(hi) == 0.0:
        return hi
    return float(optimize.brentq(g, 0.0, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500))


@ACCOUNTANTS.register_class
class LDPAnalyticAccountant(LDPAccountant):
    name = "ldp-analytic"
    description = "exact ε of PFDM's Gaussian upload (analytic Gaussian, Balle & Wang 2018; replace-one, Δ=2C)"
    label = "analytic_gaussian"
    aliases = ("agm", "analytic")
    rank = 2
    epsilon = staticmethod(epsilon_analytic_gaussian)
