"""DP-SGD accounting: Poisson-subsampled Gaussian mechanism composed over all steps (docs/accountants.md §2).

Neighbouring relation: add/remove one record, as opacus and dp_accounting use for DP-SGD. One step is
the Gaussian mechanism with noise multiplier σ (noise std σ·C on the sum of gradients clipped to C) on a
Poisson sample with rate q; ``steps`` steps are composed.

Accountants (each produces an upper bound on ε at the given δ):

- ``prv``: opacus ``PRVAccountant`` (Gopi et al. 2021), eps_error 0.01, returns the upper end of the
  estimate — opacus' default;
- ``pld``: dp_accounting ``PLDAccountant`` on SelfComposed(PoissonSampled(q, Gaussian(σ)), steps), pessimistic
  estimate (always an upper bound); the value-discretization interval is refined by halving until the estimated
  excess over the exact (interval → 0) value is ≤ max(0.001, 0.001·ε) (:func:`pld_epsilon_details`);
- ``rdp``: opacus' RDP analysis (improved RDP → DP conversion) over privbench's order grid :data:`RDP_ORDERS`:
  opacus' 1.1…10.9 and 12…63 plus 11 and 64…1024 (geometric, ratio 2^¼). Opacus' own grid stops at 63, which at
  small ε is far looser (σ = 9.365, q = 0.00131, 3761 steps, δ = 1e-5: 0.105 with opacus' orders, 0.026 with
  these, dp_accounting's RDP 0.027, PLD 0.023); ``rdp_orders="opacus"`` gives opacus' grid (its convention).
  Fast and robust, but looser than PLD by an amount that depends on the regime (measured over σ ∈ {0.7…10},
  q ∈ {1e-3, 0.01, 0.1}, steps ∈ {100, 1000, 10⁴}, δ = 1e-5): 4–15 % when q·steps ≥ 10 (e.g. +8.5 % at σ = 1,
  q = 0.01, 10⁴ steps), but several-fold when q·steps is small (σ = 1, q = 1e-3, 100 steps: 0.636 vs 0.055) —
  the same values as dp_accounting's RDP accountant, so this is RDP's own slack, not the order grid.

The tight ones have known failure modes (opacus PRV returns inf or raises at large ε / many steps), so a
failed or non-finite result falls back PRV → PLD → RDP and the result says which accountant produced it.
"""
from __future__ import annotations

import math
import warnings
from typing import Optional

from scipy import optimize

from ..core.errors import BadInput, WorkFailed
from ..core.extras import require
from ..core.registry import ACCOUNTANTS
from ..core.validation import integer_at_least, open_unit, positive_finite, real
from .accountants.base import DPSGDAccountant, dpsgd_accountants

PRV_EPS_ERROR = 0.01

# RDP orders. opacus' RDPAccountant.DEFAULT_ALPHAS (kept here so the grid does not change with opacus' version):
RDP_ORDERS_OPACUS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))
# privbench's grid: opacus' plus 11 and 64…1024 (ratio 2^¼). The optimal order grows as ε shrinks (≈ 360 at
# ε ≈ 0.03); dp_accounting stops at 1024 too, and opacus' analysis returns NaN for some settings above it.
RDP_ORDERS = tuple(sorted(set(RDP_ORDERS_OPACUS) | {11} | {int(round(64 * 2 ** (k / 4))) for k in range(17)}))
_RDP_GRIDS = {"privbench": RDP_ORDERS, "opacus": RDP_ORDERS_OPACUS}

# PLD discretization: start coarse and halve the interval until the estimated excess of the pessimistic ε over
# the exact (interval → 0) value is ≤ max(PLD_EPS_ERROR, PLD_EPS_ERROR_REL · ε).
PLD_EPS_ERROR = 1e-3
PLD_EPS_ERROR_REL = 1e-3
PLD_START_INTERVAL = 2e-3
PLD_MIN_INTERVAL = PLD_START_INTERVAL / 2 ** 8
# The excess shrinks about linearly with the interval (measured: ×0.50–0.53 per halving at coarse intervals,
# faster at fine ones), so after a halving it is ≈ the change that halving made; twice that change is the
# estimate, which covers a convergence ratio up to 2/3 per halving.
PLD_EXCESS_SAFETY = 2.0
# opacus' PRV is skipped when the (cheap, looser) RDP ε exceeds this: there it was measured to spend 25–100 s
# and then return inf (σ=0.2, q=0.05, 1000 steps; σ=0.5, q=1, 1000 steps), cf. opacus issues #601/#604.
PRV_MAX_RDP_EPSILON = 100.0
SIGMA_MAX = 1e6  # as opacus' get_noise_multiplier: more noise than this means the budget cannot be met
SIGMA_MIN = 1e-2  # calibration does not go below this noise multiplier


