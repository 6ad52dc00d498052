"""Several reference attacks on one target in one process: ``--attack lira,rmia,qmia`` against each alone.

lira, rmia and qmia calibrate the same per-record statistic (``attack.statistic``, by default the fixed-noise
loss), which privbench computes once per process for each model and record set (privbench/attacks/statistics.py).
This script trains a target and its reference models once (the test preset: seconds), then times, from a cold
start each time (no attack result on disk, no statistic in memory), each attack alone and the three together in
one process, as ``privbench attack --attack lira,rmia,qmia`` runs them, and prints

    ratio combined / slowest alone = R   (goal <= 1.3; without sharing it is about the sum of the three)

Timings are medians over ``--repeats`` (one thread by default, so a loaded machine disturbs them less).

    python benchmarks/multi_attack.py [--preset test] [--repeats 3] [--threads 1] [--runs-dir DIR]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PRIVBENCH_PROGRESS", "0")

from privbench.attacks.statistics import clear_values  # noqa: E402
from privbench.core.config import build_config  # noqa: E402
from privbench.core.threads import configure_threads  # noqa: E402
from privbench.runs.attack import run_attack  # noqa: E402
from privbench.runs.store import run_dir_for  # noqa: E402

ATTACKS = ("lira", "rmia", "qmia")


def cold_run(cfg, attacks, runs: Path) -> float:
    """Seconds to run ``attacks`` one after the other in this process, with no attack result on disk and no
    statistic in memory (the target and its references stay trained)."""
    shutil.rmtree(run_dir_for(cfg, runs) / "attacks", ignore_errors=True)
    clear_values()
    t0 = time.perf_counter()
    for name in attacks:
        run_attack(cfg, name, runs_dir=runs, device="cpu")
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="test")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs-dir", default=None, help="run store (default: a temporary folder)")
    a = ap.parse_args()
    configure_threads(a.threads)
    cfg = build_config("centralized", preset=a.preset)
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(a.runs_dir or tmp)
        t0 = time.perf_counter()
        cold_run(cfg, ATTACKS, runs)  # trains the target and the references once; warms every code path
        print(f"preset={a.preset} threads={a.threads} n_reference={cfg.attack.n_reference} "
              f"records={cfg.data.n_members}+{cfg.data.n_nonmembers} statistic={cfg.attack.statistic} "
              f"(training and warm-up {time.perf_counter() - t0:.1f} s)")
        alone = {name: statistics.median(cold_run(cfg, [name], runs) for _ in range(a.repeats)) for name in ATTACKS}
        combined = statistics.median(cold_run(cfg, ATTACKS, runs) for _ in range(a.repeats))
    for name, s in alone.items():
        print(f"{name} alone: {s:.2f} s")
    print(f"{','.join(ATTACKS)} in one process: {combined:.2f} s (sum of the three alone: {sum(alone.values()):.2f} s)")
    print(f"ratio combined / slowest alone = {combined / max(alone.values()):.2f} (goal <= 1.3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
