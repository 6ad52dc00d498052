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
"""
from __future__ import annotations

import os

import torch

from .errors import BadInput

_configured: int | None = None


def available_cores() -> int:
    """Cores this process may be scheduled on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


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


def default_threads() -> int:
    raw = os.environ.get("OMP_NUM_THREADS", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return max(1, available_cores() // concurrent_workers())


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters


def retain_freed_memory() -> bool:
    """Keep freed heap memory in this process instead of returning it to the OS (glibc only; True if set).

    A DP-SGD step on CPU allocates and frees tens of MB of per-record gradients; with glibc's defaults the
    freed top of the heap is trimmed and the next step faults the same pages in again (≈ 3000 page faults and
    ~10 ms of kernel time per step of the tiny model, ~7% of the step). Large blocks (up to 256 MB) then come
    from the heap and up to 1 GiB of freed heap is kept for reuse — the usual allocator tuning for training
    on CPU (what jemalloc/tcmalloc would otherwise provide)."""
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
    global _configured
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
    _configured = n
    return n


def configured_threads() -> int:
    """The count set by :func:`configure_threads`, else torch's current intra-op count."""
    return _configured if _configured is not None else torch.get_num_threads()
