"""One file per accountant; each registers itself in ``ACCOUNTANTS`` (docs/accountants.md).

An accountant declares ``name``, ``description``, ``kind`` (``dpsgd``: ε of a Poisson-subsampled Gaussian composed
over steps, add/remove-one; ``ldp``: ε of one Gaussian upload, replace-one) and, for DP-SGD accountants,
``fallback_rank``: when the requested accountant fails, the others are tried in this order.
"""
