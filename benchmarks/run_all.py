"""What ``make bench`` runs: the tiny suites → the committed reports ``reports/tiny/`` and
``reports/tiny-references/``, the text-to-image suite (benchmarks/text_to_image.py → ``reports/text-to-image/``),
the tiny-references target as an outside model (benchmarks/outside_references.py →
``reports/tiny-references-outside/``), then the perf scripts.

1. ``privbench bench --suite S`` for S in tiny, tiny-references (cached and resumable: training and attacks reuse
   the run store, so a rerun with the cache takes seconds) into ``runs/bench-S``;
2. ``privbench report runs/bench-S --out reports/S`` (index.html, CSV, LaTeX and Markdown tables, ROC figures
   as PNG/SVG/PDF);
3. every perf script ``benchmarks/*.py`` that prints a ratio (train/attack throughput, DP-SGD step cost), run with
   the same preset; their output is printed and their ratio lines are summarised at the end.

    python benchmarks/run_all.py                                  # make bench: regenerates reports/tiny/
    python benchmarks/run_all.py --preset test --out /tmp/x       # a seconds-long smoke run of the same pipeline
    python benchmarks/run_all.py --skip-perf                      # only the suites and their reports
    python benchmarks/run_all.py --suite tiny-references --skip-perf   # one suite

With ``--preset`` other than the suite's own, ``--out`` defaults to ``runs/report-<suite>-<preset>`` so the
committed report is never overwritten by a smoke run.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def perf_scripts() -> list[Path]:
    """benchmarks/*.py that report a ratio (not this file, not experiments such as fid_clients.py)."""
    out = []
    for p in sorted((ROOT / "benchmarks").glob("*.py")):
        if p.name == Path(__file__).name:
            continue
        if re.search(r"\bratio\b", p.read_text(errors="replace"), re.I):
            out.append(p)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", action="append", default=None,
                    help="a suite (repeatable; default: tiny, then tiny-references)")
    ap.add_argument("--preset", default=None, help="override the suite's preset (e.g. test for a smoke run)")
    ap.add_argument("--out", default=None, help="report folder (default reports/<suite>; one suite only)")
    ap.add_argument("--bench-dir", default=None, help="bench folder (default <runs-dir>/bench-<suite>[-<preset>]; "
                                                      "one suite only)")
    ap.add_argument("--runs-dir", default=None, help="run store (default ./runs or $PRIVBENCH_HOME)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--skip-perf", action="store_true", help="do not run the perf scripts")
    ap.add_argument("--perf-timeout", type=int, default=1800, help="seconds per perf script")
    a = ap.parse_args()
    os.chdir(ROOT)

    from privbench.bench.runner import run_suite
    from privbench.bench.suite import load_suite
    from privbench.core.errors import BadInput, WorkFailed
    from privbench.reports import render_report
    from privbench.reports.text import format_bench, write_bench_tables
    from privbench.runs.store import default_runs_dir

    suites = a.suite or ["tiny", "tiny-references"]
    if len(suites) > 1 and (a.out or a.bench_dir):
        print("privbench: error: --out/--bench-dir name one suite's folders; give one --suite", file=sys.stderr)
        return 2
    runs = Path(a.runs_dir) if a.runs_dir else default_runs_dir()
    t0 = time.time()
    failed = 0
    specs = []
    for suite in suites:
        try:
            specs.append((suite, load_suite(suite)[0]))
        except BadInput as e:
            print(f"privbench: error: {e}", file=sys.stderr)
            return 2
    for suite, spec in specs:
        own = a.preset in (None, spec.get("preset"))
        tag = suite if own else f"{suite}-{a.preset}"
        bench_dir = Path(a.bench_dir) if a.bench_dir else runs / f"bench-{tag}"
        out = Path(a.out) if a.out else (Path("reports") / suite if own else runs / f"report-{tag}")
        t1 = time.time()
        try:
            res = write_bench_tables(run_suite(suite, out=str(bench_dir), device=a.device, runs_dir=str(runs),
                                               preset=a.preset, sets=a.sets))
        except BadInput as e:
            print(f"privbench: error: {e}", file=sys.stderr)
            return 2
        except WorkFailed as e:
            print(f"privbench: failed: {e}", file=sys.stderr)
            return 3
        bench_s = time.time() - t1
        print(format_bench(res))
        failed += res["counts"].get("failed", 0)
        t2 = time.time()
        # every format: HTML, CSV, LaTeX (table* floats that fit a two-column paper), Markdown, ROC as PNG/SVG/PDF
        paths = render_report(bench_dir, out, latex_style="twocolumn")
        report_s = time.time() - t2
        print(f"\nreport: {', '.join(str(p) for p in paths)}")
        print(f"bench {suite}: {bench_s:.0f} s (this invocation; cached cells are skipped), report {report_s:.0f} s")
    spec = specs[0][1]
    if a.suite is None:  # make bench: the text-to-image suite too (its outside pipelines are built by a script)
        cmd = [sys.executable, str(ROOT / "benchmarks" / "text_to_image.py"), "--runs-dir", str(runs)]
        if a.preset:
            cmd += ["--preset", a.preset]
        print(f"\n=== text_to_image.py: {' '.join(cmd[2:])}", flush=True)
        r = subprocess.run(cmd)
        failed += r.returncode != 0
        if not a.preset:  # the tiny-references target as an outside model (its export is made by the script)
            cmd = [sys.executable, str(ROOT / "benchmarks" / "outside_references.py"), "--runs-dir", str(runs)]
            print(f"\n=== outside_references.py: {' '.join(cmd[2:])}", flush=True)
            failed += subprocess.run(cmd).returncode != 0

    ratios: list[str] = []
    if not a.skip_perf:
        for script in perf_scripts():
            cmd = [sys.executable, str(script), "--preset", a.preset or str(spec.get("preset", "tiny"))]
            print(f"\n=== {script.name}: {' '.join(cmd[1:])}", flush=True)
            env = dict(os.environ, PRIVBENCH_PROGRESS="0")
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.perf_timeout, env=env)
            except subprocess.TimeoutExpired:
                print(f"  timed out after {a.perf_timeout} s")
                ratios.append(f"{script.name}: timed out")
                continue
            print(r.stdout.rstrip())
            if r.returncode != 0:
                print(r.stderr.rstrip()[-2000:], file=sys.stderr)
                ratios.append(f"{script.name}: exit {r.returncode}")
                continue
            ratios += [f"{script.name}: {line.strip()}" for line in r.stdout.splitlines()
                       if re.search(r"ratio|×|\bx\d", line, re.I)]
        print("\n=== ratios")
        for line in ratios:
            print(f"  {line}")
    print(f"\ntotal {time.time() - t0:.0f} s")
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
