"""A pool worker lives no longer than the driver that started it.

A ``ProcessPoolExecutor`` worker whose driver is killed (``kill -9``, the OOM killer) is not told: it blocks on the
pool's call queue, or finishes the training or cell it holds, for nobody — the driver alone records cells in
``bench.json`` — while holding cores and run locks. :func:`die_with_parent` binds the worker to its driver twice:
the kernel sends it SIGKILL when its parent exits (Linux ``prctl(PR_SET_PDEATHSIG)``), and a daemon thread polls
its parent's pid (a worker re-parented to init or a subreaper sees another pid) on any POSIX system, in case the
signal is not available or the parent died before it was asked for.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

#: Linux's ``PR_SET_PDEATHSIG`` (linux/prctl.h)
PR_SET_PDEATHSIG = 1
#: how often the watchdog thread compares its parent's pid (seconds): a dead driver's worker exits within this
WATCH_INTERVAL_S = 0.5
#: a worker's exit status when its driver died (the driver is gone: nobody reads it; it names the cause in ps)
ORPHANED_EXIT = 70


def die_with_parent(parent: int) -> None:
    """Exit this process (at once, without cleanup: its work has no one to report to) when ``parent`` — the pid
    of the driver that started it — is no longer its parent."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no libc prctl (an unusual build): the watchdog below still runs
            pass
    if os.getppid() != parent:  # the driver died before the signal was asked for
        os._exit(ORPHANED_EXIT)
    threading.Thread(target=_watch, args=(parent,), name="privbench-driver-watch", daemon=True).start()


def _watch(parent: int) -> None:
    while True:
        time.sleep(WATCH_INTERVAL_S)
        if os.getppid() != parent:
            os._exit(ORPHANED_EXIT)
