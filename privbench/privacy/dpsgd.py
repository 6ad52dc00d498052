"""DP-SGD accounting: Poisson-subsampled Gaussian mechanism composed over all steps (docs/accountants.md §2).

Neighbouring relation: add/remove one record, as opacus and dp_accounting use for DP-SGD. One step is
the Gaussian mechanism with noise multiplier σ (noise std σ·C on the sum of gradients clipped to C) on a
Poisson sample with rate q; ``steps`` steps are composed.

Accountants (each produces an upper bound on ε at the given δ):

- ``prv``: opacus ``PRVAccountant`` (Gopi et al. 2021), eps_error 0.01, returns the upper end of the
  estimate — opacus' default;
- ``pld``: dp_accounting ``PLDAccountant`` on SelfComposed(PoissonSampled(q, Gaussian(σ)), steps), pessimistic
  estimate, value-discretization interval chosen by the number of steps (≤ 0.01 ε error);
- ``rdp``: opacus ``RDPAccountant`` (orders 1.1…10.9, 12…63; improved RDP → DP conversion). Looser
  (≈ 7–9 % larger ε) but fast and robust.

The tight ones have known failure modes (opacus PRV returns inf or raises at large ε / many steps), so a
failed or non-finite result falls back PRV → PLD → RDP and the result says which accountant produced it.
"""
from __future__ import annotations

import math
import numbers
import warnings
from typing import Callable, Optional

from scipy import optimize

from ..core.errors import BadInput, WorkFailed
from ..core.extras import require

ACCOUNTANT_NAMES = ("prv", "pld", "rdp")
_FALLBACK_ORDER = ("prv", "pld", "rdp")
_LABELS = {"prv": "PRV", "pld": "PLD", "rdp": "RDP"}

PRV_EPS_ERROR = 0.01
# opacus' PRV is skipped when the (cheap, looser) RDP ε exceeds this: there it was measured to spend 25–100 s
# and then return inf (σ=0.2, q=0.05, 1000 steps; σ=0.5, q=1, 1000 steps), cf. opacus issues #601/#604.
PRV_MAX_RDP_EPSILON = 100.0
SIGMA_MAX = 1e6  # as opacus' get_noise_multiplier: more noise than this means the budget cannot be met
SIGMA_MIN = 1e-2  # calibration does not go below this noise multiplier


# --------------------------------------------------------------------------------------------- validation

