"""``ldp-paper``: PFDM Theorem 5.1 bound 2C²/σ² + C·√(8 log(1/δ)/σ²) (= classical RDP conversion; loose). The computation is :func:`privbench.privacy.ldp.epsilon_paper_bound`."""
from __future__ import annotations

from ...core.registry import ACCOUNTANTS
from ..ldp import epsilon_paper_bound
from .base import LDPAccountant


@ACCOUNTANTS.register_class
class LDPPaperAccountant(LDPAccountant):
    name = "ldp-paper"
    description = "PFDM Theorem 5.1 bound 2C²/σ² + C·√(8 log(1/δ)/σ²) (= classical RDP conversion; loose)"
    label = "paper_bound"
    rank = 0
    epsilon = staticmethod(epsilon_paper_bound)
