"""Test helpers importable from any test module (tests/ is on pythonpath)."""
from __future__ import annotations


def train_cfg(method="centralized", preset="test", seed=0, dataset="digits", **sets):
    """build_config with ``section__key=value`` keyword overrides."""
    from privbench.core.config import build_config

    return build_config(method, dataset, preset, seed, [(k.replace("__", "."), v) for k, v in sets.items()])
