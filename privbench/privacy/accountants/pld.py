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

# PLD discretization: start coarse and halve the interval until the estimated excess of the pessimistic ε over
# the exact (interval → 0) value is ≤ max(PLD_EPS_ERROR, PLD_EPS_ERROR_REL · ε).
PLD_EPS_ERROR = 1e-3
PLD_EPS_ERROR_REL = 1e-3
PLD_START_INTERVAL = 2e-3
PLD_MIN_INTERVAL = PLD_START_INTERVAL / 2 ** 8
# The excess shrinks about linearly with the interval (about half per halving at coarse intervals, faster at
# fine ones), so after a halving it is ≈ the change that halving made; twice that change is the
# estimate, which covers a convergence ratio up to 2/3 per halving.
PLD_EXCESS_SAFETY = 2.0
# dp_accounting holds the privacy-loss distribution on a grid as wide as the loss range (about 1/σ² a step, and
# ε's scale once composed) over the interval: below this noise multiplier or above this (cheap, looser) RDP ε the
# grid takes gigabytes (docs/accountants.md §2), so PLD is skipped there and the chain goes on to RDP. Every ε in
# that regime is far beyond any meaningful guarantee; its tightness is not worth a machine's memory.
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

    The pessimistic PLD rounds every privacy loss up to the interval's grid, so its ε is an upper bound at any
    interval, too large by an excess that grows with the interval and the number of steps (σ = 10, q = 1e-3,
    1000 steps: 0.0240 at interval 1e-3 vs 0.0075 at 2e-5). Starting at :data:`PLD_START_INTERVAL`, the interval
    is halved until the estimated excess — :data:`PLD_EXCESS_SAFETY` × the change made by the last halving — is
    ≤ ``eps_error`` (default max(:data:`PLD_EPS_ERROR`, :data:`PLD_EPS_ERROR_REL` · ε)), or the interval reaches
    :data:`PLD_MIN_INTERVAL` (then ``estimated_excess`` may be above the tolerance; the ε is still an upper
    bound). The estimate is empirical, not a proof; tests check it against a fine-interval reference.

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
    """dp_accounting PLD accountant on SelfComposed(PoissonSampled(q, Gaussian(σ)), steps), add/remove-one;
    pessimistic, interval refined to the target accuracy (:func:`pld_epsilon_details`)."""
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
