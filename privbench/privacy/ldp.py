"""LDP accounting of PFDM's one-shot noised upload (docs/accountants.md §1).

A client uploads, once per record, x̃ = √ᾱ_{t0}·CLIP(x, C) + √(1−ᾱ_{t0})·z with z ~ N(0, I).
Dividing by √ᾱ_{t0} (post-processing) gives the Gaussian mechanism CLIP(x, C) + σ·z with

    σ² = (1 − ᾱ_{t0}) / ᾱ_{t0},   replace-one L2 sensitivity Δ = 2C

(two records of norm ≤ C differ by at most 2C). Local DP compares any two inputs, so the relation
is replace-one. t0 is 1-indexed as in the paper: ᾱ_{t0} = ∏_{s=1..t0}(1 − β_s) =
``alphas_cumprod[t0 - 1]`` (the shift lives in ``privbench.core.schedule.t0_to_model_t``).

Analyses, all for one upload of one record:

- ``paper_bound``: Theorem 5.1, ε = 2C²/σ² + C·√(8 log(1/δ)/σ²);
- ``rdp``: the classical RDP → (ε, δ) conversion, min over α > 1 of αΔ²/(2σ²) + log(1/δ)/(α−1),
  which equals the paper bound (it is the zCDP closed form ρ + 2√(ρ log 1/δ), ρ = Δ²/(2σ²));
- ``rdp_improved``: the improved conversion (Balle et al. 2020 / Canonne–Kamath–Steinke), the one
  opacus uses for DP-SGD;
- ``analytic_gaussian``: the exact ε of the Gaussian mechanism (Balle & Wang 2018, Thm 8), i.e.
  μ-GDP with μ = Δ/σ. This is the number privbench reports.

Not covered by any of them: the labels (sent in the clear), per-client class counts and dataset
size, the client's local model (trained on raw data, no DP), and re-uploads of the same record
(which compose).
"""
from __future__ import annotations

import math
import numbers
from functools import lru_cache
from typing import Callable, Optional

import numpy as np
from scipy import optimize, special

from ..core.errors import BadInput
from ..core.validation import open_unit, positive_finite, real
from .accountants.base import ldp_accountants

LDP_BASIS = ("analytic-gaussian LDP per record, per single upload (replace-one, Δ=2C); labels, class counts "
             "and the client's local model are not covered")

ACCOUNT_LDP_BASIS = ("local DP per record, per single upload x̃ = √ᾱ·CLIP(x, C) + √(1−ᾱ)·z, i.e. a Gaussian "
                     "mechanism with σ² = (1−ᾱ_{t0})/ᾱ_{t0}; replace-one neighbouring relation, L2 sensitivity "
                     "Δ = 2C; paper_bound = Theorem 5.1 (= classical RDP conversion), analytic_gaussian = exact "
                     "(Balle & Wang 2018), every other key of epsilon a registered LDP accountant's label; labels, class counts, the client's local model and re-uploads "
                     "(composition) are not covered; assumes z is secret (a run's basis states its "
                     "dp.noise_source: seeded noise can be regenerated from the run's seed)")

METHODS = ("paper_bound", "rdp", "rdp_improved", "analytic_gaussian")
_ALIASES = {"thm51": "paper_bound", "paper": "paper_bound", "rdp_classical": "rdp", "agm": "analytic_gaussian",
            "analytic": "analytic_gaussian"}
_SCHEDULES = ("linear", "scaled_linear", "squaredcos_cap_v2")


# --------------------------------------------------------------------------------------------- validation

def _check_clip(clip) -> float:
    c = real(clip, "clip")
    if not (c > 0 and math.isfinite(c)):
        raise BadInput(f"clip={clip!r}: must be a finite number > 0 (the L2 clipping norm C)")
    return c


def _check_sigma(sigma) -> float:
    s = real(sigma, "sigma")
    if not s > 0:  # +inf is allowed (no signal left): ε = 0
        raise BadInput(f"sigma={sigma!r}: must be > 0")
    return s


def _check_method(method: str) -> str:
    """A built-in analysis (or alias), or the label or name of a registered LDP accountant → its label."""
    m = _ALIASES.get(method, method) if isinstance(method, str) else method
    if m in METHODS:
        return m
    for acc in ldp_accountants():
        if m in (acc.label, acc.name):
            return acc.label
    known = list(METHODS) + [a.label for a in ldp_accountants() if a.label not in METHODS]
    raise BadInput(f"method={method!r}: must be one of {', '.join(known)}")


def _epsilon_function(label: str) -> Callable[[float, float, float], float]:
    if label in _EPSILON_FUNCS:
        return _EPSILON_FUNCS[label]
    return next(a.epsilon for a in ldp_accountants() if a.label == label)


