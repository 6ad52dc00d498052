"""Independent trainings of one run in parallel processes (PFDM's client models and its server).

Units share nothing and a small model trains on one thread, so on idle cores they run side by side with exactly the
checkpoints of the one-after-another run; when, and what a dead process leaves: docs/scaling.md §1.
"""
from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core import distributed, progress, threads
from ..core.registry import METHODS
from .method import RunContext
from .public_init import ensure_pretrained

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainUnit:
    """One independent training of a run: its checkpoint name and its steps (a method's ``train_unit`` runs it)."""
    name: str
    steps: int


def processes_for(ctx, units: list[TrainUnit]) -> int:
    """How many processes train ``units`` at once (1: here, one after another)."""
    if len(units) < 2 or ctx.device.type != "cpu" or distributed.world_size() > 1:
        return 1
    with torch.device("meta"):  # the parameter count without memory or computation
        n_params = sum(p.numel() for p in ctx.new_denoiser().parameters())
    return threads.parallel_processes(len(units), n_params)


def train_units(method, units: list[TrainUnit]) -> None:
    """Train every unit of ``method`` (``method.train_unit(unit)``), in processes when :func:`processes_for` allows.
    A ``train.init=public`` pre-training the units start from is trained first, once, here (not by each unit)."""
    remaining = list(units)
    if remaining and method.cfg.train.init == "public":
        ensure_pretrained(method.ctx)
    n = processes_for(method.ctx, remaining)
    if n > 1:
        remaining = _in_processes(method, remaining, n)
    for unit in remaining:
        method.train_unit(unit)


def _in_processes(method, units: list[TrainUnit], n: int) -> list[TrainUnit]:
    """Train ``units`` in ``n`` fresh processes (longest first); returns the units a broken pool left untrained.
    A unit's own error (bad input, a diverged training) is raised here after the other processes stop."""
    ctx = method.ctx
    msg = f"{ctx.cfg.method}: {len(units)} independent trainings in {n} processes (one thread each)"
    ctx.log(msg)
    LOG.info(f"privbench: {msg}")
    done: set[TrainUnit] = set()
    bar = progress.bar(total=sum(u.steps for u in units), desc=f"{ctx.cfg.method} ({n} processes)", unit="step")
    # spawn, not fork: the parent may hold OpenMP threads and locks that a forked child would inherit broken
    pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"),
                               initializer=threads.configure_worker_process, initargs=(1, n))
    try:
        futures = {pool.submit(_train_unit_in_process, ctx.cfg, str(ctx.run_dir), ctx.runs_root,
                               ctx.split_override, u): u for u in sorted(units, key=lambda u: -u.steps)}
        for f in as_completed(futures):
            f.result()
            done.add(futures[f])
            bar.update(futures[f].steps)
    except BrokenProcessPool as e:  # a process died (killed, out of memory): finish here, from the checkpoints
        msg = (f"a training process failed ({e}); training the remaining {len(units) - len(done)} here, one after "
               f"another")
        ctx.log(msg)
        LOG.warning(f"privbench: {msg}")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
    return [u for u in units if u not in done]


def _train_unit_in_process(cfg, run_dir: str, runs_root, split_override, unit: TrainUnit) -> str:
    """A pool process: the method rebuilt from the run's config and directory (the split, client split and uploads
    are already on disk), then one unit trained on one thread."""
    ctx = RunContext(cfg, Path(run_dir), torch.device("cpu"), split_override=split_override, runs_root=runs_root)
    METHODS.create(cfg.method, ctx).train_unit(unit)
    return unit.name
