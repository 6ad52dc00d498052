"""Debugging output of the private methods: data-dependent values that no ε accounts for.

Un-noised losses, clipped fractions, Poisson batch sizes and upload clip counts go only to
``<run_dir>/debug/<name>.log``, whose first line says that releasing it breaks the guarantee (docs/methods.md §0).
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

from ..core.io import is_writer

DEBUG_DIR = "debug"
DEBUG_HEADER = ("# DEBUG OUTPUT - NOT COVERED BY ANY PRIVACY GUARANTEE: data-dependent values computed from the "
                "private records without noise (un-noised losses, clipped fractions, batch sizes, clip counts). "
                "Releasing this file breaks the run's epsilon; never export it.")


def debug_path(run_dir: Path, name: str) -> Path:
    return Path(run_dir) / DEBUG_DIR / f"{name}.log"


def debug_log(run_dir: Path, name: str, msg: str) -> Path:
    """Append one timestamped line to ``<run_dir>/debug/<name>.log`` (created with the warning as its first line)."""
    path = debug_path(run_dir, name)
    if not is_writer():  # under torchrun rank 0 alone writes the run
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    with open(path, "a") as f:
        if f.tell() == 0:
            f.write(DEBUG_HEADER + "\n")
        f.write(f"{stamp} {msg}\n")
    return path
