"""``ldp-rdp``: RDP of PFDM's Gaussian upload with the classical conversion (closed form, equal to the paper's
Theorem 5.1 bound, ``ldp-paper``)."""
from __future__ import annotations

import math

from ...core.registry import ACCOUNTANTS
from ...core.validation import open_unit
from .base import LDPAccountant, check_clip, check_sigma


def epsilon_rdp(clip: float, sigma: float, delta: float) -> float:
    """Classical RDP → DP conversion of the Gaussian mechanism (Δ = 2C):
    min over α > 1 of αρ + log(1/δ)/(α − 1), ρ = Δ²/(2σ²). The minimum is at α* = 1 + √(log(1/δ)/ρ)
    (the objective is convex in α), which gives ρ + 2√(ρ log 1/δ) — the paper bound."""
    c, s, d = check_clip(clip), check_sigma(sigma), open_unit(delta, "delta")
    if math.isinf(s):
        return 0.0
    rho = (2.0 * c) ** 2 / (2.0 * s * s)
    log_inv_delta = math.log(1.0 / d)
    alpha = 1.0 + math.sqrt(log_inv_delta / rho)
    return alpha * rho + log_inv_delta / (alpha - 1.0)


@ACCOUNTANTS.register_class
class LDPRDPAccountant(LDPAccountant):
    name = "ldp-rdp"
    description = "RDP of PFDM's Gaussian upload, classical conversion (closed form = the paper's Theorem 5.1 bound; replace-one, Δ=2C)"
    label = "rdp"
    aliases = ("rdp_classical",)
    rank = 1
    epsilon = staticmethod(epsilon_rdp)
