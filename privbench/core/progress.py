"""Progress on stderr: tqdm bars on a terminal; elsewhere (CI logs, a pipe, a file) one plain line per interval,
``train dpdm: step 1200/4000, loss 0.043, 41 s``, instead of tqdm's carriage-return frames.

``PRIVBENCH_PROGRESS`` and ``PRIVBENCH_PROGRESS_INTERVAL``: docs/cli.md §2."""
from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any, Iterable, Iterator

from tqdm.auto import tqdm

_quiet = 0  # depth of outer_only() blocks in this process: bars created inside are off
_nested = 0  # depth of outer_only(nest=True) blocks: bars created inside are drawn one line below the caller's


@contextlib.contextmanager
def outer_only(nest: bool = False) -> Iterator[None]:
    """Inside the block the caller's bar (created before entering) stays on top: other bars are off, or with
    ``nest`` drawn on the line below it and removed when done (bench: the grid's bar over a cell's)."""
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


class LineProgress:
    """The part of tqdm's interface privbench uses, written as one plain line every ``interval`` seconds and once at
    the end: what a log file or CI console can show."""

    def __init__(self, iterable: Iterable | None = None, total: int | None = None, initial: int = 0, desc: str = "",
                 unit: str = "it", file=None, interval: float | None = None, disable: bool = False, **_tqdm_only):
        self.iterable, self.total, self.n, self.desc, self.unit = iterable, total, int(initial), desc or "", unit
        self.file = file if file is not None else sys.stderr
        self.interval = _interval() if interval is None else float(interval)
        self.disable, self.postfix = disable, ""
        self.start = self.last = time.monotonic()
        self.shown = self.n
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            self.total = len(iterable)

    def __iter__(self) -> Iterator[Any]:
        for x in self.iterable:
            yield x
            self.update(1)
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.interval:
            self._emit(now)

    def set_postfix(self, **kw) -> None:
        self.postfix = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in kw.items())

    def set_postfix_str(self, s: str) -> None:
        self.postfix = str(s)

    def write(self, msg: str, file=None) -> None:
        if not self.disable:
            _line(msg, file or self.file)

    def close(self) -> None:
        if self.n != self.shown:
            self._emit(time.monotonic())
        self.shown = self.n

    def _emit(self, now: float) -> None:
        self.last, self.shown = now, self.n
        if self.disable:
            return
        of = f"/{self.total}" if self.total is not None else ""
        extra = f", {self.postfix}" if self.postfix else ""
        _line(f"{self.desc}: {self.unit} {self.n}{of}{extra}, {now - self.start:.0f} s", self.file)


def _line(text: str, stream) -> None:
    stream.write(text + "\n")
    stream.flush()


def _interval() -> float:
    try:
        return max(0.0, float(os.environ.get("PRIVBENCH_PROGRESS_INTERVAL", "10")))
    except ValueError:  # an unreadable interval: the default
        return 10.0


def _lines(file) -> bool:
    mode = os.environ.get("PRIVBENCH_PROGRESS", "1").strip().lower()
    if mode in ("lines", "tqdm"):
        return mode == "lines"
    try:
        return not file.isatty()
    except (AttributeError, ValueError):  # a stream without a terminal (or already closed)
        return True


def bar(**kw):
    kw.setdefault("file", sys.stderr)
    if _lines(kw["file"]):
        return LineProgress(disable=not enabled(), **kw)
    kw.setdefault("mininterval", 1.0)
    kw.setdefault("dynamic_ncols", True)
    kw.setdefault("leave", False)
    if _nested:
        kw["position"], kw["leave"] = 1, False
    return tqdm(disable=not enabled(), **kw)


def silence_process() -> None:
    """No bars for the rest of this process (a bench worker: its parent draws the grid's bar)."""
    global _quiet
    _quiet += 1
