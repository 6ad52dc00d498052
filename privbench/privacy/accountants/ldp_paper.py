"""``ldp-paper``: PFDM's Theorem 5.1 bound on one Gaussian upload, ε = 2C²/σ² + C·√(8 log(1/δ)/σ²) (equal to the
classical RDP conversion, ``ldp-rdp``; loose)."""
from __future__ import annotations

import math

from ...core.registry import ACCOUNTANTS
from ...core.validation import open_unit
from .base import LDPAccountant, check_clip, check_sigma


def epsilon_paper_bound(clip: float, sigma: float, delta: float) -> float:
    """Theorem 5.1, evaluated through r = C/σ (docs/accountants.md §1)."""
    c, s, d = check_clip(clip), check_sigma(sigma), open_unit(delta, "delta")
    if math.isinf(s):
        return 0.0
    r = c / s
    return 2.0 * r * r + r * math.sqrt(8.0 * math.log(1.0 / d))


@ACCOUNTANTS.register_class
class LDPPaperAccountant(LDPAccountant):
    name = "ldp-paper"
    description = "PFDM Theorem 5.1 bound 2C²/σ² + C·√(8 log(1/δ)/σ²) (= classical RDP conversion; loose)"
    label = "paper_bound"
    aliases = ("thm51", "paper")
    rank = 0
    epsilon = staticmethod(epsilon_paper_bound)
