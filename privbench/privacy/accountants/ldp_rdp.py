"""``ldp-rdp``: RDP of PFDM's Gaussian upload, classical conversion (closed form, equal to the paper's Theorem 5.1 bound). The computation is :func:`privbench.privacy.ldp.epsilon_rdp`."""
from __future__ import annotations

from ...core.registry import ACCOUNTANTS
from ..ldp import epsilon_rdp
from .base import LDPAccountant


@ACCOUNTANTS.register_class
class LDPRDPAccountant(LDPAccountant):
    name = "ldp-rdp"
    description = "RDP of PFDM's Gaussian upload, classical conversion (closed form = the paper's Theorem 5.1 bound; replace-one, Δ=2C)"
    label = "rdp"
    rank = 1
    epsilon = staticmethod(epsilon_rdp)
