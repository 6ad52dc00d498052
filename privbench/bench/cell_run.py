"""One bench cell in this process (every executor calls it): what the cell logs goes to ``bench.log``, and a
failure marks the cell instead of stopping the grid."""
from __future__ import annotations

import contextlib
import datetime as _dt
import logging
from pathlib import Path
from typing import Iterator

from ..runs.loaded import release
from .cells import run_attack_cell, run_fid_cell, run_samples_cell, run_utility_cell

LOG = logging.getLogger(__name__)


@contextlib.contextmanager
def cell_log(log_path: Path) -> Iterator[None]:
    """While a cell runs, the ``privbench`` logger writes to ``bench.log`` only (its stderr handlers set aside)."""
    own = logging.getLogger("privbench")
    handler = logging.FileHandler(log_path, encoding="utf-8")
    handler.setLevel(logging.INFO)
    saved, level, propagate = own.handlers[:], own.level, own.propagate
    for h in saved:
        own.removeHandler(h)
    own.addHandler(handler)
    own.setLevel(logging.INFO)
    own.propagate = False
    try:
        yield
    finally:
        own.removeHandler(handler)
        handler.close()
        for h in saved:
            own.addHandler(h)
        own.setLevel(level)
        own.propagate = propagate


def run_cell(c, runs, device, n_samples: int, fcfg: dict | None, log_path: Path) -> None:
    """Run one cell in this process; an exception marks the cell failed instead of being raised (Ctrl-C is)."""
    try:
        with cell_log(log_path):
            LOG.info(f"--- {_dt.datetime.now().isoformat(timespec='seconds')} {c.label()}"
                     + (f" (attempt {c.attempts})" if (c.attempts or 1) > 1 else ""))
            if c.kind == "attack":
                run_attack_cell(c, runs, device)
                return
            release()  # the models attack cells shared: not held beside the ones this cell loads
            if c.kind == "samples":
                run_samples_cell(c, runs, device, n_samples)
            elif c.kind == "utility":
                run_utility_cell(c, runs, device)
            else:
                run_fid_cell(c, runs, device, fcfg)
    except Exception as e:  # noqa: BLE001 - one broken cell keeps the others
        c.status, c.reason = "failed", f"{type(e).__name__}: {e}"
