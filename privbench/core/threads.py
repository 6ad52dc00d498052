"""CPU threads of this process: one setting for torch's intra-op pool (and OpenMP/MKL under it).

Two privbench processes on one 2-core machine, each with torch's default pool (one thread per core), were
seen to slow from ~5 steps/s to one step per 11 s: their OpenMP threads spin and preempt each other on the
same cores. The default here therefore divides the cores this process may run on (``os.sched_getaffinity``,
which honours ``taskset`` and cgroup cpusets, unlike ``os.cpu_count``) among the workers that run at the
same time on this machine:

- ``PRIVBENCH_WORKERS``: set by whatever starts several privbench workers at once (a bench executor);
- ``LOCAL_WORLD_SIZE``: set by torchrun for the processes of one node.

An explicit ``--threads N`` wins over both. ``OMP_NUM_THREADS`` given by the user is also honoured as the
default (torch reads it at start-up; torchrun sets it to 1 when unset).

Two more rules keep a busy machine (a CI runner, a laptop, a shared server) from costing more than its fair share
(docs/scaling.md §1, measured by ``benchmarks/threads_under_load.py``):

- **passive OpenMP wait on a busy machine** (:func:`passive_wait_by_default`, called by ``import privbench``
  before torch is imported, after a 0.1 s look at ``/proc/stat``): when other processes hold at least half the
  cores, OpenMP's worker threads sleep between parallel regions instead of spinning on cores those processes
  need; an idle machine keeps OpenMP's own (faster there) wait. A user's own ``OMP_WAIT_POLICY`` is left as it is;
- **one thread for a small model** (:func:`fit_threads_to_model`): below :data:`SMALL_MODEL_PARAMS` parameters a
  step's operations are too small for a second thread to pay for its wake-ups, and under load the second thread
  waits for a core. Only a default count is lowered: ``--threads N`` and ``OMP_NUM_THREADS`` are kept.

torch is imported inside the functions that need it, so that ``import privbench`` (and the command line's
start-up) stays light.
"""
from __future__ import annotations

import os
import sys
import time

from .errors import BadInput

_configured: int | None = None
_explicit = False  # the count was given (--threads, OMP_NUM_THREADS), not chosen by default_threads

#: models with fewer parameters train, sample and are attacked with one thread by default (the test and tiny
#: presets' UNets: 41k and 0.16M parameters; the paper UNet has 35.7M) — benchmarks/threads_under_load.py
SMALL_MODEL_PARAMS = 2_000_000


#: a machine is busy when other processes used at least this share of all its cores during the look at start-up
BUSY_SHARE = 0.5
_LOOK_S = 0.1  # how long import privbench watches /proc/stat (its cost to start-up)


def cpu_share_in_use(window: float = _LOOK_S) -> float | None:
    """Share of the machine's CPU time (all cores, from ``/proc/stat``) spent running during ``window`` seconds
    while this process sleeps: what other processes use. None where there is no ``/proc/stat``."""
    def read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
        return sum(v), v[3] + v[4]

    try:
        total0, idle0 = read()
        time.sleep(window)
        total1, idle1 = read()
    except (OSError, ValueError, IndexError):
        return None
    dt = total1 - total0
    return None if dt <= 0 else 1.0 - (idle1 - idle0) / dt


def wait_policy_for(environ, torch_loaded: bool, share_in_use) -> str | None:
    """The OpenMP wait policy privbench sets (None: leave it): PASSIVE on a busy machine (others used
    ≥ :data:`BUSY_SHARE` of the cores: ``share_in_use()``, asked only when the rest allows a choice), unless the
    user chose a policy or spin count, or torch's OpenMP runtime has already read the environment. An idle machine
    keeps OpenMP's own wait (it spins briefly between parallel regions: 0.79× the steps/s with PASSIVE for the
    paper UNet on 2 idle cores). The thread count, which decides the numbers, never depends on the load; the wait
    policy does not change a number."""
    if "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ or torch_loaded:
        return None
    share = share_in_use()
    if share is not None and share < BUSY_SHARE:
        return None
    return "PASSIVE"


