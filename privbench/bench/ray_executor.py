"""``privbench bench --executor ray``: every training and every cell of a bench grid as a Ray task
(tasks, resources, retries: docs/benchmarks.md, "The Ray executor"). Ray (the ``[ray]`` extra) is imported only
here. A cell task takes its training task's ``ObjectRef`` as an argument, so Ray starts it once the training is done.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import time
from pathlib import Path

from ..core.errors import BadInput
from ..core.extras import require
from ..core.threads import configure_worker_process
from ..runs import train as api
from ..runs.store import run_dir_for, verified_done
from .cell_run import cell_log, run_cell

LOG = logging.getLogger(__name__)

#: the GPU share a cell task reserves with --device cuda; a training takes a GPU
CELL_GPU = 0.25


class CellFailed(Exception):
    """Raised by a task whose every attempt failed (``stage``: training or cell)."""

    def __init__(self, stage: str, attempts: int, reason: str):
        super().__init__(stage, attempts, reason)
        self.stage, self.attempts, self.reason = stage, attempts, reason

    def __str__(self) -> str:
        return f"{self.stage} failed after {self.attempts} attempt(s): {self.reason}"


def _in_task(threads: int) -> None:
    """What every task sets first: its thread count (the CPUs it reserved) and no progress bars of its own."""
    configure_worker_process(threads)


def train_task(cfg, runs: str, device: str, threads: int, retries: int, log_path: str) -> dict:
    """Train (or find cached) the run of ``cfg``; raises :class:`CellFailed` once every attempt failed."""
    _in_task(threads)
    run_dir = run_dir_for(cfg, Path(runs))
    reason = None
    for attempt in range(1, retries + 2):
        t0 = time.time()
        try:
            cached = verified_done(run_dir) is not None
            with cell_log(Path(log_path)):
                LOG.info(f"--- {_dt.datetime.now().isoformat(timespec='seconds')} train {run_dir.name} "
                         f"(attempt {attempt})")
                api.train(cfg, Path(runs), device)
            return {"status": "done", "cached": cached, "attempts": attempt,
                    "seconds": None if cached else round(time.time() - t0, 1)}
        except Exception as e:  # noqa: BLE001 - retried, then reported as the cells' failure
            reason = f"{type(e).__name__}: {e}"
    raise CellFailed("training", retries + 1, reason)


def cell_task(c, runs: str, device: str, n_samples: int, fcfg: dict | None, log_path: str, threads: int,
              retries: int, trained: dict | None) -> dict:
    """Run one cell; ``trained`` (the training task's result, None for an external model) only makes Ray wait."""
    del trained
    _in_task(threads)

    for attempt in range(1, retries + 2):
        c.status, c.reason, c.attempts = "pending", None, attempt
        t0 = time.time()
        run_cell(c, Path(runs), device, n_samples, fcfg, Path(log_path))
        if c.status != "failed":
            break
    if c.reason != "cached":
        c.seconds = round(time.time() - t0, 1)
    return {k: getattr(c, k) for k in ("status", "reason", "result_path", "summary", "seconds", "attempts")}


def _failure(e: BaseException) -> tuple[str, int | None]:
    """(one-line reason, attempts) of a task's exception as ``ray.get`` raises it."""
    cause = getattr(e, "cause", None) or e
    if isinstance(cause, CellFailed):
        return (cause.reason if cause.stage == "cell" else f"training failed: {cause.reason}"), cause.attempts
    text = " ".join(str(cause).split())
    return f"{type(cause).__name__}: {text[:500]}", None


class RayExecutor:
    """Runs a planned grid on a Ray cluster (``address``: ``None`` = $RAY_ADDRESS or a cluster on this machine, else
    a new local one; ``local`` = a new local cluster; ``auto`` or HOST:PORT / ray://HOST:PORT = an existing one)."""

    def __init__(self, address: str | None = None, retries: int = 1, cpus_per_task: int = 1):
        self.address, self.retries, self.cpus = address, retries, cpus_per_task
        self.ray = None
        self.owns = False
        self.device = "cpu"
        self.trainings: list[dict] = []

    def connect(self, device: str) -> str:
        """Join (or start) the cluster; returns the device the tasks use (auto: cuda if the cluster has a GPU)."""
        ray = self.ray = require("ray", "--executor ray")
        if not ray.is_initialized():
            try:
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                         logging_level=logging.WARNING)
            except ConnectionError as e:
                raise BadInput(f"--address {self.address}: cannot join a Ray cluster ({' '.join(str(e).split())})") \
                    from None
            self.owns = True
        gpus = float(ray.cluster_resources().get("GPU", 0))
        cpus = float(ray.cluster_resources().get("CPU", 0))
        if device in (None, "auto"):
            device = "cuda" if gpus > 0 else "cpu"
        if device == "cuda" and gpus < 1:
            raise BadInput("--device cuda: the Ray cluster has no GPU (ray status lists its resources)")
        if cpus < self.cpus:
            raise BadInput(f"--cpus-per-task {self.cpus}: the Ray cluster has {cpus:g} CPUs")
        self.device = device
        return device

    def describe(self) -> dict:
        ray = self.ray
        res = ray.cluster_resources()
        gpu = self.device == "cuda"
        return {"address": ray.get_runtime_context().gcs_address, "nodes": len([n for n in ray.nodes() if n["Alive"]]),
                "cpus": res.get("CPU", 0), "gpus": res.get("GPU", 0), "cpus_per_task": self.cpus,
                "gpus_per_training": 1 if gpu else 0, "gpus_per_cell": CELL_GPU if gpu else 0,
                "ray_version": ray.__version__}

    def close(self) -> None:
        if self.owns and self.ray is not None:
            self.ray.shutdown()
            self.owns = False

    def run(self, cells, *, runs, device, n_samples, fcfg, log_path, write, pb, report_failure) -> None:
        ray = self.ray
        if ray is None:  # not connected: nothing was pending
            pb.update(len(cells))
            return
        gpu = device == "cuda"
        opts = dict(num_cpus=self.cpus, max_retries=self.retries, retry_exceptions=False)
        train = ray.remote(train_task).options(num_gpus=1 if gpu else 0, name="privbench-train", **opts)
        cell = ray.remote(cell_task).options(num_gpus=CELL_GPU if gpu else 0, name="privbench-cell", **opts)
        runs, log_path = str(Path(runs).resolve()), str(Path(log_path).resolve())
        pending = [c for c in cells if c.status == "pending"]
        pb.update(len(cells) - len(pending))
        trains, by_run = self._submit_trainings(train, pending, runs, device, log_path)
        futures = {cell.remote(c, runs, device, n_samples, fcfg, log_path, self.cpus, self.retries,
                               by_run.get(c.run_dir)): c for c in pending}
        waiting = list(trains) + list(futures)
        try:
            while waiting:
                ready, waiting = ray.wait(waiting, num_returns=1)
                for ref in ready:
                    if ref in trains:
                        self._finish_training(ref, trains[ref])
                    else:
                        self._finish_cell(ref, futures[ref], report_failure, pb)
                    write()
        except KeyboardInterrupt:
            for ref in waiting:
                with contextlib.suppress(Exception):
                    ray.cancel(ref)
            for c in futures.values():
                if c.status == "pending":
                    c.reason = "interrupted"
            write()
            raise

    def _submit_trainings(self, train, pending, runs: str, device: str, log_path: str) -> tuple[dict, dict]:
        """One training task per run folder of the pending cells (an outside model's cell trains nothing):
        (ObjectRef → its trainings record, run_dir → ObjectRef)."""
        trains: dict = {}
        by_run: dict = {}
        for c in pending:
            if getattr(c, "external", None) is not None or c.run_dir in by_run:
                continue
            ref = train.remote(c.cfg, runs, device, self.cpus, self.retries, log_path)
            by_run[c.run_dir] = ref
            rec = {"run_dir": c.run_dir, "method": c.method, "dataset": c.dataset, "seed": c.seed,
                   "status": "pending", "cached": None, "seconds": None, "attempts": None, "reason": None}
            trains[ref] = rec
            self.trainings.append(rec)
        return trains, by_run

    def _finish_training(self, ref, rec: dict) -> None:
        try:
            rec.update(self.ray.get(ref))
        except Exception as e:  # noqa: BLE001 - recorded; its cells fail with it
            rec["status"], (rec["reason"], rec["attempts"]) = "failed", _failure(e)

    def _finish_cell(self, ref, c, report_failure, pb) -> None:
        try:
            for k, v in self.ray.get(ref).items():
                setattr(c, k, v)
        except Exception as e:  # noqa: BLE001 - a failed training, a dead worker: the cell failed
            c.status, (c.reason, c.attempts) = "failed", _failure(e)
        if c.status == "failed":
            report_failure(c)
        pb.set_postfix_str(c.label()[:60])
        pb.update(1)
