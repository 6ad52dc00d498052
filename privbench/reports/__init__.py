"""Reports: CSV tables and one self-contained HTML page for a run or a bench (``privbench report``), the
empirical-ε audit (``privbench audit``) and the CI gate (``privbench check``).

``render_report(directory, out, formats)`` works for a single run directory (every attack result in it), a bench
directory (the cells listed in its ``bench.json``) or any folder of runs. It writes into ``out``:

* ``side_by_side.csv`` — one row per target: each membership attack's AUC/ASR/TPR@1%/TPR@0.1% with bootstrap CIs,
  memorization, reconstruction re-identification, FID (overall/majority/minority/average + extractor), formal ε
  with its basis, the empirical ε lower bound; private methods first, then the non-private baselines;
* ``results.csv`` (one row per result), ``audit.csv`` (every membership result's ε bounds), ``accountant.csv``,
  ``fid.csv`` (when FIDs were computed), ``provenance.csv``;
* ``index.html`` — everything above plus log-log ROC curves per target (every attack overlaid), sample and
  memorization grids, the accountant summary and provenance (privbench version, git commit, config hashes, seeds,
  FID extractor). Images are embedded as base64 PNG; no script, no external URL.
"""
from __future__ import annotations

from pathlib import Path

from ..core.errors import BadInput

FORMATS = ("html", "csv")


def render_report(directory: str | Path, out: str | Path, formats: list[str] | None = None) -> list[Path]:
    """Render ``directory`` (run, bench or folder of runs) into ``out``; returns the files written."""
    from ..core.io import atomic_path
    from .collect import load_results, read_bench
    from .tables import Tables

    formats = list(formats or FORMATS)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise BadInput(f"--format {','.join(formats)}: choose from {', '.join(FORMATS)} (comma-separated)")
    d = Path(directory)
    if not d.is_dir():
        raise BadInput(f"{directory}: no such directory (give a run directory or a bench directory)")
    bench = read_bench(d) if (d / "bench.json").is_file() else None
    results = load_results([d])
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"--out {out}: cannot create ({e.strerror})") from None
    tables = Tables.build(results, bench)
    written: list[Path] = []
    if "csv" in formats:
        frames = {"side_by_side": tables.side_by_side_frame(), "results": tables.results_frame(),
                  "audit": tables.audit_frame(), "accountant": tables.accountant_frame(),
                  "fid": tables.fid_frame(), "provenance": tables.provenance_frame()}
        for name, df in frames.items():
            if name == "fid" and not len(df):
                continue
            p = out / f"{name}.csv"
            with atomic_path(p) as tmp:
                df.to_csv(tmp, index=False, float_format="%.6g")
            written.append(p)
    if "html" in formats:
        from .html import render_html

        title = (f"privbench report — suite {bench['suite']}" if bench and bench.get("suite")
                 else f"privbench report — {d.resolve().name}")
        written.append(render_html(tables, out / "index.html", title=title, source=str(directory), bench=bench))
    return written