def _check_t0(t0, num_timesteps: int) -> int:
    if isinstance(t0, bool) or not isinstance(t0, numbers.Integral) or not (1 <= int(t0) <= num_timesteps):
        raise BadInput(f"t0={t0!r}: must be an integer in [1, {num_timesteps}] (1-indexed as in the paper)")
    return int(t0)


def _check_schedule(num_timesteps, beta_start, beta_end, beta_schedule) -> tuple[int, float, float, str]:
    if isinstance(num_timesteps, bool) or not isinstance(num_timesteps, numbers.Integral) or num_timesteps < 1:
        raise BadInput(f"steps={num_timesteps!r}: the number of diffusion timesteps must be an integer >= 1")
    bs, be = real(beta_start, "beta_start"), real(beta_end, "beta_end")
    for name, v in (("beta_start", bs), ("beta_end", be)):
        if not (0.0 < v < 1.0):
            raise BadInput(f"{name}={v!r}: must be in (0, 1)")
    if beta_schedule not in _SCHEDULES:
        raise BadInput(f"beta_schedule={beta_schedule!r}: must be one of {', '.join(_SCHEDULES)}")
    return int(num_timesteps), bs, be, beta_schedule


@lru_cache(maxsize=32)
def _alpha_bars(num_timesteps: int, beta_start: float, beta_end: float, beta_schedule: str) -> np.ndarray:
    """ᾱ for 0-indexed model timesteps (float64), from the project's one schedule helper."""
    from ..core.schedule import alphas_cumprod  # lazy: core.schedule imports torch; privacy.ldp does not

    ac = alphas_cumprod(num_timesteps, beta_start, beta_end, beta_schedule).double().cpu().numpy()
    if ac.shape != (num_timesteps,) or not np.all(np.isfinite(ac)) or np.any(ac < 0) or np.any(ac >= 1) \
            or np.any(np.diff(ac) > 0):
        raise BadInput(f"beta schedule ({beta_schedule}, {beta_start}..{beta_end}, T={num_timesteps}): "
                       "does not give a decreasing ᾱ in [0, 1)")
    ac.setflags(write=False)
    return ac


def _sigma_from_alpha_bar(ab: float) -> float:
    return math.inf if ab <= 0.0 else math.sqrt((1.0 - ab) / ab)


def alpha_bar(t0: int, *, num_timesteps: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02,
              beta_schedule: str = "linear") -> float:
    """ᾱ_{t0} = ∏_{s=1..t0}(1 − β_s) for the paper's 1-indexed t0 (= ``alphas_cumprod[t0 - 1]``)."""
    from ..core.schedule import t0_to_model_t  # lazy: core.schedule imports torch; privacy.ldp does not

    T, bs, be, sch = _check_schedule(num_timesteps, beta_start, beta_end, beta_schedule)
    t0 = _check_t0(t0, T)
    return float(_alpha_bars(T, bs, be, sch)[t0_to_model_t(t0, T)])


def ldp_sigma(t0: int, *, num_timesteps: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02,
              beta_schedule: str = "linear") -> float:
    """σ = √((1 − ᾱ_{t0})/ᾱ_{t0}) of the upload rescaled by 1/√ᾱ_{t0}."""
    return _sigma_from_alpha_bar(alpha_bar(t0, num_timesteps=num_timesteps, beta_start=beta_start,
                                           beta_end=beta_end, beta_schedule=beta_schedule))


# --------------------------------------------------------------------------------------------- ε analyses

def epsilon_paper_bound(clip: float, sigma: float, delta: float) -> float:
    """Theorem 5.1: ε = 2C²/σ² + C·√(8 log(1/δ)/σ²)."""
    c, s, d = _check_clip(clip), _check_sigma(sigma), open_unit(delta, "delta")
    if math.isinf(s):
        return 0.0
    return 2.0 * c * c / (s * s) + c * math.sqrt(8.0 * math.log(1.0 / d) / (s * s))


def epsilon_rdp(clip: float, sigma: float, delta: float) -> float:
    """Classical RDP → DP conversion of the Gaussian mechanism (Δ = 2C):
    min over α > 1 of αρ + log(1/δ)/(α − 1), ρ = Δ²/(2σ²). The minimum is at α* = 1 + √(log(1/δ)/ρ)
    (the objective is convex in α), which gives ρ + 2√(ρ log 1/δ) — the paper bound."""
    c, s, d = _check_clip(clip), _check_sigma(sigma), open_unit(delta, "delta")
    if math.isinf(s):
        return 0.0
    rho = (2.0 * c) ** 2 / (2.0 * s * s)
    log_inv_delta = math.log(1.0 / d)
    alpha = 1.0 + math.sqrt(log_inv_delta / rho)
    return alpha * rho + log_inv_delta / (alpha - 1.0)


