"""``privbench bench --jobs N`` and ``--executor slurm``: the grid's trainings, reference models and cells as jobs
of a pool, driven from this process (the order and the held-back shared trainings: docs/benchmarks.md, "Many
cores, one box"). Jobs run in a :class:`LocalPool` process or a Slurm job (:mod:`privbench.bench.slurm_executor`).
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing
import os
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..core.threads import available_cores, configure_worker_process
from ..data.user_records import register_records
from ..models.method import resolve_device
from ..runs import train as api
from ..runs.attack import make_attack
from ..runs.references import plan_pool, store_dir, train_reference
from .ray_executor import CellFailed, _in_task, cell_task, train_task
from .worker_lifetime import die_with_parent


def train_job(cfg, runs: str, device: str, threads: int, retries: int, log_path: str) -> dict:
    """A training job: train_task's result, or its failure as a result (a job raises only when it dies)."""
    try:
        return train_task(cfg, runs, device, threads, retries, log_path)
    except CellFailed as e:
        return {"status": "failed", "reason": e.reason, "attempts": e.attempts}


def reference_job(cfg, attack: str, runs: str, device: str, threads: int, retries: int, i: int) -> dict:
    """Train (or find cached) reference model ``i`` of the pool ``attack`` uses in ``cfg``'s run."""
    _in_task(threads)
    reason = None
    for attempt in range(1, retries + 2):
        try:
            att = make_attack(cfg, attack, strict=False)
            method = api.train(cfg, Path(runs), device)
            ctx = method.ctx
            pool, _ = plan_pool(ctx.split, len(ctx.dataset[1]), att.reference_pool, cfg.seed, att.population_size())
            store = store_dir(ctx.run_dir, att.reference_pool, pool, cfg.seed)
            store.mkdir(parents=True, exist_ok=True)
            train_reference(cfg, store, i, pool, resolve_device(device))
            return {"status": "done", "attempts": attempt}
        except Exception as e:  # noqa: BLE001 - retried; the attack cell then trains (or reports) it itself
            reason = f"{type(e).__name__}: {e}"
    return {"status": "failed", "reason": reason, "attempts": retries + 1}


def cell_job(c, runs: str, device: str, n_samples: int, fcfg, log_path: str, threads: int, retries: int) -> dict:
    return cell_task(c, runs, device, n_samples, fcfg, log_path, threads, retries, None)


def reference_pool(c) -> tuple[str, int, int] | None:
    """(pool mode, population size, reference models) of cell ``c``'s attack; None: none, or unknown until it runs."""
    if c.kind != "attack" or c.external is not None or c.cfg is None:
        return None
    try:
        att = make_attack(c.cfg, c.attack, strict=False)
        if not att.needs_references:
            return None
        return str(att.reference_pool), att.population_size(), int(att.n_reference)
    except Exception:  # noqa: BLE001 - the cell itself will report it
        return None


