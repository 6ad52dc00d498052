"""How a bench runs its trainings and cells, as one value (``privbench bench --executor/--jobs/--retries/
--cpus-per-task/--address/--slurm-*``); light, so that ``privbench.api`` imports it without torch."""
from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import BadInput
from ..core.extras import require

EXECUTORS = ("local", "ray", "slurm")


@dataclass(frozen=True)
class ExecutorOptions:
    """``name``: ``local`` (here; ``jobs`` worker processes at once), ``ray`` (each training and cell a Ray task
    on the cluster at ``address``) or ``slurm`` (submitit jobs; ``slurm``: ``{partition, gpus_per_task,
    time_train_min, time_cell_min, cluster}``, bench/slurm_executor.py). ``retries``: attempts after a failed cell
    (None: 1 with ray and slurm, 0 locally); ``cpus_per_task``: the CPUs (and torch threads) of each ray or slurm
    task."""
    name: str = "local"
    jobs: int = 1
    retries: int | None = None
    cpus_per_task: int = 1
    address: str | None = None
    slurm: dict | None = None

    def checked_retries(self) -> int:
        """Refuses settings that do not fit (BadInput, one line); returns the retries (with their default)."""
        if self.address is not None and self.name != "ray":
            raise BadInput("--address: only with --executor ray")
        if self.slurm is not None and self.name != "slurm":
            raise BadInput("slurm settings: only with executor='slurm'")
        if self.name not in EXECUTORS:
            raise BadInput(f"--executor {self.name!r}; choose {' or '.join(EXECUTORS)}")
        retries = self.retries
        if retries is None:
            retries = 1 if self.name in ("ray", "slurm") else 0
        jobs, cpus = self.jobs, self.cpus_per_task
        if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= 1024:
            raise BadInput(f"--jobs {jobs!r}: expected an integer in [1, 1024]")
        if jobs > 1 and self.name != "local":
            raise BadInput(f"--jobs is the local executor's; --executor {self.name} sizes its own workers")
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
            raise BadInput(f"--retries {retries!r}: expected an integer in [0, 100]")
        if isinstance(cpus, bool) or not isinstance(cpus, int) or cpus < 1:
            raise BadInput(f"--cpus-per-task {cpus!r}: expected a positive integer")
        if cpus != 1 and self.name == "local":
            raise BadInput("--cpus-per-task: only with --executor ray or slurm (locally, --jobs divides the cores)")
        if self.name == "ray":
            require("ray", "--executor ray")  # before the suite is planned: one line, exit 2
        if self.name == "slurm":
            require("submitit", "--executor slurm")
        return retries