def epsilon_rdp_improved(clip: float, sigma: float, delta: float) -> float:
    """Improved RDP → DP conversion (Balle et al. 2020 Thm 21; the one opacus uses):
    min over α > 1 of αρ + log((α−1)/α) − (log δ + log α)/(α − 1), floored at 0."""
    c, s, d = _check_clip(clip), _check_sigma(sigma), open_unit(delta, "delta")
    if math.isinf(s):
        return 0.0
    rho = (2.0 * c) ** 2 / (2.0 * s * s)
    log_delta = math.log(d)

    def f(u: float) -> float:  # u = log(α − 1), so α > 1 for every real u
        am1 = math.exp(u)
        a = 1.0 + am1
        return a * rho + math.log(am1 / a) - (log_delta + math.log(a)) / am1

    us = np.linspace(-25.0, 25.0, 501)
    vals = np.array([f(u) for u in us])
    i = int(np.argmin(vals))
    lo, hi = us[max(i - 1, 0)], us[min(i + 1, len(us) - 1)]
    res = optimize.minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12})
    best = min(float(res.fun), float(vals[i]))
    return max(best, 0.0)


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
    c, s = _check_clip(clip), _check_sigma(sigma)
    e = real(epsilon, "epsilon")
    if not (e >= 0 and math.isfinite(e)):
        raise BadInput(f"epsilon={epsilon!r}: must be a finite number >= 0")
    if math.isinf(s):
        return 0.0
    return math.exp(_log_delta_gaussian(2.0 * c / s, e))


def epsilon_analytic_gaussian(clip: float, sigma: float, delta: float) -> float:
    """The exact (smallest) ε of the Gaussian mechanism with Δ = 2C and noise σ at δ (Balle & Wang 2018):
    the root of δ(ε) = δ, found with brentq on log δ(ε) (decreasing in ε)."""
    c, s, d = _check_clip(clip), _check_sigma(sigma), open_unit(delta, "delta")
    if math.isinf(s):
        return 0.0
    mu = 2.0 * c / s
    log_target = math.log(d)
    if _log_delta_gaussian(mu, 0.0) <= log_target:  # δ(0) = 2Φ(μ/2) − 1 already small enough
        return 0.0

    def g(e: float) -> float:
        return _log_delta_gaussian(mu, e) - log_target

    hi = max(epsilon_paper_bound(c, s, d), 1e-12)  # a valid upper bound on the exact ε
    while g(hi) > 0.0:  # only through rounding; expand defensively
        hi *= 2.0
    if g(hi) == 0.0:
        return hi
    return float(optimize.brentq(g, 0.0, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500))


_EPSILON_FUNCS: dict[str, Callable[[float, float, float], float]] = {
    "paper_bound": epsilon_paper_bound,
    "rdp": epsilon_rdp,
    "rdp_improved": epsilon_rdp_improved,
    "analytic_gaussian": epsilon_analytic_gaussian,
}


def pfdm_epsilon(clip: float, t0: int, delta: float, method: str = "analytic_gaussian", *,
                 num_timesteps: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02,
                 beta_schedule: str = "linear") -> float:
    """ε of one PFDM upload at 1-indexed t0 under ``method`` (paper_bound | rdp | rdp_improved |
    analytic_gaussian; aliases thm51, agm)."""
    m = _check_method(method)
    sigma = ldp_sigma(t0, num_timesteps=num_timesteps, beta_start=beta_start, beta_end=beta_end,
                      beta_schedule=beta_schedule)
    return _epsilon_function(m)(clip, sigma, delta)


def min_t0(clip: float, epsilon: float, delta: float, method: str = "analytic_gaussian", *,
           num_timesteps: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02,
           beta_schedule: str = "linear") -> Optional[int]:
    """The smallest 1-indexed t0 in [1, T] whose ε ≤ ``epsilon`` under ``method``; None if even t0 = T
    does not reach it. Binary search: ε decreases in t0 because ᾱ_{t0} decreases."""
    c, e, d, m = _check_clip(clip), positive_finite(epsilon, "epsilon"), open_unit(delta, "delta"), _check_method(method)
    T, bs, be, sch = _check_schedule(num_timesteps, beta_start, beta_end, beta_schedule)
    abar = _alpha_bars(T, bs, be, sch)
    f = _epsilon_function(m)

    def eps_at(t0: int) -> float:
        return f(c, _sigma_from_alpha_bar(float(abar[t0 - 1])), d)

    if eps_at(T) > e:
        return None
    lo, hi = 1, T  # invariant: eps_at(hi) <= e
    if eps_at(lo) <= e:
        return lo
    while hi - lo > 1:  # invariant: eps_at(lo) > e >= eps_at(hi)
        mid = (lo + hi) // 2
        if eps_at(mid) <= e:
            hi = mid
        else:
            lo = mid
    return hi


