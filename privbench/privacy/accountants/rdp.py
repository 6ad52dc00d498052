"""``rdp``: DP-SGD, opacus RDP accountant with the improved conversion (fast, looser). The computation is :func:`privbench.privacy.dpsgd.rdp_epsilon`."""
from __future__ import annotations

from ...core.registry import ACCOUNTANTS
from ..dpsgd import rdp_epsilon
from .base import DPSGD, Accountant


@ACCOUNTANTS.register_class
class RDPAccountant(Accountant):
    name = "rdp"
    description = "DP-SGD, opacus RDP analysis, orders up to 1024, improved conversion (fast; looser than PLD)"
    kind = DPSGD
    fallback_rank = 2
    epsilon = staticmethod(rdp_epsilon)
