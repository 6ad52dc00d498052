"""The built-in entries of privbench's registries: which packages hold them, and the loader that imports them.

This module sits above every layer, so the registries' dependency on the upper layers is part of the import graph
import-linter checks (docs/architecture.md §2). Importing it imports nothing else
(:mod:`privbench.core.registry_source` reads :data:`MODULES`' sources without importing them).
"""
from __future__ import annotations

import importlib
import pkgutil

#: modules and packages whose import registers the built-in entries (every module of a package), in this order
MODULES = (
    "privbench.core.config",
    "privbench.data.splits",
    "privbench.data.datasets",
    "privbench.privacy.accountants",
    "privbench.metrics.extractor",
    "privbench.models.methods",
    "privbench.attacks",
)

def _import_all(name: str) -> None:
    mod = importlib.import_module(name)
    if hasattr(mod, "__path__"):
        for info in sorted(pkgutil.iter_modules(mod.__path__), key=lambda i: i.name):
            if not info.name.startswith("_"):
                _import_all(f"{name}.{info.name}")


def load() -> None:
    """Import every built-in entry (the registries call this once, on first use)."""
    # the static form of MODULES, for the import graph (grimp reads function-level imports); the loop below also
    # imports each package's modules
    from . import attacks  # noqa: F401
    from .core import config  # noqa: F401
    from .data import datasets, splits  # noqa: F401
    from .metrics import extractor  # noqa: F401
    from .models import methods  # noqa: F401
    from .privacy import accountants  # noqa: F401

    for name in MODULES:
        _import_all(name)
