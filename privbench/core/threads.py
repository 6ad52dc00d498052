"""CPU threads of this process: one setting for torch's intra-op pool (and OpenMP/MKL under it).

The default count, the busy-machine wait policy and one thread for small models: docs/scaling.md §1. torch is
imported inside the functions that need it, so that ``import privbench`` stays light.
"""
from __future__ import annotations

import os
import sys
import time

from .errors import BadInput

_configured: int | None = None
_explicit = False  # the count was given (--threads, OMP_NUM_THREADS), not chosen by default_threads

#: models with fewer parameters get one thread by default (too small for a second to pay for its wake-ups)
SMALL_MODEL_PARAMS = 2_000_000


#: a machine is busy when other processes used at least this share of all its cores during the look at start-up
BUSY_SHARE = 0.5
_LOOK_S = 0.1  # how long the command line watches /proc/stat (its cost to start-up)


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
    """The OpenMP wait policy privbench sets (None: leave it): PASSIVE when others used ≥ :data:`BUSY_SHARE` of the
    cores (``share_in_use()``, asked last), unless the user chose a policy or spin count or torch has loaded. The
    wait policy never changes a number; the thread count, which does, never depends on the load."""
    if "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ or torch_loaded:
        return None
    share = share_in_use()
    if share is not None and share < BUSY_SHARE:
        return None
    return "PASSIVE"


def passive_wait_by_default() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` on a busy machine (:func:`wait_policy_for`); True if set. The command line
    calls it first; a library import never does."""
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


#: the most CPU threads a process may use (--threads, $OMP_NUM_THREADS): beyond any machine's cores, below where
#: creating the thread pools fails and the process dies
MAX_THREADS = 1024


def check_thread_env() -> None:
    """BadInput for an ``$OMP_NUM_THREADS`` above :data:`MAX_THREADS` (checked before numpy or torch load: their
    pools are sized from it when they are imported)."""
    n = _user_omp_threads()
    if n is not None and n > MAX_THREADS:
        raise BadInput(f"$OMP_NUM_THREADS={n}: at most {MAX_THREADS} threads")


def _user_omp_threads() -> int | None:
    raw = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def default_threads() -> int:
    return _user_omp_threads() or max(1, available_cores() // concurrent_workers())


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters


def retain_freed_memory() -> bool:
    """Keep freed heap memory in this process instead of returning it to the OS (glibc only; True if set): blocks
    up to 256 MB from the heap, up to 1 GiB kept, so a DP-SGD step on CPU does not fault its per-record gradient
    buffers in again every step."""
    # lazy: ctypes only when threads are configured (`import privbench` stays light)
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
    """Set torch's intra-op threads (and so the OpenMP and MKL pools) to ``n`` (None: :func:`default_threads`),
    keep freed memory (:func:`retain_freed_memory`) and return the count. The inter-op pool, sized only before its
    first use, is otherwise left as it is (privbench runs no inter-op parallel work)."""
    global _configured, _explicit
    # lazy: torch only where threads are set (`import privbench` stays light)
    import torch

    explicit = n is not None or _user_omp_threads() is not None
    if n is None:
        n = default_threads()
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_THREADS:
        raise BadInput(f"--threads {n!r}: expected an integer in 1..{MAX_THREADS}")
    torch.set_num_threads(n)
    retain_freed_memory()
    try:
        torch.set_num_interop_threads(n)
    except RuntimeError:  # already used (or already set) in this process: torch allows it only once
        pass
    _configured, _explicit = n, explicit
    return n


def fit_threads_to_model(model) -> int:
    """One intra-op thread for a model below :data:`SMALL_MODEL_PARAMS` parameters when :func:`configure_threads`
    chose the count by default; returns the count in use (a no-op if configure_threads never ran)."""
    global _configured
    # lazy: torch only where threads are set (`import privbench` stays light)
    import torch

    if _configured is None or _explicit or _configured == 1:
        return torch.get_num_threads()
    if sum(p.numel() for p in model.parameters()) < SMALL_MODEL_PARAMS:
        torch.set_num_threads(1)
        _configured = 1
    return torch.get_num_threads()


def parallel_processes(n_units: int, n_params: int) -> int:
    """Processes for ``n_units`` independent trainings of an ``n_params`` model: one per core (at most one per
    unit) when each would train on one thread anyway (:func:`fit_threads_to_model`), so the numbers are the
    one-thread run's; else 1, and 1 inside another privbench worker or before :func:`configure_threads` ran."""
    if n_units < 2 or _configured is None or _explicit or n_params >= SMALL_MODEL_PARAMS or concurrent_workers() > 1:
        return 1
    return max(1, min(n_units, available_cores()))


def configure_worker_process(threads: int, workers: int | None = None) -> None:
    """First call of a worker process a bench executor started (a pool worker, a Ray task): ``threads`` OpenMP/MKL
    threads, ``workers`` privbench workers sharing the machine, no progress bars of its own. It sets environment
    variables: OpenMP reads ``OMP_NUM_THREADS`` when torch loads, and child processes inherit it."""
    from . import progress  # lazy: tqdm stays out of `import privbench`

    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    if workers is not None:
        os.environ["PRIVBENCH_WORKERS"] = str(workers)
    progress.silence_process()
    # lazy: after OMP_NUM_THREADS is set above, which OpenMP reads when torch loads
    import torch  # a reused worker (Ray) may run tasks of other thread counts: the pool is set each time

    torch.set_num_threads(threads)