class PoolExecutor:
    """Drives a planned grid through ``submit(fn, *args) -> future`` of a subclass (``wait`` for the first done)."""
    name = "pool"

    def __init__(self, retries: int, threads: int):
        self.retries, self.threads = retries, threads
        self.trainings: list[dict] = []

    # -- the backend: concurrent.futures-like
    def submit(self, fn, *args):
        raise NotImplementedError

    def wait(self, futures: list) -> list:
        done, _ = cf.wait(futures, return_when=cf.FIRST_COMPLETED)
        return list(done)

    def close(self) -> None:
        pass

    def describe(self) -> dict:
        return {}

    # -- the driver
    def run(self, cells, *, runs, device, n_samples, fcfg, log_path, write, pb, report_failure) -> None:
        runs, log_path = str(Path(runs).resolve()), str(Path(log_path).resolve())
        pending = [c for c in cells if c.status == "pending"]
        pb.update(len(cells) - len(pending))
        self._jobs: dict = {}  # future -> (kind, payload, (fn, args), attempt)
        self._waiting: dict[str, list] = {}  # run_dir -> its cells, until its training (and references) finished
        self._refs_left: dict[str, int] = {}
        self._cell_args = (runs, device, n_samples, fcfg, log_path, self.threads, self.retries)
        self._write, self._pb, self._report_failure = write, pb, report_failure
        self._train_args = (runs, device, self.threads, self.retries, log_path)
        self._shared_owner: dict[str, str] = {}  # shared training -> the run dir whose job trains it
        self._held: list[tuple[dict, object]] = []  # trainings waiting for a shared training's first run
        starts = []
        for c in pending:
            if c.external is not None:
                self._submit_cell(c)
            elif c.run_dir not in self._waiting:
                self._waiting[c.run_dir] = [c]
                rec = {"run_dir": c.run_dir, "method": c.method, "dataset": c.dataset, "seed": c.seed,
                       "status": "pending", "cached": None, "seconds": None, "attempts": None, "reason": None}
                self.trainings.append(rec)
                starts.append((rec, c))
            else:
                self._waiting[c.run_dir].append(c)
        # the first run of each shared training first (the others that share it wait), then the rest
        owners = []
        for rec, c in ((r, c) for r, c in starts if c.shared):
            new = [k for k in c.shared if k not in self._shared_owner]
            for k in new:
                self._shared_owner[k] = c.run_dir
            (owners if new else self._held).append((rec, c))
        for rec, c in owners + [(r, c) for r, c in starts if not c.shared]:
            self._submit_training(rec, c)
        try:
            while self._jobs:
                for fut in self.wait(list(self._jobs)):
                    self._finished(fut, runs, device)
        except KeyboardInterrupt:
            for fut in self._jobs:
                with contextlib.suppress(Exception):
                    fut.cancel()
            for c in pending:
                if c.status == "pending":
                    c.reason = "interrupted"
            write()
            raise

    def _submit(self, kind, payload, fn, *args, attempt: int = 1) -> None:
        self._jobs[self.submit(fn, *args)] = (kind, payload, (fn, args), attempt)

    def _submit_training(self, rec: dict, c) -> None:
        self._submit("train", rec, train_job, c.cfg, *self._train_args)

    def _release_held(self, run_dir: str) -> None:
        """Training ``run_dir`` finished (or failed: each held run then tries for itself): submit every held run
        none of whose shared trainings is still in flight."""
        for k in [k for k, owner in self._shared_owner.items() if owner == run_dir]:
            del self._shared_owner[k]
        ready = [(rec, c) for rec, c in self._held if not any(k in self._shared_owner for k in c.shared)]
        self._held = [(rec, c) for rec, c in self._held if any(k in self._shared_owner for k in c.shared)]
        for rec, c in ready:
            self._submit_training(rec, c)

    def _submit_cell(self, c) -> None:
        self._submit("cell", c, cell_job, c, *self._cell_args)

    def _finished(self, fut, runs: str, device: str) -> None:
        """Record one finished job and submit what waited for it (a job that died: submitted again)."""
        kind, payload, (fn, args), attempt = self._jobs.pop(fut)
        try:
            out = fut.result()
        except Exception as e:  # noqa: BLE001 - the job died (worker killed, Slurm failure)
            if attempt <= self.retries:
                self._submit(kind, payload, fn, *args, attempt=attempt + 1)
                return
            out = {"status": "failed", "attempts": attempt,
                   "reason": f"job failed: {type(e).__name__}: {' '.join(str(e).split())[:500]}"}
        if kind == "train":
            payload.update(out)
            self._write()
            self._release_held(payload["run_dir"])
            self._trained(payload["run_dir"], out, runs, device)
        elif kind == "ref":
            self._refs_left[payload] -= 1  # a failed reference is trained (or reported) by its attack cell
            if self._refs_left[payload] == 0:
                self._release(payload)
        else:
            self._finish_cell(payload, out)

    def _trained(self, run_dir: str, out: dict, runs: str, device: str) -> None:
        """A training finished: fail its cells, or submit its attacks' reference models, else its cells."""
        if out.get("status") == "failed":
            for c in self._waiting.pop(run_dir, []):
                self._finish_cell(c, {"status": "failed", "attempts": out.get("attempts"),
                                      "reason": f"training failed: {out.get('reason')}"})
            return
        seen = set()
        for c in self._waiting.get(run_dir, []):
            pool = reference_pool(c)
            for i in range(pool[2] if pool else 0):
                if (pool[0], pool[1], i) in seen:
                    continue
                seen.add((pool[0], pool[1], i))
                self._refs_left[run_dir] = self._refs_left.get(run_dir, 0) + 1
                self._submit("ref", run_dir, reference_job, c.cfg, c.attack, runs, device,
                             self.threads, self.retries, i)
        if not self._refs_left.get(run_dir):
            self._release(run_dir)

    def _release(self, run_dir: str) -> None:
        for c in self._waiting.pop(run_dir, []):
            self._submit_cell(c)

    def _finish_cell(self, c, out: dict) -> None:
        for k, v in out.items():
            setattr(c, k, v)
        if c.status == "failed":
            self._report_failure(c)
        self._write()
        self._pb.set_postfix_str(c.label()[:60])
        self._pb.update(1)


def _worker_init(jobs: int, threads: int, records: tuple[str, ...] = (), driver: int | None = None) -> None:
    """Each pool worker: dies with ``driver``, counts as one of ``jobs`` privbench workers with ``threads`` threads,
    and registers the suite's ``datasets:`` paths as the driver did."""
    if driver is not None:
        die_with_parent(driver)
    configure_worker_process(threads, workers=jobs)
    for path in records:
        register_records(path)


class LocalPool(PoolExecutor):
    """``--jobs N``: N worker processes on this machine (spawned: a fresh interpreter, no forked torch state), the
    cores this process may use divided among them."""
    name = "local"

    def __init__(self, jobs: int, retries: int, threads: int | None = None, records: tuple[str, ...] = ()):
        threads = threads or max(1, available_cores() // jobs)
        super().__init__(retries, threads)
        self.jobs, self.records = jobs, records
        self.pool = self._new_pool()

    def _new_pool(self) -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(max_workers=self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                      initializer=_worker_init,
                                      initargs=(self.jobs, self.threads, self.records, os.getpid()))

    def submit(self, fn, *args):
        try:
            return self.pool.submit(fn, *args)
        except BrokenProcessPool:  # a worker died: every job it held failed (and is resubmitted)
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = self._new_pool()
            return self.pool.submit(fn, *args)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def describe(self) -> dict:
        return {"jobs": self.jobs, "threads_per_job": self.threads}


def wait_polling(futures: list, interval: float = 0.5) -> list:
    """The finished ones of ``futures`` that have ``done()`` (submitit jobs), polling until one is."""
    while True:
        done = [f for f in futures if f.done()]
        if done:
            return done
        time.sleep(interval)
