"""LDP accounting of PFDM's one-shot noised upload (docs/accountants.md §1: mechanism, σ, Δ = 2C, t0 indexing).

The analyses are the registered LDP accountants (``privacy/accountants/``; a ``method`` argument takes a label, a
registry name or an accountant's ``aliases``) and ``rdp_improved`` here, reported beside them.
"""
from __future__ import annotations

import math
import numbers
from functools import lru_cache
from typing import Callable, Optional

import numpy as np
from scipy import optimize

from ..core.errors import BadInput
from ..core.sections import MAX_TIMESTEPS
from ..core.validation import open_unit, positive_finite, real
from .accountants.base import check_clip, check_sigma, ldp_accountant, ldp_accountants
from .accountants.ldp_analytic import epsilon_analytic_gaussian
from .accountants.ldp_paper import epsilon_paper_bound

LDP_BASIS = ("analytic-gaussian LDP per record, per single upload (replace-one, Δ=2C); labels, class counts "
             "and the client's local model are not covered")

ACCOUNT_LDP_BASIS = ("local DP per record, per single upload x̃ = √ᾱ·CLIP(x, C) + √(1−ᾱ)·z, i.e. a Gaussian "
                     "mechanism with σ² = (1−ᾱ_{t0})/ᾱ_{t0}; replace-one neighbouring relation, L2 sensitivity "
                     "Δ = 2C; paper_bound = Theorem 5.1 (= classical RDP conversion), analytic_gaussian = exact "
                     "(Balle & Wang 2018), every other key of epsilon a registered LDP accountant's label; labels, class counts, the client's local model and re-uploads "
                     "(composition) are not covered; assumes z is secret (a run's basis states its "
                     "dp.noise_source: seeded noise can be regenerated from the run's seed)")

_SCHEDULES = ("linear", "scaled_linear", "squaredcos_cap_v2")


def _epsilon_function(method: str) -> Callable[[float, float, float], float]:
    """The ε analysis ``method`` names: a registered LDP accountant (label, name or alias) or ``rdp_improved``."""
    if method == "rdp_improved":
        return epsilon_rdp_improved
    acc = ldp_accountant(method) if isinstance(method, str) else None
    if acc is None:
        known = [a.label for a in ldp_accountants()] + ["rdp_improved"]
        raise BadInput(f"method={method!r}: must be one of {', '.join(known)}")
    return acc.epsilon


def _check_t0(t0, num_timesteps: int) -> int:
    if isinstance(t0, bool) or not isinstance(t0, numbers.Integral) or not (1 <= int(t0) <= num_timesteps):
        raise BadInput(f"t0={t0!r}: must be an integer in [1, {num_timesteps}] (1-indexed as in the paper)")
    return int(t0)


def _check_schedule(num_timesteps, beta_start, beta_end, beta_schedule) -> tuple[int, float, float, str]:
    if isinstance(num_timesteps, bool) or not isinstance(num_timesteps, numbers.Integral) or \
            not 1 <= num_timesteps <= MAX_TIMESTEPS:
        raise BadInput(f"steps={num_timesteps!r}: the number of diffusion timesteps must be an integer in "
                       f"[1, {MAX_TIMESTEPS}]")
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

def epsilon_rdp_improved(clip: float, sigma: float, delta: float) -> float:
    """Improved RDP → DP conversion (Balle et al. 2020 Thm 21; docs/accountants.md §1)."""
    c, s, d = check_clip(clip), check_sigma(sigma), open_unit(delta, "delta")
    if math.isinf(s):
        return 0.0
    r = c / s
    rho = 2.0 * r * r  # (2C)² / (2σ²), without leaving a double's range where ρ does not
    if math.isinf(rho):
        return math.inf
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


def pfdm_epsilon(clip: float, t0: int, delta: float, method: str = "analytic_gaussian", *,
                 num_timesteps: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02,
                 beta_schedule: str = "linear") -> float:
    """ε of one PFDM upload at 1-indexed t0 under ``method`` (e.g. paper_bound, thm51, agm, rdp_improved)."""
    f = _epsilon_function(method)
    sigma = ldp_sigma(t0, num_timesteps=num_timesteps, beta_start=beta_start, beta_end=beta_end,
                      beta_schedule=beta_schedule)
    return f(clip, sigma, delta)


def min_t0(clip: float, epsilon: float, delta: float, method: str = "analytic_gaussian", *,
           num_timesteps: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02,
           beta_schedule: str = "linear") -> Optional[int]:
    """The smallest 1-indexed t0 in [1, T] whose ε ≤ ``epsilon`` under ``method``; None if even t0 = T
    does not reach it (binary search)."""
    c, e, d, f = check_clip(clip), positive_finite(epsilon, "epsilon"), open_unit(delta, "delta"), _epsilon_function(method)
    T, bs, be, sch = _check_schedule(num_timesteps, beta_start, beta_end, beta_schedule)
    abar = _alpha_bars(T, bs, be, sch)

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
    """The largest clip C whose ε at 1-indexed ``t0`` is ≤ ``epsilon`` under ``method`` (bisection, lower end)."""
    e, d, f = positive_finite(epsilon, "epsilon"), open_unit(delta, "delta"), _epsilon_function(method)
    sigma = ldp_sigma(t0, num_timesteps=num_timesteps, beta_start=beta_start, beta_end=beta_end,
                      beta_schedule=beta_schedule)
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
    c, d = check_clip(clip), open_unit(delta, "delta")
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
    """The ``privacy`` block of a PFDM result: the analytic-Gaussian ε of one upload, the paper's Theorem 5.1 value,
    and the noise source (seeded noise adds ``noise_label``)."""
    from ..core.mechanisms import SEEDED_NOISE_LABEL, noise_source_basis  # torch: only when a run asks

    c, d = check_clip(clip), open_unit(delta, "delta")
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
