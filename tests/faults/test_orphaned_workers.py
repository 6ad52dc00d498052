"""The pool workers of ``privbench bench --jobs N`` exit when their driver dies.

After ``kill -9`` of the driver alone, its worker processes (blocked on the pool's call queue, or still training)
must not run on and finish cells nobody would record: each worker asks the kernel for SIGKILL when its parent dies
(Linux ``prctl(PR_SET_PDEATHSIG)``) and watches its parent's pid besides; the bench's record (``bench.json``) is
written by the driver alone, so nothing a worker finishes after the driver died is recorded as done."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

ROOT = Path(__file__).resolve().parents[2]


def _group(pgid: int) -> dict[int, str]:
    """pid -> state of every process of group ``pgid`` that has not exited (zombies count as exited)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            out[int(d.name)] = state
    return out


def test_workers_exit_when_the_driver_is_killed(tmp_path):
    runs = tmp_path / "runs"
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PRIVBENCH_PROGRESS="0", PYTHONPATH=str(ROOT))
    driver = subprocess.Popen([sys.executable, "-m", "privbench", "bench", "--suite", "test", "--jobs", "2",
                               "--runs-dir", str(runs), "--device", "cpu"], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    pgid = driver.pid
    try:
        deadline = time.time() + 300
        # a worker is busy once a training has created its run directory (the driver creates only bench-test/)
        while time.time() < deadline and not [p for p in runs.glob("*-digits-*") if p.is_dir()]:
            assert driver.poll() is None, "the bench ended before a worker started"
            time.sleep(0.2)
        workers = set(_group(pgid)) - {driver.pid}
        assert workers, "no worker process seen"
        bench_json = runs / "bench-test" / "bench.json"
        before = bench_json.read_bytes() if bench_json.is_file() else None
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        time.sleep(5)
        alive = _group(pgid)
        assert not alive, f"still running 5 s after the driver was killed: {alive} (workers were {sorted(workers)})"
        after = bench_json.read_bytes() if bench_json.is_file() else None
        assert after == before  # nothing finished after the driver died was recorded
    finally:
        try:
            os.killpg(pgid, signal.SIGKILL)  # this test's own process group, whatever is left of it
        except ProcessLookupError:
            pass


def _run(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)


def test_a_worker_whose_driver_is_already_gone_exits_at_once():
    from privbench.bench.worker_lifetime import ORPHANED_EXIT

    t0 = time.time()
    r = _run("import os, time\nfrom privbench.bench.worker_lifetime import die_with_parent\n"
             "die_with_parent(os.getppid() + 1)\ntime.sleep(30)\n")
    assert r.returncode == ORPHANED_EXIT and time.time() - t0 < 20, r


def test_the_watchdog_alone_ends_an_orphan():
    """Without the kernel's signal (prctl given an option that does nothing), the parent-pid watch ends it."""
    child = ("import os, time\nimport privbench.bench.worker_lifetime as w\nw.PR_SET_PDEATHSIG = 0\n"
             "w.die_with_parent(os.getppid())\ntime.sleep(60)\n")
    middle = (f"import os, subprocess, sys, time\np = subprocess.Popen([sys.executable, '-c', {child!r}])\n"
              f"print(p.pid, flush=True)\ntime.sleep(1.5)\nos._exit(0)\n")
    r = _run(middle)
    orphan = int(r.stdout.split()[0])
    try:
        deadline = time.time() + 5
        while time.time() < deadline and _alive(orphan):
            time.sleep(0.1)
        assert not _alive(orphan), "the orphan still runs 5 s after its parent exited"
    finally:
        if _alive(orphan):
            os.kill(orphan, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
