"""Progress bars on stderr (tqdm); ``PRIVBENCH_PROGRESS=0`` turns them off, :func:`outer_only` turns off every bar
but the caller's own (bench: the grid's bar, not each cell's)."""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

from tqdm.auto import tqdm

_quiet = 0  # depth of outer_only() blocks in this process: bars created inside are off
_nested = 0  # depth of outer_only(nest=True) blocks: bars created inside are drawn one line below the caller's


@contextlib.contextmanager
def outer_only(nest: bool = False) -> Iterator[None]:
    """Inside the block the caller's bar (created before entering) stays on top: other bars are off, or with
    ``nest`` drawn on the line below it and removed when done (bench: the grid's bar, and under it the bar of
    the cell that runs in this process — a training's steps, an attack's batches)."""
    global _quiet, _nested
    if nest:
        _nested += 1
    else:
        _quiet += 1
    try:
        yield
    finally:
        if nest:
            _nested -= 1
        else:
            _quiet -= 1


def enabled() -> bool:
    # under torchrun only rank 0 draws bars (RANK is set by torchrun)
    return (not _quiet and os.environ.get("PRIVBENCH_PROGRESS", "1") not in ("0", "false", "no")
            and os.environ.get("RANK", "0").strip() in ("", "0"))


def bar(**kw):
    kw.setdefault("file", sys.stderr)
    kw.setdefault("mininterval", 1.0)
    kw.setdefault("dynamic_ncols", True)
    kw.setdefault("leave", False)
    if _nested:
        kw["position"], kw["leave"] = 1, False
    return tqdm(disable=not enabled(), **kw)


def silence_process() -> None:
    """No bars for the rest of this process (a bench worker: the grid's bar is drawn by the process that started
    it)."""
    global _quiet
    _quiet += 1
