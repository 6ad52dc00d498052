"""``prv``: DP-SGD, opacus PRV accountant (tight, eps_error 0.01; opacus' default). The computation is :func:`privbench.privacy.dpsgd.prv_epsilon`."""
from __future__ import annotations

from ...core.registry import ACCOUNTANTS
from .. import dpsgd
from ..dpsgd import prv_epsilon, rdp_epsilon
from .base import DPSGDAccountant


@ACCOUNTANTS.register_class
class PRVAccountant(DPSGDAccountant):
    name = "prv"
    description = "DP-SGD, opacus PRV accountant (tight, eps_error 0.01; opacus' default)"
    label = "PRV"
    fallback_rank = 0

    @classmethod
    def skip_reason(cls, noise_multiplier, sample_rate, steps, delta, rdp_orders=None):
        # opacus' PRV spends 25-100 s and then returns inf where the (cheap, looser) RDP ε is large
        eps = rdp_epsilon(noise_multiplier, sample_rate, steps, delta, orders=rdp_orders)
        if not eps <= dpsgd.PRV_MAX_RDP_EPSILON:
            return (f"RDP epsilon {eps:.4g} > {dpsgd.PRV_MAX_RDP_EPSILON:g}, beyond the range where opacus' PRV "
                    "is reliable")
        return None

    epsilon = staticmethod(prv_epsilon)
