"""Test helpers importable from any test module (tests/ is on pythonpath)."""
from __future__ import annotations

import os


def train_cfg(method="centralized", preset="test", seed=0, dataset="digits", **sets):
    """build_config with ``section__key=value`` keyword overrides."""
    from privbench.core.config import build_config

    return build_config(method, dataset, preset, seed, [(k.replace("__", "."), v) for k, v in sets.items()])


def shared_tmp(tmp_path_factory, name: str):
    """A folder shared by the xdist workers of this session (the run store locks and caches across processes, so
    a target one worker trained is a cache hit for the other); a fresh temp folder without xdist."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.mktemp(name)
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp().parent
    path = root / f"shared-{name}"
    with FileLock(str(root / f"shared-{name}.lock")):
        path.mkdir(exist_ok=True)
    return path
