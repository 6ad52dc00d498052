"""Formal privacy accounting: PFDM's LDP upload (``ldp``) and DP-SGD (``dpsgd``).

``dpsgd`` and ``ldp`` (scipy; opacus and dp_accounting only for a DP-SGD number) load on first use of one of
their names, so the reports and gates that read ``privacy.claims`` stay light.
"""
_FROM = {
    **dict.fromkeys(("account_dpsgd", "dpsgd_accountant_names", "dpsgd_basis", "dpsgd_epsilon",
                     "noise_multiplier_for_epsilon"), ".dpsgd"),
    "pld_epsilon": ".accountants.pld", "prv_epsilon": ".accountants.prv", "rdp_epsilon": ".accountants.rdp",
    **dict.fromkeys(("LDP_BASIS", "account_ldp", "alpha_bar", "epsilon_rdp_improved", "ldp_sigma", "min_t0",
                     "pfdm_epsilon", "pfdm_privacy"), ".ldp"),
    **dict.fromkeys(("delta_analytic_gaussian", "epsilon_analytic_gaussian"), ".accountants.ldp_analytic"),
    "epsilon_paper_bound": ".accountants.ldp_paper", "epsilon_rdp": ".accountants.ldp_rdp",
}


def __getattr__(name: str):
    """The accounting functions of ``dpsgd`` and ``ldp``, imported on first use."""
    if name in _FROM:
        # lazy: importlib only when an accounting name is asked for
        import importlib

        return getattr(importlib.import_module(_FROM[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "LDP_BASIS",
    "account_dpsgd", "account_ldp", "alpha_bar", "delta_analytic_gaussian", "dpsgd_accountant_names", "dpsgd_basis", "dpsgd_epsilon",
    "epsilon_analytic_gaussian", "epsilon_paper_bound", "epsilon_rdp", "epsilon_rdp_improved", "ldp_sigma",
    "min_t0", "noise_multiplier_for_epsilon", "pfdm_epsilon", "pfdm_privacy", "pld_epsilon", "prv_epsilon",
    "rdp_epsilon",
]
