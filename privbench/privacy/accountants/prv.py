"""``prv``: DP-SGD, opacus PRV accountant (tight, eps_error 0.01; opacus' default). The computation is :func:`privbench.privacy.dpsgd.prv_epsilon`."""
from __future__ import annotations

from ...core.registry import ACCOUNTANTS
from ..dpsgd import prv_epsilon
from .base import DPSGD, Accountant


@ACCOUNTANTS.register_class
class PRVAccountant(Accountant):
    name = "prv"
    description = "DP-SGD, opacus PRV accountant (tight, eps_error 0.01; opacus' default)"
    kind = DPSGD
    fallback_rank = 0
    epsilon = staticmethod(prv_epsilon)