def _real(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise BadInput(f"{name}={value!r}: must be a number")
    return float(value)


def _check_noise_multiplier(noise_multiplier) -> float:
    s = _real(noise_multiplier, "noise_multiplier")
    if not (s > 0 and math.isfinite(s)):
        raise BadInput(f"noise_multiplier={noise_multiplier!r}: must be a finite number > 0")
    return s


def _check_sample_rate(sample_rate) -> float:
    q = _real(sample_rate, "sample_rate")
    if not (0.0 < q <= 1.0):
        raise BadInput(f"sample_rate={sample_rate!r}: must be in (0, 1]")
    return q


def _check_steps(steps) -> int:
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or int(steps) < 1:
        raise BadInput(f"steps={steps!r}: must be an integer >= 1")
    return int(steps)


def _check_delta(delta) -> float:
    d = _real(delta, "delta")
    if not (0.0 < d < 1.0):
        raise BadInput(f"delta={delta!r}: must be in (0, 1)")
    return d


def _check_epsilon(epsilon) -> float:
    e = _real(epsilon, "epsilon")
    if not (e > 0 and math.isfinite(e)):
        raise BadInput(f"epsilon={epsilon!r}: must be a finite number > 0")
    return e


def _check_accountant(accountant) -> str:
    a = accountant.lower() if isinstance(accountant, str) else accountant
    if a not in ACCOUNTANT_NAMES:
        raise BadInput(f"accountant={accountant!r}: must be one of {', '.join(ACCOUNTANT_NAMES)}")
    return a


def _check_tol(tol) -> float:
    t = _real(tol, "tol")
    if not (t > 0 and math.isfinite(t)):
        raise BadInput(f"tol={tol!r}: must be a finite number > 0")
    return t


# --------------------------------------------------------------------------------------------- raw accountants

def prv_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """opacus PRV accountant (upper end of the estimate, eps_error 0.01). No fallback; may raise or return inf."""
    require("opacus", "the PRV accountant")
    from opacus.accountants import PRVAccountant

    acc = PRVAccountant()
    acc.history = [(float(noise_multiplier), float(sample_rate), int(steps))]
    return float(acc.get_epsilon(delta=float(delta), eps_error=PRV_EPS_ERROR))


def pld_value_discretization(steps: int) -> float:
    """The PLD value-discretization interval: 1e-3 up to 1000 steps, shrinking as 1/√steps down to 1e-4.

    Measured against 1e-4 over σ ∈ [0.1, 1e4], q ∈ [1e-3, 1], steps ∈ [1, 1e5] (the dp_accounting PLD is
    pessimistic, so coarser intervals only ever *over*-state ε): the excess stays below 0.002 ε, while a flat
    1e-3 is off by up to 0.014 at 1e5 steps. Cost: ≤ ~1 s per query."""
    return min(1e-3, max(1e-4, 1e-3 * math.sqrt(1000.0 / max(int(steps), 1))))


def pld_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """dp_accounting PLD accountant on SelfComposed(PoissonSampled(q, Gaussian(σ)), steps), add/remove-one."""
    require("dp_accounting", "the PLD accountant")
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(
        value_discretization_interval=pld_value_discretization(steps))
    event = dp_event.PoissonSampledDpEvent(float(sample_rate), dp_event.GaussianDpEvent(float(noise_multiplier)))
    acc.compose(dp_event.SelfComposedDpEvent(event, int(steps)))
    return float(acc.get_epsilon(float(delta)))


def rdp_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """opacus RDP accountant (default orders, improved RDP → DP conversion)."""
    require("opacus", "the RDP accountant")
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    acc.history = [(float(noise_multiplier), float(sample_rate), int(steps))]
    return float(acc.get_epsilon(delta=float(delta)))


_RAW: dict[str, Callable[[float, float, int, float], float]] = {
    "prv": prv_epsilon, "pld": pld_epsilon, "rdp": rdp_epsilon,
}


class _Skipped(ArithmeticError):
    """The accountant was not run because it is known to fail in this regime."""


def _run(accountant: str, sigma: float, q: float, steps: int, delta: float) -> float:
    """One accountant, quiet; raises on failure, including a non-finite ε."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if accountant == "prv":
            rdp = rdp_epsilon(sigma, q, steps, delta)
            if not rdp <= PRV_MAX_RDP_EPSILON:
                raise _Skipped(f"RDP epsilon {rdp:.4g} > {PRV_MAX_RDP_EPSILON:g}, beyond the range where "
                               "opacus' PRV is reliable")
        eps = _RAW[accountant](sigma, q, steps, delta)
    if not math.isfinite(eps):
        raise ArithmeticError(f"returned a non-finite epsilon ({eps})")
    return max(eps, 0.0)


def _chain(accountant: str) -> tuple[str, ...]:
    return _FALLBACK_ORDER[_FALLBACK_ORDER.index(accountant):]


def _reason(name: str, err: BaseException) -> str:
    msg = " ".join(str(err).split()) or type(err).__name__
    if len(msg) > 120:
        msg = msg[:117] + "..."
    if isinstance(err, _Skipped):
        return f"{_LABELS[name]} skipped ({msg})"
    return f"{_LABELS[name]} failed ({type(err).__name__}: {msg})"


def _fallback_text(reasons: list[str], used: str) -> Optional[str]:
    if not reasons:
        return None
    return "; ".join(reasons) + f"; used {_LABELS[used]}"


# --------------------------------------------------------------------------------------------- public API

def dpsgd_basis(accountant: str, delta: float) -> str:
    """One line saying what a DP-SGD ε covers."""
    a = _check_accountant(accountant)
    d = _check_delta(delta)
    return (f"DP-SGD, {_LABELS[a]} accountant, Poisson-subsampled Gaussian, add/remove-one record, δ={d:g}, "
            "covers the released model's training (all steps)")


def dpsgd_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                  accountant: str = "prv") -> dict:
    """ε of DP-SGD with Poisson sampling rate q, noise multiplier σ and ``steps`` steps, at δ.

    Returns {"epsilon", "delta", "accountant" (the one that produced the number), "requested_accountant",
    "noise_multiplier", "sample_rate", "steps", "fallback" (None, or why the requested one was not used)}.
    """
    sigma = _check_noise_multiplier(noise_multiplier)
    q = _check_sample_rate(sample_rate)
    n = _check_steps(steps)
    d = _check_delta(delta)
    req = _check_accountant(accountant)
    reasons: list[str] = []
    for name in _chain(req):
        try:
            eps = _run(name, sigma, q, n, d)
        except BadInput:  # a missing extra (privbench.core.extras) is not an accountant failure
            raise
        except Exception as err:  # noqa: BLE001 - any accountant failure triggers the fallback
            reasons.append(_reason(name, err))
            continue
        return {"epsilon": eps, "delta": d, "accountant": name, "requested_accountant": req,
                "noise_multiplier": sigma, "sample_rate": q, "steps": n,
                "fallback": _fallback_text(reasons, name)}
    raise WorkFailed(f"DP-SGD accounting (noise_multiplier={sigma}, sample_rate={q}, steps={n}, delta={d}): "
                     "no accountant produced a finite epsilon: " + "; ".join(reasons))


class _Found(Exception):
    def __init__(self, sigma: float, eps: float):
        self.sigma, self.eps = sigma, eps


def _calibrate(name: str, target: float, q: float, n: int, d: float, tol: float,
               guess: Optional[float]) -> tuple[float, float]:
    """Smallest σ (up to tol in ε) with ε_name(σ) ≤ target; returns (σ, ε). Raises on accountant failure."""
    cache: dict[float, float] = {}

    def eps(s: float) -> float:
        if s not in cache:
            cache[s] = _run(name, s, q, n, d)
        return cache[s]

    def ok(e: float) -> bool:
        return target - tol <= e <= target

    # bracket [lo, hi] with eps(lo) > target >= eps(hi); start near the guess (the RDP calibration, whose ε is
    # an upper bound of the tight ones, so eps(guess) <= target for them)
    hi = guess if guess is not None else 1.0
    e_hi = eps(hi)
    if ok(e_hi):
        return hi, e_hi
    if e_hi <= target:
        lo = hi
        while True:
            lo = lo * (0.85 if guess is not None else 0.5)
            if lo < SIGMA_MIN:
                raise BadInput(f"epsilon={target}: so large that a noise multiplier below {SIGMA_MIN} reaches it "
                               f"(sample_rate={q}, steps={n}, delta={d}); ask for a smaller epsilon")
            e_lo = eps(lo)
            if e_lo > target:
                break
            hi, e_hi = lo, e_lo
    else:
        lo = hi
        while True:
            hi = hi * 2.0
            if hi > SIGMA_MAX:
                raise BadInput(f"epsilon={target}: too small to reach with sample_rate={q}, steps={n}, delta={d} "
                               f"(needs a noise multiplier above {SIGMA_MAX:g})")
            e_hi = eps(hi)
            if e_hi <= target:
                break
            lo = hi
    if ok(e_hi):
        return hi, e_hi
    best = [hi, e_hi]

    # Brent on ε(σ) − (target − tol/2), stopping as soon as a σ lands in the accepted band
    def g(s: float) -> float:
        e = eps(s)
        if e <= target and s < best[0]:
            best[0], best[1] = s, e
        if ok(e):
            raise _Found(s, e)
        return e - (target - tol / 2.0)

    try:
        optimize.brentq(g, lo, hi, xtol=1e-9, rtol=1e-12, maxiter=100)
    except _Found as f:
        return f.sigma, f.eps
    except (RuntimeError, ValueError):  # not converged or a non-monotone ε: the bisection below finishes
        pass
    # bisection safeguard on the best feasible point
    lo2 = max([s for s, e in cache.items() if e > target and s < best[0]], default=lo)
    hi2, e2 = best
    for _ in range(60):
        if ok(e2) or hi2 - lo2 <= 1e-9 * hi2:
            break
        mid = 0.5 * (lo2 + hi2)
        em = eps(mid)
        if em <= target:
            hi2, e2 = mid, em
        else:
            lo2 = mid
    return hi2, e2


def noise_multiplier_for_epsilon(epsilon: float, sample_rate: float, steps: int, delta: float,
                                 accountant: str = "prv", tol: float = 0.01) -> dict:
    """The smallest noise multiplier σ whose ε ≤ ``epsilon`` (ε within ``tol`` below the target).

    Brent's method with a bisection safeguard; for PRV/PLD the search starts from the (fast) RDP calibration,
    which brackets the tight answer from above. If the requested accountant fails anywhere in the search,
    the whole calibration is redone with the next one (PRV → PLD → RDP), so one accountant produced it.
    Same keys as ``dpsgd_epsilon`` plus "target_epsilon"."""
    target = _check_epsilon(epsilon)
    q = _check_sample_rate(sample_rate)
    n = _check_steps(steps)
    d = _check_delta(delta)
    req = _check_accountant(accountant)
    t = _check_tol(tol)
    reasons: list[str] = []
    rdp_sigma: Optional[float] = None
    for name in _chain(req):
        try:
            guess = None
            if name != "rdp":
                if rdp_sigma is None:
                    rdp_sigma = _calibrate("rdp", target, q, n, d, min(t, 0.01), None)[0]
                guess = rdp_sigma
            sigma, eps = _calibrate(name, target, q, n, d, t, guess)
        except BadInput:
            raise
        except Exception as err:  # noqa: BLE001
            reasons.append(_reason(name, err))
            continue
        return {"epsilon": eps, "delta": d, "accountant": name, "requested_accountant": req,
                "noise_multiplier": sigma, "sample_rate": q, "steps": n,
                "fallback": _fallback_text(reasons, name), "target_epsilon": target}
    raise WorkFailed(f"noise calibration (epsilon={target}, sample_rate={q}, steps={n}, delta={d}): "
                     "no accountant succeeded: " + "; ".join(reasons))


def account_dpsgd(noise_multiplier: Optional[float], sample_rate: float, steps: int, delta: float,
                  epsilon: Optional[float] = None, accountant: str = "prv") -> dict:
    """The ``privbench account dpsgd --json`` object (docs/cli.md §4.5): {"epsilon", "delta", "accountant",
    "noise_multiplier", "sample_rate", "steps"} plus requested_accountant, fallback, basis (and target_epsilon).
    With ``epsilon`` the noise multiplier is the calibrated one (the input one, if any, is ignored)."""
    if epsilon is not None:
        out = noise_multiplier_for_epsilon(epsilon, sample_rate, steps, delta, accountant=accountant)
    else:
        if noise_multiplier is None:
            raise BadInput("noise_multiplier: required unless a target epsilon is given")
        out = dpsgd_epsilon(noise_multiplier, sample_rate, steps, delta, accountant=accountant)
    out["basis"] = dpsgd_basis(out["accountant"], out["delta"])
    return out
