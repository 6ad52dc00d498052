"""``prv``: DP-SGD, opacus' PRV accountant (tight, eps_error 0.01; opacus' default)."""
from __future__ import annotations

from ...core.extras import require
from ...core.registry import ACCOUNTANTS
from .base import DPSGDAccountant
from .rdp import rdp_epsilon

PRV_EPS_ERROR = 0.01
# opacus' PRV is skipped when the (cheap, looser) RDP ε exceeds this: in that regime it is slow and then returns
# inf (github.com/pytorch/opacus/issues/601 and /604; docs/accountants.md).
PRV_MAX_RDP_EPSILON = 100.0


def prv_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """opacus PRV accountant (upper end of the estimate, eps_error 0.01). No fallback; may raise or return inf."""
    require("opacus", "the PRV accountant")
    from opacus.accountants import PRVAccountant  # lazy: the [dp] extra (opacus) is optional: require() above names it

    acc = PRVAccountant()
    acc.history = [(float(noise_multiplier), float(sample_rate), int(steps))]
    return float(acc.get_epsilon(delta=float(delta), eps_error=PRV_EPS_ERROR))


@ACCOUNTANTS.register_class
class PRVAccountant(DPSGDAccountant):
    name = "prv"
    description = "DP-SGD, opacus PRV accountant (tight, eps_error 0.01; opacus' default)"
    label = "PRV"
    fallback_rank = 0

    @classmethod
    def skip_reason(cls, noise_multiplier, sample_rate, steps, delta, rdp_orders=None):
        eps = rdp_epsilon(noise_multiplier, sample_rate, steps, delta, orders=rdp_orders)
        if not eps <= PRV_MAX_RDP_EPSILON:
            return (f"RDP epsilon {eps:.4g} > {PRV_MAX_RDP_EPSILON:g}, beyond the range where opacus' PRV "
                    "is reliable")
        return None

    epsilon = staticmethod(prv_epsilon)