# --------------------------------------------------------------------------------------------- validation

def _check_noise_multiplier(noise_multiplier) -> float:
    s = real(noise_multiplier, "noise_multiplier")
    if not (s > 0 and math.isfinite(s)):
        raise BadInput(f"noise_multiplier={noise_multiplier!r}: must be a finite number > 0")
    return s


def _check_sample_rate(sample_rate) -> float:
    q = real(sample_rate, "sample_rate")
    if not (0.0 < q <= 1.0):
        raise BadInput(f"sample_rate={sample_rate!r}: must be in (0, 1]")
    return q


def dpsgd_accountant_names() -> list[str]:
    """The registered DP-SGD accountants (built-in and plug-in): the choices of ``dp.accountant`` and
    ``privbench account dpsgd --accountant``."""
    return [a.name for a in dpsgd_accountants()]


def _accountant(name: str) -> type[DPSGDAccountant]:
    return ACCOUNTANTS.get(name).factory


def _check_accountant(accountant) -> str:
    a = accountant.lower() if isinstance(accountant, str) else accountant
    names = dpsgd_accountant_names()
    if a not in names:
        other = ""
        if isinstance(a, str) and a in ACCOUNTANTS:
            other = f" ({a} is an {ACCOUNTANTS.get(a).factory.kind.upper()} accountant, not a DP-SGD one)"
        raise BadInput(f"accountant={accountant!r}: must be one of {', '.join(names)}{other}")
    return a


def _check_tol(tol) -> float:
    t = real(tol, "tol")
    if not (t > 0 and math.isfinite(t)):
        raise BadInput(f"tol={tol!r}: must be a finite number > 0")
    return t


# --------------------------------------------------------------------------------------------- raw accountants

def prv_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """opacus PRV accountant (upper end of the estimate, eps_error 0.01). No fallback; may raise or return inf."""
    require("opacus", "the PRV accountant")
    from opacus.accountants import PRVAccountant  # lazy: the [dp] extra (opacus) is optional: require() above names it

    acc = PRVAccountant()
    acc.history = [(float(noise_multiplier), float(sample_rate), int(steps))]
    return float(acc.get_epsilon(delta=float(delta), eps_error=PRV_EPS_ERROR))


def _pld_at(noise_multiplier: float, sample_rate: float, steps: int, delta: float, interval: float) -> float:
    require("dp_accounting", "the PLD accountant")
    # lazy: the [dp] extra (dp-accounting) is optional: require() above names it
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=interval)
    event = dp_event.PoissonSampledDpEvent(float(sample_rate), dp_event.GaussianDpEvent(float(noise_multiplier)))
    acc.compose(dp_event.SelfComposedDpEvent(event, int(steps)))
    return float(acc.get_epsilon(float(delta)))


def pld_epsilon_details(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                        eps_error: Optional[float] = None) -> dict:
    """dp_accounting PLD ε with the value-discretization interval picked from the target accuracy.

    The pessimistic PLD rounds every privacy loss up to the interval's grid, so its ε is an upper bound at any
    interval, too large by an excess that grows with the interval and the number of steps (σ = 10, q = 1e-3,
    1000 steps: 0.0240 at interval 1e-3 vs 0.0075 at 2e-5). Starting at :data:`PLD_START_INTERVAL`, the interval
    is halved until the estimated excess — :data:`PLD_EXCESS_SAFETY` × the change made by the last halving — is
    ≤ ``eps_error`` (default max(:data:`PLD_EPS_ERROR`, :data:`PLD_EPS_ERROR_REL` · ε)), or the interval reaches
    :data:`PLD_MIN_INTERVAL` (then ``estimated_excess`` may be above the tolerance; the ε is still an upper
    bound). The estimate is empirical, not a proof; tests check it against a fine-interval reference.

    Returns {"epsilon", "interval", "estimated_excess", "eps_error" (the tolerance used)}."""
    tol_abs = None if eps_error is None else _check_tol(eps_error)
    interval = PLD_START_INTERVAL
    prev = _pld_at(noise_multiplier, sample_rate, steps, delta, interval)
    while True:
        interval /= 2.0
        eps = _pld_at(noise_multiplier, sample_rate, steps, delta, interval)
        excess = PLD_EXCESS_SAFETY * abs(prev - eps)
        tol = tol_abs if tol_abs is not None else max(PLD_EPS_ERROR, PLD_EPS_ERROR_REL * abs(eps))
        if excess <= tol or interval <= PLD_MIN_INTERVAL or not math.isfinite(eps):
            return {"epsilon": eps, "interval": interval, "estimated_excess": excess, "eps_error": tol}
        prev = eps


