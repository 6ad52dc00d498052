"""``pld``: DP-SGD, dp_accounting PLD accountant (tight, pessimistic discretization). The computation is :func:`privbench.privacy.dpsgd.pld_epsilon`."""
from __future__ import annotations

from ...core.registry import ACCOUNTANTS
from ..dpsgd import pld_epsilon
from .base import DPSGD, Accountant


@ACCOUNTANTS.register_class
class PLDAccountant(Accountant):
    name = "pld"
    description = "DP-SGD, dp_accounting PLD accountant (tight, pessimistic; interval refined to excess <= max(0.001, 0.001*eps))"
    kind = DPSGD
    fallback_rank = 1
    epsilon = staticmethod(pld_epsilon)