def passive_wait_by_default() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` on a busy machine (:func:`wait_policy_for`, from a 0.1 s look at
    ``/proc/stat``); True if set. Child processes inherit it."""
    policy = wait_policy_for(os.environ, "torch" in sys.modules, cpu_share_in_use)
    if policy is None:
        return False
    os.environ["OMP_WAIT_POLICY"] = policy
    return True


def available_cores() -> int:
    """Cores this process may be scheduled on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def env_world_size() -> int:
    """The number of processes torchrun started (``WORLD_SIZE``; 1 without torchrun)."""
    return env_positive_int("WORLD_SIZE", 1, " (set by torchrun)")


def env_positive_int(var: str, default: int, hint: str = "") -> int:
    """A positive integer from the environment variable ``var`` (``default`` when unset or empty); BadInput
    otherwise."""
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    try:
        v = int(raw)
    except ValueError:
        v = 0
    if v < 1:
        raise BadInput(f"${var}={raw!r}: expected a positive integer{hint}")
    return v


def concurrent_workers() -> int:
    """Processes of privbench sharing this machine's cores at once (≥ 1), from the environment."""
    # torchrun workers inside a bench worker would multiply; neither layer does that
    return max(env_positive_int(var, 1) for var in ("PRIVBENCH_WORKERS", "LOCAL_WORLD_SIZE"))


def _user_omp_threads() -> int | None:
    raw = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def default_threads() -> int:
    return _user_omp_threads() or max(1, available_cores() // concurrent_workers())


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters


def retain_freed_memory() -> bool:
    """Keep freed heap memory in this process instead of returning it to the OS (glibc only; True if set).

    A DP-SGD step on CPU allocates and frees tens of MB of per-record gradients; with glibc's defaults the
    freed top of the heap is trimmed and the next step faults the same pages in again (≈ 3000 page faults and
    ~10 ms of kernel time per step of the tiny model, ~7% of the step). Large blocks (up to 256 MB) then come
    from the heap and up to 1 GiB of freed heap is kept for reuse — the usual allocator tuning for training
    on CPU (what jemalloc/tcmalloc would otherwise provide)."""
    # lazy: ctypes only when threads are configured; core.threads loads with `import privbench`
    import ctypes
    import ctypes.util
    import platform

    if platform.system() != "Linux":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl): leave the allocator alone
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 256 << 20)) and bool(mallopt(_M_TRIM_THRESHOLD, 1 << 30))


def configure_threads(n: int | None = None) -> int:
    """Set torch's intra-op threads to ``n`` (None: :func:`default_threads`) and return the count used
    (and keep freed memory for reuse: :func:`retain_freed_memory`).

    torch.set_num_threads also sizes the OpenMP and MKL pools of this process, which is what
    ``OMP_NUM_THREADS`` would do at start-up. The inter-op pool can be sized only before its first use;
    when that has happened it is left as it is (privbench runs no inter-op parallel work).
    """
    global _configured, _explicit
    # lazy: core.threads loads with `import privbench`, before torch (docs/scaling.md §1)
    import torch

    explicit = n is not None or _user_omp_threads() is not None
    if n is None:
        n = default_threads()
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BadInput(f"--threads {n!r}: expected a positive integer")
    torch.set_num_threads(n)
    retain_freed_memory()
    try:
        torch.set_num_interop_threads(n)
    except RuntimeError:  # already used (or already set) in this process: torch allows it only once
        pass
    _configured, _explicit = n, explicit
    return n


def fit_threads_to_model(model) -> int:
    """One intra-op thread for a model below :data:`SMALL_MODEL_PARAMS` parameters when the count was chosen by
    :func:`configure_threads`'s default (not given); returns the count in use. A no-op elsewhere (a library user
    who never called configure_threads keeps torch's own setting)."""
    global _configured
    # lazy: core.threads loads with `import privbench`, before torch (docs/scaling.md §1)
    import torch

    if _configured is None or _explicit or _configured == 1:
        return torch.get_num_threads()
    if sum(p.numel() for p in model.parameters()) < SMALL_MODEL_PARAMS:
        torch.set_num_threads(1)
        _configured = 1
    return torch.get_num_threads()


def parallel_processes(n_units: int, n_params: int) -> int:
    """Processes for ``n_units`` independent trainings of a model with ``n_params`` parameters: one per core (at
    most one per unit) when each would train on one thread anyway — a small model and the count chosen by
    :func:`configure_threads`'s default, as in :func:`fit_threads_to_model` — so the numbers are those of the
    one-thread run; else 1. Never inside another privbench worker (``PRIVBENCH_WORKERS``) or before
    :func:`configure_threads` ran (a library user keeps one process)."""
    if n_units < 2 or _configured is None or _explicit or n_params >= SMALL_MODEL_PARAMS or concurrent_workers() > 1:
        return 1
    return max(1, min(n_units, available_cores()))


def configured_threads() -> int:
    """The count set by :func:`configure_threads`, else torch's current intra-op count."""
    if _configured is not None:
        return _configured
    # lazy: core.threads loads with `import privbench`, before torch (docs/scaling.md §1)
    import torch

    return torch.get_num_threads()


def configure_worker_process(threads: int, workers: int | None = None) -> None:
    """First call of a worker process a bench executor started (a pool worker, a Ray task): ``threads`` OpenMP/MKL
    threads, ``workers`` privbench workers sharing the machine, no progress bars of its own.

    The only place besides :func:`passive_wait_by_default` where privbench writes the process environment: the
    OpenMP runtime reads ``OMP_NUM_THREADS`` when torch loads (and the processes this worker starts inherit it),
    so a variable, not a call, is what reaches it."""
    from . import progress  # lazy: tqdm stays out of `import privbench`

    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    if workers is not None:
        os.environ["PRIVBENCH_WORKERS"] = str(workers)
    progress.silence_process()
    # lazy: after OMP_NUM_THREADS is set above, which OpenMP reads when torch loads
    import torch  # a reused worker (Ray) may run tasks of other thread counts: the pool is set each time

    torch.set_num_threads(threads)