def max_clip(t0: int, epsilon: float, delta: float, method: str = "analytic_gaussian", *,
             num_timesteps: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02,
             beta_schedule: str = "linear") -> float:
    """The largest clip C whose ε at 1-indexed ``t0`` is ≤ ``epsilon`` under ``method`` (ε grows with C/σ:
    bisection on C to 1e-10 relative, the lower end returned so ε(C) ≤ ``epsilon``)."""
    e, d, m = positive_finite(epsilon, "epsilon"), open_unit(delta, "delta"), _check_method(method)
    sigma = ldp_sigma(t0, num_timesteps=num_timesteps, beta_start=beta_start, beta_end=beta_end,
                      beta_schedule=beta_schedule)
    f = _epsilon_function(m)
    lo, hi = 0.0, 1.0
    while f(hi, sigma, d) <= e:  # ε → ∞ as C → ∞: a finite upper end exists
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-10 * hi:  # invariant: ε(lo) ≤ e < ε(hi)
        mid = (lo + hi) / 2
        if mid > 0 and f(mid, sigma, d) <= e:
            lo = mid
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------------------------- reports

def account_ldp(clip: float, t0: int, delta: float, epsilon: Optional[float] = None, steps: int = 1000,
                beta_start: float = 1e-4, beta_end: float = 0.02, beta_schedule: str = "linear") -> dict:
    """The ``privbench account ldp --json`` object (docs/cli.md §4.4). Extra top-level keys: epsilon_rdp_improved,
    alpha_bar, sensitivity, basis and, with a target, target_epsilon."""
    c, d = _check_clip(clip), open_unit(delta, "delta")
    T, bs, be, sch = _check_schedule(steps, beta_start, beta_end, beta_schedule)
    t0 = _check_t0(t0, T)
    target = None if epsilon is None else positive_finite(epsilon, "epsilon")
    ab = alpha_bar(t0, num_timesteps=T, beta_start=bs, beta_end=be, beta_schedule=sch)
    sigma = _sigma_from_alpha_bar(ab)
    out: dict = {
        "clip": c,
        "t0": t0,
        "delta": d,
        "sigma": sigma,
        # every registered LDP accountant under its label (built-in: paper_bound, rdp, analytic_gaussian)
        "epsilon": {a.label: float(a.epsilon(c, sigma, d)) for a in ldp_accountants()},
        "epsilon_rdp_improved": epsilon_rdp_improved(c, sigma, d),
        "alpha_bar": ab,
        "sensitivity": 2.0 * c,
        "basis": ACCOUNT_LDP_BASIS,
    }
    if target is not None:
        kw = dict(num_timesteps=T, beta_start=bs, beta_end=be, beta_schedule=sch)
        out["target_epsilon"] = target
        out["min_t0"] = {
            "paper_bound": min_t0(c, target, d, "paper_bound", **kw),
            "analytic_gaussian": min_t0(c, target, d, "analytic_gaussian", **kw),
        }
    return out


def pfdm_privacy(clip: float, t0: int, delta: float, *, num_timesteps: int = 1000, beta_start: float = 1e-4,
                 beta_end: float = 0.02, beta_schedule: str = "linear", noise_source: str = "seeded") -> dict:
    """The ``privacy`` block of a PFDM result (shared model / pipeline): the exact analytic-Gaussian ε of one
    upload, plus the paper's Theorem 5.1 value for reproduction. The basis ends with the noise source
    (``dp.noise_source``); seeded noise adds ``noise_label``."""
    from ..core.mechanisms import SEEDED_NOISE_LABEL, noise_source_basis  # torch: only when a run asks

    c, d = _check_clip(clip), open_unit(delta, "delta")
    sigma = ldp_sigma(t0, num_timesteps=num_timesteps, beta_start=beta_start, beta_end=beta_end,
                      beta_schedule=beta_schedule)
    out = {
        "epsilon": epsilon_analytic_gaussian(c, sigma, d),
        "delta": d,
        "basis": f"{LDP_BASIS}; {noise_source_basis(noise_source)}",
        "epsilon_paper_bound": epsilon_paper_bound(c, sigma, d),
        "accountant": "analytic_gaussian",
        "noise_source": noise_source,
    }
    if noise_source == "seeded":
        out["noise_label"] = SEEDED_NOISE_LABEL
    return out
