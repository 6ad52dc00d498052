"""One file per accountant; each registers itself in ``ACCOUNTANTS`` (docs/accountants.md; the interface: ``base``)."""
