"""A pool worker lives no longer than the driver that started it: a ``ProcessPoolExecutor`` worker is not told
when its driver is killed and would go on holding cores and run locks. Two bindings: Linux's ``PR_SET_PDEATHSIG``
and, where that is missing or came too late, a daemon thread that watches the parent's pid.
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
#: a worker's exit status when its driver died
ORPHANED_EXIT = 70


def die_with_parent(parent: int) -> None:
    """Exit this process at once, without cleanup, when ``parent`` (the driver's pid) is no longer its parent."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no libc prctl: the watchdog still runs
            pass
    if os.getppid() != parent:  # the driver died before the signal was asked for
        os._exit(ORPHANED_EXIT)
    threading.Thread(target=_watch, args=(parent,), name="privbench-driver-watch", daemon=True).start()


def _watch(parent: int) -> None:
    while True:
        time.sleep(WATCH_INTERVAL_S)
        if os.getppid() != parent:
            os._exit(ORPHANED_EXIT)
