"""Several reference attacks on one target in one process: ``--attack lira,rmia,qmia`` against each alone.

lira, rmia and qmia calibrate the same per-record statistic (``attack.statistic``, by default the fixed-noise
loss), which privbench computes once per process for each model and record set (privbench/attacks/statistics.py).
This script trains a target and its reference models once (the test preset: seconds), then times, from a cold
start each time (no attack result on disk, no statistic in memory), each attack alone and the three together in
one process, as ``privbench attack --attack lira,rmia,qmia`` runs them, and prints, for each reference-model count of ``--n-reference`` (2, the test preset's, and 8, the attacks' default),

    ratio combined / slowest alone = R   (goal <= 1.3; without sharing it is about the sum of the three)

Timings are the process's CPU seconds (``time.process_time``: on one thread, the default, a loaded machine does not
stretch them as it stretches wall time), medians over ``--repeats``.

    python benchmarks/multi_attack.py [--preset test] [--repeats 3] [--threads 1] [--n-reference 2 8]
                                      [--runs-dir DIR] [--set K=V]

On the test preset an attack's own fixed costs (its ROC figure, bootstrap CIs, loading its models, writing its
result) are of the size of the statistic it computes at 2 reference models, and they are paid once per attack; the
line "computing statistics" shows the shared part apart.
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

from privbench.attacks import statistics as stats  # noqa: E402
from privbench.core.config import build_config  # noqa: E402
from privbench.core.threads import configure_threads  # noqa: E402
from privbench.runs.attack import run_attack, run_attacks  # noqa: E402
from privbench.runs.store import run_dir_for  # noqa: E402

ATTACKS = ("lira", "rmia", "qmia")
#: CPU seconds spent computing statistic values (the work the attacks share), per timed run
SPENT = [0.0]


def _timed(fn):
    def wrapper(*args, **kw):
        t0 = time.process_time()
        try:
            return fn(*args, **kw)
        finally:
            SPENT[0] += time.process_time() - t0
    return wrapper


def cold_run(cfg, attacks, runs: Path) -> tuple[float, float]:
    """(CPU seconds to run ``attacks`` one after the other in this process, of which computing statistics), with
    no attack result on disk and no statistic in memory (the target and its references stay trained)."""
    shutil.rmtree(run_dir_for(cfg, runs) / "attacks", ignore_errors=True)
    stats.clear_values()
    SPENT[0] = 0.0
    t0 = time.process_time()
    if len(attacks) == 1:  # not strict: qmia has no attack.n_reference
        run_attack(cfg, attacks[0], runs_dir=runs, device="cpu", strict=False)
    else:
        run_attacks(cfg, list(attacks), runs_dir=runs, device="cpu")  # what privbench attack --attack a,b,c runs
    return time.process_time() - t0, SPENT[0]


def _median(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def measure(cfg, repeats: int, runs_dir: str | None) -> None:
    """Train ``cfg``'s target and references (once), then time each attack alone and the three together; print."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(runs_dir or tmp)
        t0 = time.perf_counter()
        cold_run(cfg, ATTACKS, runs)  # trains the target and the references once; warms every code path
        print(f"\nn_reference={cfg.attack.n_reference} records={cfg.data.n_members}+{cfg.data.n_nonmembers} "
              f"statistic={cfg.attack.statistic} (training and warm-up {time.perf_counter() - t0:.1f} s)")
        alone = {name: _median([cold_run(cfg, [name], runs) for _ in range(repeats)]) for name in ATTACKS}
        combined = _median([cold_run(cfg, ATTACKS, runs) for _ in range(repeats)])
    for name, (s, stat) in alone.items():
        print(f"{name} alone: {s:.2f} CPU s ({stat:.2f} computing statistics)")
    print(f"{','.join(ATTACKS)} in one process: {combined[0]:.2f} CPU s ({combined[1]:.2f} computing statistics); "
          f"the three alone: {sum(s for s, _ in alone.values()):.2f} CPU s "
          f"({sum(st for _, st in alone.values()):.2f} computing statistics)")
    print(f"ratio combined / slowest alone = {combined[0] / max(s for s, _ in alone.values()):.2f} (goal <= 1.3) "
          f"at n_reference={cfg.attack.n_reference}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="test")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-reference", type=int, nargs="+", default=[2, 8],
                    help="reference-model counts to measure at (2: the test preset's; 8: the attacks' default)")
    ap.add_argument("--runs-dir", default=None, help="run store (default: a temporary folder)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every measurement, e.g. data.n_members=128")
    a = ap.parse_args()
    configure_threads(a.threads)
    stats.fixed_noise_losses, stats.attack_distance = _timed(stats.fixed_noise_losses), _timed(stats.attack_distance)
    print(f"preset={a.preset} threads={a.threads} repeats={a.repeats}")
    for k in a.n_reference:
        overrides = [tuple(kv.split("=", 1)) for kv in a.sets] + [("attack.n_reference", k)]
        measure(build_config("centralized", preset=a.preset, overrides=overrides), a.repeats, a.runs_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
