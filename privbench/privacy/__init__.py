"""Formal privacy accounting: PFDM's LDP upload (``ldp``) and DP-SGD (``dpsgd``).

The accountants register themselves from ``privbench.privacy.accountants`` (one file each). opacus and
dp_accounting are imported only when a DP-SGD number is computed.
"""
from .dpsgd import (
    account_dpsgd,
    dpsgd_accountant_names,
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
    "LDP_BASIS",
    "account_dpsgd", "account_ldp", "alpha_bar", "delta_analytic_gaussian", "dpsgd_accountant_names", "dpsgd_basis", "dpsgd_epsilon",
    "epsilon_analytic_gaussian", "epsilon_paper_bound", "epsilon_rdp", "epsilon_rdp_improved", "ldp_sigma",
    "min_t0", "noise_multiplier_for_epsilon", "pfdm_epsilon", "pfdm_privacy", "pld_epsilon", "prv_epsilon",
    "rdp_epsilon",
]
