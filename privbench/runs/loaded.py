"""Trained targets loaded once for several attacks in one command.

``privbench attack --attack lira,rmia,qmia`` and a bench's attack cells run inside :func:`shared_targets`: there a
target and its reference models are built and read from their checkpoints once, and every later attack on them
gets the same objects (and so the statistics computed on them, privbench.attacks.statistics). Outside the scope
every load is fresh.

The scope holds the targets of one run at a time (the run's own and its reference models'): loading from another
run drops them, so a bench over many targets holds no more than one attack does. An attack does not change its
target (a query precision is set for a block and restored), so sharing one object gives the numbers a fresh load
gives.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from pathlib import Path
from typing import Iterator


class _Loaded:
    def __init__(self) -> None:
        self.run: str | None = None
        self.targets: dict[tuple[str, str, str], object] = {}


_SCOPE: ContextVar[_Loaded | None] = ContextVar("privbench_loaded_targets", default=None)


@contextlib.contextmanager
def shared_targets() -> Iterator[None]:
    """Within the block, :func:`load_target` loads each target once (nested blocks share the outer one)."""
    if _SCOPE.get() is not None:
        yield
        return
    token = _SCOPE.set(_Loaded())
    try:
        yield
    finally:
        _SCOPE.reset(token)


def load_target(method, name: str, run: Path | None = None):
    """``method.load_target(name)``, once per scope. ``run``: the run directory the target belongs to (a reference
    model's: the attacked target's; default: the method's own)."""
    scope = _SCOPE.get()
    if scope is None:
        return method.load_target(name)
    ctx = method.ctx
    run_key = str(Path(run or ctx.run_dir).resolve())
    if run_key != scope.run:
        scope.run, scope.targets = run_key, {}
    key = (str(Path(ctx.run_dir).resolve()), str(name), str(ctx.device))
    target = scope.targets.get(key)
    if target is None:
        target = scope.targets[key] = method.load_target(name)
    return target
