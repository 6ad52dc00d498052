"""``ldp-rdp``: RDP of PFDM's Gaussian upload with the classical conversion (closed form, equal to the paper's
Theorem 5.1 bound, ``ldp-paper``)."""
from __future__ import annotations

import math

from ...core.registry import ACCOUNTANTS
from ...core.validation import open_unit
from .base import LDPAccountant, check_clip, check_sigma


def epsilon_rdp(clip: float, sigma: float, delta: float) -> float:
    """Classical RDP → DP conversion of the Gaussian mechanism (Δ = 2C; docs/accountants.md §1), evaluated in its
    closed form at α* = 1 + √(log(1/δ)/ρ): α* itself leaves a double's range as ρ → 0."""
    c, s, d = check_clip(clip), check_sigma(sigma), open_unit(delta, "delta")
    if math.isinf(s):
        return 0.0
    r = c / s
    rho = 2.0 * r * r  # (2C)² / (2σ²)
    return rho + 2.0 * r * math.sqrt(2.0 * math.log(1.0 / d))  # 2√(ρ log 1/δ), without squaring r


@ACCOUNTANTS.register_class
class LDPRDPAccountant(LDPAccountant):
    name = "ldp-rdp"
    description = "RDP of PFDM's Gaussian upload, classical conversion (closed form = the paper's Theorem 5.1 bound; replace-one, Δ=2C)"
    label = "rdp"
    aliases = ("rdp_classical",)
    rank = 1
    epsilon = staticmethod(epsilon_rdp)
