"""Formal privacy accounting: PFDM's LDP upload (``ldp``) and DP-SGD (``dpsgd``).

Importing this package registers the accountants in ``privbench.registry.ACCOUNTANTS``; each entry's factory
is the function that computes ε (LDP: ``(clip, sigma, delta)``; DP-SGD: ``(noise_multiplier, sample_rate,
steps, delta)``, without fallback — use ``dpsgd_epsilon`` for the fallback chain). opacus and dp_accounting
are imported only when a DP-SGD number is computed.
"""
from ..registry import ACCOUNTANTS
from .dpsgd import (
    ACCOUNTANT_NAMES,
    account_dpsgd,
    dpsgd_basis,
    dpsgd_epsilon,
    noise_multiplier_for_epsilon,
    pld_epsilon,
    prv_epsilon,
    rdp_epsilon,
)
from .ldp import (
    LDP_BASIS,
    account_ldp,
    alpha_bar,
    delta_analytic_gaussian,
    epsilon_analytic_gaussian,
    epsilon_paper_bound,
    epsilon_rdp,
    epsilon_rdp_improved,
    ldp_sigma,
    min_t0,
    pfdm_epsilon,
    pfdm_privacy,
)

__all__ = [
    "ACCOUNTANT_NAMES", "LDP_BASIS",
    "account_dpsgd", "account_ldp", "alpha_bar", "delta_analytic_gaussian", "dpsgd_basis", "dpsgd_epsilon",
    "epsilon_analytic_gaussian", "epsilon_paper_bound", "epsilon_rdp", "epsilon_rdp_improved", "ldp_sigma",
    "min_t0", "noise_multiplier_for_epsilon", "pfdm_epsilon", "pfdm_privacy", "pld_epsilon", "prv_epsilon",
    "rdp_epsilon",
]

for _name, _factory, _desc in (
    ("ldp-analytic", epsilon_analytic_gaussian,
     "exact ε of PFDM's Gaussian upload (analytic Gaussian, Balle & Wang 2018; replace-one, Δ=2C)"),
    ("ldp-paper", epsilon_paper_bound,
     "PFDM Theorem 5.1 bound 2C²/σ² + C·√(8 log(1/δ)/σ²) (= classical RDP conversion; loose)"),
    ("prv", prv_epsilon, "DP-SGD, opacus PRV accountant (tight, eps_error 0.01; opacus' default)"),
    ("pld", pld_epsilon,
     "DP-SGD, dp_accounting PLD accountant (tight, pessimistic; interval refined to excess <= max(0.001, 0.001*eps))"),
    ("rdp", rdp_epsilon,
     "DP-SGD, opacus RDP analysis, orders up to 1024, improved conversion (fast; looser than PLD: 4-15% for "
     "long compositions, several-fold for short ones)"),
):
    try:
        ACCOUNTANTS.add(_name, _factory, _desc)
    except ValueError:  # already registered: a re-import of this module (e.g. importlib.reload)
        pass
del _name, _factory, _desc
