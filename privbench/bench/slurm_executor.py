"""``privbench bench --executor slurm``: every training, reference model and cell of a grid as a Slurm job
through submitit (docs/benchmarks.md, "The Slurm executor"). :class:`~privbench.bench.pool_executor.PoolExecutor`
drives the grid; ``cluster="local"`` is submitit's local executor, no Slurm (what the tests use).
"""
from __future__ import annotations

from pathlib import Path

from ..core.errors import BadInput
from ..core.extras import require
from .pool_executor import PoolExecutor, reference_job, train_job, wait_polling

CLUSTERS = ("slurm", "local")


class SlurmPool(PoolExecutor):
    name = "slurm"

    def __init__(self, folder: Path, *, retries: int, cpus_per_task: int = 1, partition: str | None = None,
                 gpus_per_task: int = 0, time_train_min: int = 1440, time_cell_min: int = 240,
                 cluster: str = "slurm"):
        if cluster not in CLUSTERS:
            raise BadInput(f"--slurm-cluster {cluster!r}: choose {' or '.join(CLUSTERS)}")
        for name, v in (("--slurm-time-train", time_train_min), ("--slurm-time-cell", time_cell_min)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise BadInput(f"{name} {v!r}: expected a positive number of minutes")
        if isinstance(gpus_per_task, bool) or not isinstance(gpus_per_task, int) or gpus_per_task < 0:
            raise BadInput(f"--slurm-gpus-per-task {gpus_per_task!r}: expected an integer >= 0")
        submitit = require("submitit", "--executor slurm")
        super().__init__(retries, cpus_per_task)
        self.folder = Path(folder)
        self.cluster, self.partition, self.gpus = cluster, partition, gpus_per_task
        self.time_train, self.time_cell = time_train_min, time_cell_min
        self._submitit = submitit
        self.executor = submitit.AutoExecutor(folder=str(self.folder / "%j"), cluster=cluster)
        self.job_ids: list[str] = []

    def _params(self, training: bool) -> dict:
        p = {"timeout_min": self.time_train if training else self.time_cell, "cpus_per_task": self.threads,
             "tasks_per_node": 1, "nodes": 1, "name": "privbench-train" if training else "privbench-cell"}
        if self.cluster == "slurm":
            if self.partition:
                p["slurm_partition"] = self.partition
            if self.gpus:
                p["slurm_gpus_per_task"] = self.gpus
        return p

    def submit(self, fn, *args):
        self.executor.update_parameters(**self._params(fn in (train_job, reference_job)))
        job = self.executor.submit(fn, *args)
        self.job_ids.append(str(job.job_id))
        return job

    def wait(self, futures: list) -> list:
        return wait_polling(futures, 0.5 if self.cluster == "local" else 10.0)

    def describe(self) -> dict:
        return {"cluster": self.cluster, "partition": self.partition, "cpus_per_task": self.threads,
                "gpus_per_task": self.gpus, "time_train_min": self.time_train, "time_cell_min": self.time_cell,
                "folder": str(self.folder), "submitit_version": self._submitit.__version__}