def pld_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """dp_accounting PLD accountant on SelfComposed(PoissonSampled(q, Gaussian(σ)), steps), add/remove-one;
    pessimistic, interval refined to the target accuracy (:func:`pld_epsilon_details`)."""
    return pld_epsilon_details(noise_multiplier, sample_rate, steps, delta)["epsilon"]


def _rdp_orders(orders) -> tuple:
    if orders is None:
        return RDP_ORDERS
    if isinstance(orders, str):
        if orders not in _RDP_GRIDS:
            raise BadInput(f"rdp_orders={orders!r}: must be one of {', '.join(_RDP_GRIDS)} or a list of orders > 1")
        return _RDP_GRIDS[orders]
    try:
        out = tuple(float(a) for a in orders)
    except (TypeError, ValueError):
        raise BadInput(f"rdp_orders={orders!r}: must be one of {', '.join(_RDP_GRIDS)} or a list of orders > 1") \
            from None
    if not out or not all(a > 1 and math.isfinite(a) for a in out):
        raise BadInput(f"rdp_orders={orders!r}: every order must be a finite number > 1")
    return out


def rdp_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float, orders=None) -> float:
    """opacus' RDP analysis (improved RDP → DP conversion) over ``orders``: None or "privbench" =
    :data:`RDP_ORDERS` (up to 1024), "opacus" = opacus' default grid (up to 63), or a list of orders > 1."""
    require("opacus", "the RDP accountant")
    from opacus.accountants import RDPAccountant  # lazy: the [dp] extra (opacus) is optional: require() above names it

    acc = RDPAccountant()
    acc.history = [(float(noise_multiplier), float(sample_rate), int(steps))]
    return float(acc.get_epsilon(delta=float(delta), alphas=list(_rdp_orders(orders))))


class _Skipped(ArithmeticError):
    """The accountant was not run because it is known to fail in this regime."""


def _run(accountant: str, sigma: float, q: float, steps: int, delta: float, rdp_orders=None) -> float:
    """One accountant, quiet; raises on failure, including a non-finite ε."""
    acc = _accountant(accountant)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        why = acc.skip_reason(sigma, q, steps, delta, rdp_orders=rdp_orders)
        if why:
            raise _Skipped(why)
        if acc.takes_rdp_orders:
            return _finite(acc.epsilon(sigma, q, steps, delta, orders=rdp_orders))
        return _finite(acc.epsilon(sigma, q, steps, delta))


def _finite(eps: float) -> float:
    if not math.isfinite(eps):
        raise ArithmeticError(f"returned a non-finite epsilon ({eps})")
    return max(eps, 0.0)


def _chain(accountant: str) -> list[str]:
    """The requested accountant, then the fallback chain after it (``fallback_rank`` order; an accountant
    without a rank falls back to the whole chain)."""
    ranked = sorted((a for a in dpsgd_accountants() if a.fallback_rank is not None),
                    key=lambda a: (a.fallback_rank, a.name))
    rank = _accountant(accountant).fallback_rank
    return [accountant] + [a.name for a in ranked if a.name != accountant
                           and (rank is None or a.fallback_rank > rank)]


def _label(name: str) -> str:
    return _accountant(name).label or name.upper()


def _reason(name: str, err: BaseException) -> str:
    msg = " ".join(str(err).split()) or type(err).__name__
    if len(msg) > 120:
        msg = msg[:117] + "..."
    if isinstance(err, _Skipped):
        return f"{_label(name)} skipped ({msg})"
    return f"{_label(name)} failed ({type(err).__name__}: {msg})"


def _fallback_text(reasons: list[str], used: str) -> Optional[str]:
    if not reasons:
        return None
    return "; ".join(reasons) + f"; used {_label(used)}"


# --------------------------------------------------------------------------------------------- public API

def dpsgd_basis(accountant: str, delta: float) -> str:
    """One line saying what a DP-SGD ε covers."""
    a = _check_accountant(accountant)
    d = open_unit(delta, "delta")
    return (f"DP-SGD, {_label(a)} accountant, Poisson-subsampled Gaussian, add/remove-one record, δ={d:g}, "
            "covers the released model's training (all steps)")


