"""One file per training method; each registers itself in ``METHODS`` when imported (privbench.core.registry
imports every module of this package)."""
