"""``ldp-analytic``: exact ε of PFDM's Gaussian upload (analytic Gaussian, Balle & Wang 2018; replace-one, Δ=2C). The computation is :func:`privbench.privacy.ldp.epsilon_analytic_gaussian`."""
from __future__ import annotations

from ...core.registry import ACCOUNTANTS
from ..ldp import epsilon_analytic_gaussian
from .base import LDPAccountant


@ACCOUNTANTS.register_class
class LDPAnalyticAccountant(LDPAccountant):
    name = "ldp-analytic"
    description = "exact ε of PFDM's Gaussian upload (analytic Gaussian, Balle & Wang 2018; replace-one, Δ=2C)"
    label = "analytic_gaussian"
    rank = 2
    epsilon = staticmethod(epsilon_analytic_gaussian)
