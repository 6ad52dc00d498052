"""DP-SGD accounting: Poisson-subsampled Gaussian mechanism composed over all steps (docs/accountants.md §2).

Add/remove-one relation. The accountants (``prv``, ``pld``, ``rdp``; one file each in ``privacy/accountants/``)
give upper bounds on ε; a failed or non-finite result falls back PRV → PLD → RDP and the result names the
accountant that produced it.
"""
from __future__ import annotations

import math
import warnings
from typing import Optional

from scipy import optimize

from ..core.errors import BadInput, WorkFailed
from ..core.registry import ACCOUNTANTS
from ..core.validation import integer_at_least, open_unit, positive_finite, real
from .accountants.base import DPSGDAccountant, dpsgd_accountants
from .accountants.pld import check_tol
from .accountants.rdp import order_grid

SIGMA_MAX = 1e6  # as opacus' get_noise_multiplier: more noise than this means the budget cannot be met
SIGMA_MIN = 1e-2  # calibration does not go below this noise multiplier


# --------------------------------------------------------------------------------------------- validation

def _check_sample_rate(sample_rate) -> float:
    q = real(sample_rate, "sample_rate")
    if not (0.0 < q <= 1.0):
        raise BadInput(f"sample_rate={sample_rate!r}: must be in (0, 1]")
    return q


def dpsgd_accountant_names() -> list[str]:
    """The registered DP-SGD accountants: the choices of ``dp.accountant`` and ``account dpsgd --accountant``."""
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
    """ε of DP-SGD with Poisson sampling rate q, noise multiplier σ and ``steps`` steps, at δ: the keys of
    docs/cli.md §4.5 but ``basis``. ``rdp_orders``: :func:`~privbench.privacy.accountants.rdp.order_grid`."""
    sigma = positive_finite(noise_multiplier, "noise_multiplier")
    q = _check_sample_rate(sample_rate)
    n = integer_at_least(steps, "steps", 1)
    d = open_unit(delta, "delta")
    req = _check_accountant(accountant)
    orders = order_grid(rdp_orders)
    reasons: list[str] = []
    numeric = True  # every failure so far is arithmetic (overflow, division by zero, a non-finite ε, a skip)
    for name in _chain(req):
        try:
            eps = _run(name, sigma, q, n, d, orders)
        except BadInput:  # a missing extra (privbench.core.extras) is not an accountant failure
            raise
        except Exception as err:  # noqa: BLE001 - any accountant failure triggers the fallback
            reasons.append(_reason(name, err))
            numeric = numeric and isinstance(err, ArithmeticError)
            continue
        return {"epsilon": eps, "delta": d, "accountant": name, "requested_accountant": req,
                "noise_multiplier": sigma, "sample_rate": q, "steps": n,
                "fallback": _fallback_text(reasons, name)}
    what = (f"DP-SGD accounting (noise_multiplier={sigma}, sample_rate={q}, steps={n}, delta={d}): no accountant "
            "produced a finite epsilon: " + "; ".join(reasons))
    # where every accountant's arithmetic leaves a double's range, the inputs are what cannot be accounted
    raise (BadInput if numeric else WorkFailed)(what)


class _Found(Exception):
    def __init__(self, sigma: float, eps: float):
        self.sigma, self.eps = sigma, eps


class _Search:
    """ε_name(σ) for one calibration, each σ computed once, and the band [target − tol, target] it accepts."""

    def __init__(self, name: str, target: float, q: float, n: int, d: float, tol: float, rdp_orders):
        self.name, self.target, self.q, self.n, self.d, self.tol, self.orders = name, target, q, n, d, tol, rdp_orders
        self.cache: dict[float, float] = {}

    def eps(self, s: float) -> float:
        if s not in self.cache:
            self.cache[s] = _run(self.name, s, self.q, self.n, self.d, self.orders)
        return self.cache[s]

    def ok(self, e: float) -> bool:
        return self.target - self.tol <= e <= self.target

    def setting(self) -> str:
        return f"sample_rate={self.q}, steps={self.n}, delta={self.d}"


def _shrink(c: _Search, hi: float, e_hi: float, factor: float) -> tuple[float, float, float]:
    """Lower σ by ``factor`` until ε exceeds the target: (lo, hi, ε(hi)) with ε(lo) > target ≥ ε(hi)."""
    lo = hi
    while True:
        lo = lo * factor
        if lo < SIGMA_MIN:
            raise BadInput(f"epsilon={c.target}: so large that a noise multiplier below {SIGMA_MIN} reaches it "
                           f"({c.setting()}); ask for a smaller epsilon")
        e_lo = c.eps(lo)
        if e_lo > c.target:
            return lo, hi, e_hi
        hi, e_hi = lo, e_lo


