"""Progress bars on stderr (tqdm); ``PRIVBENCH_PROGRESS=0`` turns them off, :func:`outer_only` turns off every bar
but the caller's own (bench: the grid's bar, not each cell's)."""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

from tqdm.auto import tqdm

_quiet = 0  # depth of outer_only() blocks in this process


@contextlib.contextmanager
def outer_only() -> Iterator[None]:
    """Bars created inside the block are off (the caller created its own before entering)."""
    global _quiet
    _quiet += 1
    try:
        yield
    finally:
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
    return tqdm(disable=not enabled(), **kw)


def silence_process() -> None:
    """No bars for the rest of this process (a bench worker: the grid's bar is drawn by the process that started
    it)."""
    global _quiet
    _quiet += 1