def dpsgd_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                  accountant: str = "prv", rdp_orders=None) -> dict:
    """ε of DP-SGD with Poisson sampling rate q, noise multiplier σ and ``steps`` steps, at δ.

    ``rdp_orders``: the RDP order grid (see :func:`rdp_epsilon`; "opacus" for opacus' own).

    Returns {"epsilon", "delta", "accountant" (the one that produced the number), "requested_accountant",
    "noise_multiplier", "sample_rate", "steps", "fallback" (None, or why the requested one was not used)}.
    """
    sigma = _check_noise_multiplier(noise_multiplier)
    q = _check_sample_rate(sample_rate)
    n = integer_at_least(steps, "steps", 1)
    d = open_unit(delta, "delta")
    req = _check_accountant(accountant)
    orders = _rdp_orders(rdp_orders)
    reasons: list[str] = []
    for name in _chain(req):
        try:
            eps = _run(name, sigma, q, n, d, orders)
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
               guess: Optional[float], rdp_orders=None) -> tuple[float, float]:
    """Smallest σ (up to tol in ε) with ε_name(σ) ≤ target; returns (σ, ε). Raises on accountant failure."""
    cache: dict[float, float] = {}

    def eps(s: float) -> float:
        if s not in cache:
            cache[s] = _run(name, s, q, n, d, rdp_orders)
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


#: noise_multiplier_for_epsilon's answers in this process, by setting (see there)
_CALIBRATIONS: dict[tuple, dict] = {}


def noise_multiplier_for_epsilon(epsilon: float, sample_rate: float, steps: int, delta: float,
                                 accountant: str = "prv", tol: float = 0.01, rdp_orders=None) -> dict:
    """The smallest noise multiplier σ whose ε ≤ ``epsilon`` (ε within ``tol`` below the target).

    Brent's method with a bisection safeguard; for PRV/PLD the search starts from the (fast) RDP calibration,
    which brackets the tight answer from above. If the requested accountant fails anywhere in the search,
    the whole calibration is redone with the next one (PRV → PLD → RDP), so one accountant produced it.
    Same keys as ``dpsgd_epsilon`` plus "target_epsilon"."""
    target = positive_finite(epsilon, "epsilon")
    q = _check_sample_rate(sample_rate)
    n = integer_at_least(steps, "steps", 1)
    d = open_unit(delta, "delta")
    req = _check_accountant(accountant)
    t = _check_tol(tol)
    orders = _rdp_orders(rdp_orders)
    chain = _chain(req)
    # a calibration is a pure function of its setting and the accountants that answer it: a suite asks the same
    # one for every seed and variant of a method (and the plan, then the run, ask again), so it is computed once
    # per process
    key = (target, q, n, d, req, t, orders, tuple((name, id(_accountant(name))) for name in chain))
    if key in _CALIBRATIONS:
        return dict(_CALIBRATIONS[key])
    reasons: list[str] = []
    rdp_sigma: Optional[float] = None
    for name in chain:
        try:
            guess = None
            if name != "rdp":
                if rdp_sigma is None:
                    rdp_sigma = _calibrate("rdp", target, q, n, d, min(t, 0.01), None, orders)[0]
                guess = rdp_sigma
            sigma, eps = _calibrate(name, target, q, n, d, t, guess, orders)
        except BadInput:
            raise
        except Exception as err:  # noqa: BLE001
            reasons.append(_reason(name, err))
            continue
        _CALIBRATIONS[key] = {"epsilon": eps, "delta": d, "accountant": name, "requested_accountant": req,
                              "noise_multiplier": sigma, "sample_rate": q, "steps": n,
                              "fallback": _fallback_text(reasons, name), "target_epsilon": target}
        return dict(_CALIBRATIONS[key])
    raise WorkFailed(f"noise calibration (epsilon={target}, sample_rate={q}, steps={n}, delta={d}): "
                     "no accountant succeeded: " + "; ".join(reasons))


def account_dpsgd(noise_multiplier: Optional[float], sample_rate: float, steps: int, delta: float,
                  epsilon: Optional[float] = None, accountant: str = "prv", rdp_orders=None) -> dict:
    """The ``privbench account dpsgd --json`` object (docs/cli.md §4.5): {"epsilon", "delta", "accountant",
    "noise_multiplier", "sample_rate", "steps"} plus requested_accountant, fallback, basis (and target_epsilon).
    With ``epsilon`` the noise multiplier is the calibrated one (the input one, if any, is ignored)."""
    if epsilon is not None:
        out = noise_multiplier_for_epsilon(epsilon, sample_rate, steps, delta, accountant=accountant,
                                           rdp_orders=rdp_orders)
    else:
        if noise_multiplier is None:
            raise BadInput("noise_multiplier: required unless a target epsilon is given")
        out = dpsgd_epsilon(noise_multiplier, sample_rate, steps, delta, accountant=accountant, rdp_orders=rdp_orders)
    out["basis"] = (dpsgd_basis(out["accountant"], out["delta"]) + "; assumes the noise and the Poisson sample are "
                    "secret (a run's basis states its dp.noise_source: seeded randomness can be regenerated from the "
                    "run's seed)")
    return out