def _grow(c: _Search, hi: float) -> tuple[float, float, float]:
    """Double σ until ε is within the target: (lo, hi, ε(hi)) with ε(lo) > target ≥ ε(hi)."""
    lo = hi
    while True:
        hi = hi * 2.0
        if hi > SIGMA_MAX:
            raise BadInput(f"epsilon={c.target}: too small to reach with {c.setting()} "
                           f"(needs a noise multiplier above {SIGMA_MAX:g})")
        e_hi = c.eps(hi)
        if e_hi <= c.target:
            return lo, hi, e_hi
        lo = hi


def _brent(c: _Search, lo: float, hi: float, e_hi: float) -> tuple[float, float]:
    """Brent on ε(σ) − (target − tol/2) in [lo, hi], stopping as soon as a σ lands in the accepted band; where it
    does not converge (or ε is not monotone), bisection from the smallest feasible σ it saw finishes."""
    best = [hi, e_hi]

    def g(s: float) -> float:
        e = c.eps(s)
        if e <= c.target and s < best[0]:
            best[0], best[1] = s, e
        if c.ok(e):
            raise _Found(s, e)
        return e - (c.target - c.tol / 2.0)

    try:
        optimize.brentq(g, lo, hi, xtol=1e-9, rtol=1e-12, maxiter=100)
    except _Found as f:
        return f.sigma, f.eps
    except (RuntimeError, ValueError):  # not converged or a non-monotone ε: the bisection below finishes
        pass
    lo2 = max([s for s, e in c.cache.items() if e > c.target and s < best[0]], default=lo)
    hi2, e2 = best
    for _ in range(60):
        if c.ok(e2) or hi2 - lo2 <= 1e-9 * hi2:
            break
        mid = 0.5 * (lo2 + hi2)
        em = c.eps(mid)
        if em <= c.target:
            hi2, e2 = mid, em
        else:
            lo2 = mid
    return hi2, e2


def _calibrate(name: str, target: float, q: float, n: int, d: float, tol: float,
               guess: Optional[float], rdp_orders=None) -> tuple[float, float]:
    """Smallest σ (up to tol in ε) with ε_name(σ) ≤ target; returns (σ, ε). Raises on accountant failure."""
    c = _Search(name, target, q, n, d, tol, rdp_orders)
    # bracket [lo, hi] with eps(lo) > target >= eps(hi), from the RDP guess (eps(guess) <= target for tight ones)
    hi = guess if guess is not None else 1.0
    e_hi = c.eps(hi)
    if c.ok(e_hi):
        return hi, e_hi
    if e_hi <= target:
        lo, hi, e_hi = _shrink(c, hi, e_hi, 0.85 if guess is not None else 0.5)
    else:
        lo, hi, e_hi = _grow(c, hi)
    if c.ok(e_hi):
        return hi, e_hi
    return _brent(c, lo, hi, e_hi)


#: noise_multiplier_for_epsilon's answers in this process, by setting (see there)
_CALIBRATIONS: dict[tuple, dict] = {}


def noise_multiplier_for_epsilon(epsilon: float, sample_rate: float, steps: int, delta: float,
                                 accountant: str = "prv", tol: float = 0.01, rdp_orders=None) -> dict:
    """The smallest noise multiplier σ whose ε ≤ ``epsilon`` (within ``tol`` below; docs/accountants.md §2,
    "Calibration"). Same keys as ``dpsgd_epsilon`` plus "target_epsilon"."""
    target = positive_finite(epsilon, "epsilon")
    q = _check_sample_rate(sample_rate)
    n = integer_at_least(steps, "steps", 1)
    d = open_unit(delta, "delta")
    req = _check_accountant(accountant)
    t = check_tol(tol)
    orders = order_grid(rdp_orders)
    chain = _chain(req)
    # pure in its setting and accountants, and a suite asks the same one per seed and variant: once per process
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
    """The ``privbench account dpsgd --json`` object (docs/cli.md §4.5); with ``epsilon``, σ is calibrated."""
    if epsilon is not None and noise_multiplier is not None:
        raise BadInput("account dpsgd: give --noise-multiplier (ε of that noise) or --epsilon (the noise for that ε), "
                       "not both")
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
