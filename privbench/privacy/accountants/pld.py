"""``pld``: DP-SGD, dp_accounting's PLD accountant (tight; pessimistic discretization, its interval refined to the
target accuracy)."""
from __future__ import annotations

import math
from typing import Optional

from ...core.errors import BadInput
from ...core.extras import require
from ...core.registry import ACCOUNTANTS
from ...core.validation import real
from .base import DPSGDAccountant
from .rdp import rdp_epsilon

# PLD discretization (docs/accountants.md §2): halve the interval until the estimated excess is within tolerance.
PLD_EPS_ERROR = 1e-3
PLD_EPS_ERROR_REL = 1e-3
PLD_START_INTERVAL = 2e-3
PLD_MIN_INTERVAL = PLD_START_INTERVAL / 2 ** 8
# The excess shrinks about linearly with the interval, so after a halving it is ≈ the change that halving made;
# twice that covers a convergence ratio up to 2/3 per halving.
PLD_EXCESS_SAFETY = 2.0
# dp_accounting's loss grid is as wide as the loss range (≈ 1/σ² a step) over the interval: below this σ or above
# this RDP ε it takes gigabytes, so PLD is skipped (docs/accountants.md §2); such an ε guarantees nothing anyway.
PLD_MIN_NOISE = 0.05
PLD_MAX_RDP_EPSILON = 1e4


def check_tol(tol) -> float:
    """A tolerance: a finite number > 0 (BadInput otherwise)."""
    t = real(tol, "tol")
    if not (t > 0 and math.isfinite(t)):
        raise BadInput(f"tol={tol!r}: must be a finite number > 0")
    return t


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

    The pessimistic ε is an upper bound at any interval, too large by an excess that grows with the interval and
    the steps. The interval is halved from :data:`PLD_START_INTERVAL` until :data:`PLD_EXCESS_SAFETY` × the last
    halving's change is ≤ ``eps_error`` (default max(:data:`PLD_EPS_ERROR`, :data:`PLD_EPS_ERROR_REL` · ε)) or
    :data:`PLD_MIN_INTERVAL` is reached (``estimated_excess`` may then exceed the tolerance).

    Returns {"epsilon", "interval", "estimated_excess", "eps_error" (the tolerance used)}."""
    tol_abs = None if eps_error is None else check_tol(eps_error)
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
    """dp_accounting PLD ε, add/remove-one (:func:`pld_epsilon_details`)."""
    return pld_epsilon_details(noise_multiplier, sample_rate, steps, delta)["epsilon"]


@ACCOUNTANTS.register_class
class PLDAccountant(DPSGDAccountant):
    name = "pld"
    description = "DP-SGD, dp_accounting PLD accountant (tight, pessimistic; interval refined to excess <= max(0.001, 0.001*eps))"
    label = "PLD"
    fallback_rank = 1

    @classmethod
    def skip_reason(cls, noise_multiplier, sample_rate, steps, delta, rdp_orders=None):
        if noise_multiplier < PLD_MIN_NOISE:
            return f"noise multiplier {noise_multiplier:.4g} < {PLD_MIN_NOISE:g}: its loss grid would take gigabytes"
        eps = rdp_epsilon(noise_multiplier, sample_rate, steps, delta, orders=rdp_orders)
        if not eps <= PLD_MAX_RDP_EPSILON:
            return f"RDP epsilon {eps:.4g} > {PLD_MAX_RDP_EPSILON:g}: its loss grid would take gigabytes"
        return None

    epsilon = staticmethod(pld_epsilon)
