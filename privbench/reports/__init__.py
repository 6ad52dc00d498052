"""Reports: CSV, LaTeX and Markdown tables, ROC figures and one self-contained HTML page for a run or a bench
(``privbench report``), the empirical-ε audit (``privbench audit``) and the CI gate (``privbench check``).

The files each format writes: docs/benchmarks.md, "Reports".
"""
from __future__ import annotations

from pathlib import Path

from ..core.errors import BadInput
from ..core.io import atomic_path

FORMATS = ("html", "csv", "latex", "markdown")


def report_title(d: Path, bench: dict | None, targets: list[dict]) -> str:
    """What the report is about: the suite; the outside models with their attacks; else the runs' folder."""
    if bench and bench.get("suite"):
        return f"privbench report — suite {bench['suite']}"
    if targets and all(b.get("model") for b in targets):
        models = list(dict.fromkeys(b["model"] for b in targets))
        attacks = list(dict.fromkeys(a["attack"] for b in targets for a in b["attacks"]))
        names = ", ".join(models[:3]) + (f" and {len(models) - 3} more" if len(models) > 3 else "")
        return (f"privbench report — outside model{'s' if len(models) > 1 else ''} {names}"
                + (f" ({', '.join(attacks)})" if attacks else ""))
    return f"privbench report — {d.resolve().name}"


def output_folder(out) -> Path:
    """``out`` created if needed; BadInput when it cannot be (a file of that name, no permission)."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"--out {out}: cannot create ({e.strerror})") from None
    return out


def render_report(directory: str | Path, out: str | Path, formats: list[str] | None = None,
                  results_from: list | None = None, *, latex_style: str = "single",
                  attacks: list[str] | None = None, targets: list[str] | None = None) -> list[Path]:
    """Render ``directory`` (run, bench or folder of runs) into ``out``; returns the files written.

    ``results_from``: the result.json files or run directories to read instead of ``directory``'s (an outside
    model's ``run --attack a,b,c``, whose runs live in separate folders); ``attacks`` / ``targets``: only these,
    by name (reports.layout)."""
    # lazy: pandas only when a report is rendered; this __init__ runs for every reports module
    from .collect import load_results, read_bench
    from .layout import select_results
    from .tables import Tables

    formats = _check_options(formats, latex_style)
    d = Path(directory)
    if not d.is_dir():
        raise BadInput(f"{directory}: no such directory (give a run directory or a bench directory)")
    bench = read_bench(d) if (d / "bench.json").is_file() else None
    results = select_results(load_results(list(results_from) if results_from else [d]), attacks, targets)
    out = output_folder(out)
    # lazy: imports pandas (see render_report)
    from .present import paper_tables, test_preset_banner

    tables = Tables.build(results, bench, base=d)
    targets = tables.targets()
    title = report_title(d, bench, targets)
    banner = test_preset_banner(tables)
    written: list[Path] = _write_csvs(tables, targets, out) if "csv" in formats else []
    from .privacy_utility import write_privacy_utility  # an ε-axis bench: the privacy-utility figure and table

    pu_files, pu_section = write_privacy_utility(tables.results_frame(), bench, out, formats, latex_style)
    written += pu_files
    from .paper_claims import write_paper_claims  # a suite's claims

    pc_files, pc_section = write_paper_claims(bench, out, formats, latex_style, base=d)
    written += pc_files
    figures = None
    if {"html", "latex", "markdown"} & set(formats):
        from .figures import write_roc_figures  # lazy: matplotlib

        figures = write_roc_figures(targets, out)
        written += [f for group in figures.values() for fig in group for f in fig["files"]]
    if "latex" in formats:
        # lazy: imports pandas (see render_report)
        from .latex import write_latex

        written += write_latex(paper_tables(tables, targets, by_family=latex_style == "twocolumn"), out,
                               title=title, banner=banner, style=latex_style)
    if "markdown" in formats:
        # lazy: imports pandas (see render_report)
        from .layout import drop_empty_columns
        from .markdown import write_markdown

        paper = [drop_empty_columns(t) for t in paper_tables(tables, targets)]
        figs = [(f["title"], f["png"]) for group in ("by_attack", "per_attack", "per_target")
                for f in figures[group]]
        written.append(write_markdown(paper, out / "tables.md", title=title, banner=banner, figures=figs))
    if "html" in formats:
        # lazy: imports pandas (see render_report)
        from .html import render_html

        written.append(render_html(tables, out / "index.html", title=title, source=d.resolve().name, bench=bench,
                                   targets=targets, figures=figures, banner=banner,
                                   files=[p.relative_to(out).as_posix() for p in written],
                                   lead_sections=[(i, name, body) for i, name, body in (
                                       ("paper-claims", "Paper claims: reproduced or not", pc_section),
                                       ("privacy-utility", "What privacy costs: utility and leakage against ε",
                                        pu_section)) if body]))
    return written


def _check_options(formats: list[str] | None, latex_style: str) -> list[str]:
    from .latex import LATEX_STYLES  # lazy: pandas

    formats = list(formats or FORMATS)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise BadInput(f"--format {','.join(formats)}: choose from {', '.join(FORMATS)} (comma-separated)")
    if latex_style not in LATEX_STYLES:
        raise BadInput(f"--latex-style {latex_style}: choose from {', '.join(LATEX_STYLES)}")
    return formats


def _write_csvs(tables, targets, out: Path) -> list[Path]:
    """side_by_side, results, audit, accountant, provenance (+ fid, seeds and split_check when they have rows)."""
    from .present import seeds_frame, several_seeds  # lazy: pandas

    frames = {"side_by_side": tables.side_by_side_frame(), "results": tables.results_frame(),
              "audit": tables.audit_frame(), "accountant": tables.accountant_frame(),
              "fid": tables.fid_frame(), "provenance": tables.provenance_frame()}
    if several_seeds(targets):
        frames["seeds"] = seeds_frame(targets)
    split_checks = tables.split_check_frame()
    if len(split_checks):  # external targets only
        frames["split_check"] = split_checks
    written = []
    for name, df in frames.items():
        if name == "fid" and not len(df):
            continue
        p = out / f"{name}.csv"
        with atomic_path(p) as tmp:
            df.to_csv(tmp, index=False, float_format="%.6g")
        written.append(p)
    return written
