"""``pld``: DP-SGD, dp_accounting PLD accountant (tight, pessimistic discretization). The computation is :func:`privbench.privacy.dpsgd.pld_epsilon`."""
from __future__ import annotations

from ...core.registry import ACCOUNTANTS
from ..dpsgd import pld_epsilon
from .base import DPSGDAccountant


@ACCOUNTANTS.register_class
class PLDAccountant(DPSGDAccountant):
    name = "pld"
    description = "DP-SGD, dp_accounting PLD accountant (tight, pessimistic; interval refined to excess <= max(0.001, 0.001*eps))"
    label = "PLD"
    fallback_rank = 1
    epsilon = staticmethod(pld_epsilon)
