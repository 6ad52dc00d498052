"""A plug-in DP-SGD accountant in one file: Gaussian DP by the central limit theorem (Dong, Roth & Su 2019,
"Gaussian Differential Privacy", Cor. 5.4): T steps of the Poisson-subsampled Gaussian with rate q and noise
multiplier σ are approximately μ-GDP with μ = q·√(T·(e^{1/σ²} − 1)); ε at δ is then that of μ-GDP, i.e. of the
Gaussian mechanism with sensitivity/noise ratio μ (privbench's exact analytic-Gaussian conversion with Δ = 2C = μ,
σ = 1).

An approximation, not an upper bound (the CLT underestimates ε at small T·q²): it is here to show that an
accountant is one file (docs/architecture.md §3), loaded with ``PRIVBENCH_PLUGINS=gdp_accountant``.
"""
from __future__ import annotations

import math

from privbench.core.registry import ACCOUNTANTS
from privbench.privacy.accountants.base import DPSGDAccountant
from privbench.privacy.ldp import epsilon_analytic_gaussian


def gdp_mu(noise_multiplier: float, sample_rate: float, steps: int) -> float:
    return sample_rate * math.sqrt(steps * math.expm1(1.0 / noise_multiplier ** 2))


@ACCOUNTANTS.register_class
class GDPAccountant(DPSGDAccountant):
    name = "gdp"
    description = "DP-SGD, Gaussian DP by the central limit theorem (Dong, Roth & Su 2019; an approximation)"
    label = "GDP"
    fallback_rank = None  # used only when asked for by name; when it fails, the whole built-in chain follows

    @staticmethod
    def epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
        mu = gdp_mu(noise_multiplier, sample_rate, steps)
        return epsilon_analytic_gaussian(mu / 2.0, 1.0, delta)
