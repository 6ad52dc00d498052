"""Trained targets loaded once for several attacks in one command.

``privbench attack --attack lira,rmia,qmia`` and a bench's attack cells run inside :func:`shared_targets`: there a
target and its reference models are built and read from their checkpoints once (an outside model: with its records
and their checks), and every later attack on them gets the same objects (and so the statistics computed on them,
privbench.attacks.statistics). Outside the scope every load is fresh.

The scope holds the targets of one run at a time (the run's own and its reference models'): loading from another
run drops them, and so does :func:`release`, so a bench over many targets holds no more than one attack does. An
attack does not change its target (a query precision is set for a block and restored), so sharing one object gives
the numbers a fresh load gives.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from pathlib import Path
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")


class _Loaded:
    def __init__(self) -> None:
        self.run: str | None = None
        self.loaded: dict[tuple, object] = {}


_SCOPE: ContextVar[_Loaded | None] = ContextVar("privbench_loaded_targets", default=None)


@contextlib.contextmanager
def shared_targets() -> Iterator[None]:
    """Within the block, :func:`loaded_once` loads each object once (nested blocks share the outer one)."""
    if _SCOPE.get() is not None:
        yield
        return
    token = _SCOPE.set(_Loaded())
    try:
        yield
    finally:
        _SCOPE.reset(token)


def release() -> None:
    """Drop what the scope holds (before work that loads models of its own: a FID or sampling cell)."""
    scope = _SCOPE.get()
    if scope is not None:
        scope.run, scope.loaded = None, {}


def loaded_once(key: tuple, load: Callable[[], T], run: str | None = None) -> T:
    """``load()``, once per scope for ``key``. ``run``: the run the object belongs to (loading from another one
    drops the objects held); None: the run loaded last (a reference model, staged with its target)."""
    scope = _SCOPE.get()
    if scope is None:
        return load()
    if run is not None and run != scope.run:
        scope.run, scope.loaded = run, {}
    if key not in scope.loaded:
        scope.loaded[key] = load()
    return scope.loaded[key]


def load_target(method, name: str, run: Path | None = None):
    """``method.load_target(name)``, once per scope. ``run``: the run directory the target belongs to (a reference
    model's: the attacked target's; default: the method's own)."""
    ctx = method.ctx
    return loaded_once((str(Path(ctx.run_dir).resolve()), str(name), str(ctx.device)),
                       lambda: method.load_target(name), run=str(Path(run or ctx.run_dir).resolve()))
