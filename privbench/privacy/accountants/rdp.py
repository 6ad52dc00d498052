"""``rdp``: DP-SGD, opacus RDP accountant with the improved conversion (fast, looser). The computation is :func:`privbench.privacy.dpsgd.rdp_epsilon`."""
from __future__ import annotations

from ...core.registry import ACCOUNTANTS
from ..dpsgd import rdp_epsilon
from .base import DPSGDAccountant


@ACCOUNTANTS.register_class
class RDPAccountant(DPSGDAccountant):
    name = "rdp"
    description = "DP-SGD, opacus RDP analysis, orders up to 1024, improved conversion (fast; looser than PLD)"
    label = "RDP"
    fallback_rank = 2
    takes_rdp_orders = True
    epsilon = staticmethod(rdp_epsilon)
