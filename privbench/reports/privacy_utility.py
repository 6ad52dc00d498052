"""What privacy costs: utility and leakage against ε, per method, beside the non-private baselines: an ε-axis
bench's ``privacy_utility.csv``, ``tex/privacy_utility.tex`` and figures (docs/benchmarks.md, "Reports").
"""
from __future__ import annotations

import html as _html
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..bench.cell_schema import cells_of
from ..core.errors import BadInput
from ..core.io import atomic_path, atomic_write_text
from ..core.jsonio import MAX_RECORD_BYTES, read_json
from ..privacy.claims import CONDITIONAL, FORMAL, KIND_LABEL
from .cells import ci as interval
from .cells import num
from .html import figure_data_uri
from .latex import escape
from .present import Footnotes
from .privacy_utility_figure import INTERVAL_TEXT, PANELS, caption, write_figures

#: the range a panel's value can take: a normal band over seeds is clipped to it (a TPR band never reads -0.00)
RANGES = {"fid": (0.0, math.inf), "downstream_accuracy": (0.0, 1.0), "best_auc": (0.0, 1.0),
          "best_tpr_1pct": (0.0, 1.0), "eps_lower_bound": (0.0, math.inf)}
#: each panel's column and the prefix of its own run's CI columns (None: a run has no CI of it)
CI_OF = {"fid": None, "downstream_accuracy": "downstream_ci", "best_auc": "best_auc_ci",
         "best_tpr_1pct": "best_tpr_1pct_ci", "eps_lower_bound": None}
COLUMNS = [col for col, _ in PANELS]
#: the LaTeX table's label (``tab:privbench-<key>``, as every table of the report)
LABEL = "tab:privbench-privacy_utility"


def _read(path) -> dict | None:
    try:
        return read_json(Path(path), "", MAX_RECORD_BYTES)
    except (BadInput, TypeError):
        return None


def _runs(bench: dict) -> dict[str, dict]:
    """run_dir → {method, variant, epsilon, seed, role, fid, utility} from the bench's cells."""
    runs: dict[str, dict] = {}
    for c in cells_of(bench):
        if c.kind not in ("attack", "fid", "utility") or not c.run_dir:
            continue
        r = runs.setdefault(c.run_dir, {"method": c.variant or c.method, "registered": c.method,
                                        "epsilon": c.epsilon, "seed": c.seed, "role": c.role})
        if c.kind == "fid" and c.status == "done":
            r["fid"] = (c.summary or {}).get("overall")
        if c.kind == "utility" and c.status == "done":
            r["utility"] = _read(c.result_path)
    return runs


def _axis_epsilon(axis: float | None, formal: float | None) -> float:
    """Where a run stands on the ε axis: its cell's ε; a run outside the axis stands at its formal ε when that is 0
    (``public-only``: never read a member), else at ∞ (a non-private baseline)."""
    if axis is not None:
        return float(axis)
    return 0.0 if formal == 0 else math.inf  # None and NaN (no formal ε) compare unequal


def _eps_text(eps: float, infinity: str) -> str:
    return infinity if not np.isfinite(eps) else f"{eps:g}"


def _first(frame: pd.DataFrame, col: str):
    vals = frame[col].dropna() if col in frame else ()
    return vals.iloc[0] if len(vals) else None


def _claim(mem: pd.DataFrame, formal) -> tuple[str | None, str | None]:
    """(kind, basis) of a run's ε claim as its rows of results.csv state it."""
    if formal is not None and pd.notna(formal):
        kind = FORMAL
    elif _first(mem, "claim_kind") is not None:
        kind = str(_first(mem, "claim_kind"))
    elif _first(mem, "conditional_epsilon") is not None:
        kind = CONDITIONAL
    else:
        kind = None
    basis = _first(mem, "epsilon_basis")
    return kind, None if basis is None else str(basis)


def privacy_utility_frame(results: pd.DataFrame, bench: dict | None) -> pd.DataFrame | None:
    """One row per run of an ε-axis bench; None when the bench has no ε axis."""
    if not bench or not any(c.epsilon is not None for c in cells_of(bench)):
        return None
    rows = []
    for run_dir, r in _runs(bench).items():
        # results.csv holds relative run directories; a run directory's name is unique in a store
        same = results["run_dir"].map(lambda p: Path(str(p)).name) == Path(str(run_dir)).name if len(results) else None
        mem = results[same & (results["kind"] == "membership")] if len(results) else results
        u = r.get("utility") or {}
        d = u.get("downstream") or {}
        formal = mem["formal_epsilon"].max() if len(mem) else None
        kind, basis = _claim(mem, formal)
        row = {"method": r["method"], "registered_method": r["registered"], "role": r["role"],
               "epsilon": _axis_epsilon(r["epsilon"], formal), "seed": r["seed"],
               "formal_epsilon": formal, "epsilon_kind": kind, "epsilon_basis": basis, "fid": r.get("fid"),
               "downstream_accuracy": d.get("accuracy"), "downstream_ci_lo": (d.get("ci") or [None])[0],
               "downstream_ci_hi": (d.get("ci") or [None, None])[1], "downstream_chance": d.get("chance"),
               "class_fidelity": (u.get("class_fidelity") or {}).get("class_fidelity"),
               "precision": (u.get("precision_recall") or {}).get("precision"),
               "recall": (u.get("precision_recall") or {}).get("recall")}
        if len(mem):
            best = mem.loc[mem["auc"].idxmax()]
            row.update({"best_attack": best["attack"], "best_auc": best["auc"], "best_auc_ci_lo": best["auc_ci_lo"],
                        "best_auc_ci_hi": best["auc_ci_hi"], "best_tpr_1pct": best["tpr_1pct"],
                        "best_tpr_1pct_ci_lo": best["tpr_1pct_ci_lo"], "best_tpr_1pct_ci_hi": best["tpr_1pct_ci_hi"],
                        "eps_lower_bound": float(np.nanmax(mem["eps_lb"].to_numpy(dtype=float)))
                        if "eps_lb" in mem and mem["eps_lb"].notna().any() else None})
        rows.append(row)
    df = pd.DataFrame(rows)
    return df.sort_values(["role", "method", "epsilon", "seed"], ascending=[False, True, True, True],
                          kind="stable").reset_index(drop=True) if len(df) else df


def _band(g: pd.DataFrame, col: str, ci: str | None) -> tuple[float, float, float]:
    """(mean, lo, hi): the t-interval over seeds, clipped to the panel's range, where there are several (with few
    seeds the normal 1.96 is far too narrow), else the run's own CI."""
    if col not in g:  # no run of the group has this panel (e.g. no membership attack)
        return (math.nan,) * 3
    v = pd.to_numeric(g[col], errors="coerce").dropna()
    if not len(v):
        return (math.nan,) * 3
    m = float(v.mean())
    if len(v) > 1:
        from scipy.stats import t as student_t  # lazy: scipy only when a band spans several seeds

        h = float(student_t.ppf(0.975, len(v) - 1)) * float(v.std(ddof=1)) / math.sqrt(len(v))
        lo, hi = RANGES.get(col, (-math.inf, math.inf))
        return m, max(m - h, lo), min(m + h, hi)
    run = g.loc[v.index[0]]  # the one run with a value: its own CI, not another seed's
    if ci and f"{ci}_lo" in g and pd.notna(run[f"{ci}_lo"]):
        return m, float(run[f"{ci}_lo"]), float(run[f"{ci}_hi"])
    return m, m, m


def _interval_kind(g: pd.DataFrame, col: str, lo: float, hi: float) -> str:
    """What a band is: "seeds" (over several seeds' values), "bootstrap" (one run's own CI), "" (none)."""
    n = int(pd.to_numeric(g[col], errors="coerce").notna().sum()) if col in g else 0
    if n > 1:
        return "seeds"
    return "bootstrap" if n == 1 and np.isfinite(lo) and lo != hi else ""


def summary_frame(df: pd.DataFrame) -> pd.DataFrame:
    """One row per method × ε: every panel's mean, band and the band's kind (``<col>_interval``), the number of
    seeds, the chance accuracy and the ε claim's kind and basis."""
    rows = []
    for (method, eps), g in df.groupby(["method", "epsilon"], sort=False):
        row = {"method": method, "epsilon": eps, "n_seeds": int(g["seed"].nunique()),
               "downstream_chance": _first(g, "downstream_chance"), "epsilon_kind": _first(g, "epsilon_kind"),
               "epsilon_basis": _first(g, "epsilon_basis")}
        for col in COLUMNS:
            row[col], row[f"{col}_lo"], row[f"{col}_hi"] = _band(g, col, CI_OF[col])
            row[f"{col}_interval"] = _interval_kind(g, col, row[f"{col}_lo"], row[f"{col}_hi"])
        rows.append(row)
    return pd.DataFrame(rows)


def _fmt(m, lo, hi, nd=3) -> str:
    """The one cell rule (reports/cells.py): "–" when missing, the mean and, over seeds, its [lo, hi]."""
    if m is None or not np.isfinite(m):
        return num(m, nd)
    # the interval one decimal shorter than the value, as in the membership tables ("0.517 [0.47, 0.57]")
    return num(m, nd) if lo == hi or not np.isfinite(lo) else f"{num(m, nd)} {interval((lo, hi), max(nd - 1, 1))}"


def _fmt_fid(m, lo, hi) -> str:
    """An FID cell: one decimal below 100, none above (to fit a two-column page), its interval likewise."""
    if m is None or not np.isfinite(m) or abs(m) < 100:
        return _fmt(m, lo, hi, 1)
    return num(m, 0) if lo == hi or not np.isfinite(lo) else f"{num(m, 0)} [{num(lo, 0)}, {num(hi, 0)}]"


def _cell(r, c: str) -> str:
    return _fmt_fid(r[c], r[f"{c}_lo"], r[f"{c}_hi"]) if c == "fid" else _fmt(r[c], r[f"{c}_lo"], r[f"{c}_hi"])


#: the LaTeX caption: what a cell and the ε column are (the footnotes give each kind of row's ε basis)
TABLE_CAPTION = ("What privacy costs: utility and leakage against ε. Each cell: the mean over the row's seeds and its "
                 f"95 % interval — where the row has several seeds, the {INTERVAL_TEXT['seeds'].replace('95 % ', '')}; "
                 f"else the {INTERVAL_TEXT['bootstrap'].replace('95 % ', '')} (FID and the ε lower bound of one run "
                 "have none). ε: the value on the suite's axis each run was calibrated to (privacy_utility.csv "
                 "has each run's accounted formal_epsilon); its basis for each kind of row is a footnote.")


def basis_note(row) -> str:
    """The ε basis of one kind of row, as its results state it: the formal accounting's mechanism and relation
    (the basis up to its first ";"), ε = 0 by construction, or no guarantee at all (ε = ∞)."""
    kind, basis, eps = row.get("epsilon_kind"), row.get("epsilon_basis"), float(row["epsilon"])
    kind = kind if isinstance(kind, str) and kind else None
    lead = str(basis).split(";")[0].strip() if isinstance(basis, str) and basis else "the results state no basis"
    if kind is None:
        return ("ε = ∞: a non-private baseline, no privacy guarantee" if not np.isfinite(eps)
                else "no ε claim in the results")
    label = KIND_LABEL.get(kind, kind)
    return f"ε = 0, {label}: {lead}" if eps == 0 and kind == FORMAL else f"{label}: {lead}"


def _marks(summary: pd.DataFrame) -> tuple[list[str], Footnotes]:
    notes = Footnotes()
    return [notes.mark(basis_note(r)) for _, r in summary.iterrows()], notes


def latex_float(summary: pd.DataFrame, style: str = "single") -> str:
    """The table as ``report --latex-style`` sets tables (``twocolumn``: a ``table*`` in ``\\footnotesize``), with
    the style marker the layout test reads and the ε basis of each kind of row as a footnote."""
    star, size = ("table*", "\\footnotesize\n\\setlength{\\tabcolsep}{2.5pt}\n") if style == "twocolumn" else ("table", "")
    marks, notes = _marks(summary)
    foot = ["\\par\\smallskip", "\\noindent\\parbox{\\linewidth}{\\footnotesize"]
    foot += [f"\\textsuperscript{{{m}}}{escape(text)}\\par" for m, text in notes.items()] + ["}"]
    return (f"% privbench latex-style: {style}\n\\begin{{{star}}}[t]\n\\centering\n{size}"
            f"\\caption{{{escape(TABLE_CAPTION)}}}\n\\label{{{LABEL}}}\n"
            f"{latex_table(summary, marks)}" + "\n".join(foot) + f"\n\\end{{{star}}}\n")


def latex_table(summary: pd.DataFrame, marks: list[str] | None = None) -> str:
    head = ["method", "$\\varepsilon$", "seeds", "FID", "downstream acc.", "best AUC", "best TPR@1\\%FPR",
            "$\\hat\\varepsilon$ lower bound"]
    lines = ["\\begin{tabular}{ll r" + " l" * len(PANELS) + "}", "\\toprule", " & ".join(head) + " \\\\", "\\midrule"]
    for i, (_, r) in enumerate(summary.iterrows()):
        eps = _eps_text(r["epsilon"], "$\\infty$") + (f"\\textsuperscript{{{marks[i]}}}" if marks else "")
        cells = [escape(str(r["method"])), eps, str(r["n_seeds"])]
        cells += [_cell(r, c) for c in COLUMNS]
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"


def html_section(summary: pd.DataFrame, figures: list[Path]) -> str:
    """The grid figure with its caption and files, then the table with each row's ε basis as a footnote."""
    grid = [f for f in figures if f.stem == "privacy_utility"]
    panels = sorted({f.stem for f in figures if f.stem != "privacy_utility"})
    marks, notes = _marks(summary)
    head = "".join(f"<th>{_html.escape(h)}</th>" for h in ["method", "ε", "seeds"] + [p[1] for p in PANELS])
    body = ""
    for i, (_, r) in enumerate(summary.iterrows()):
        eps = f'{_html.escape(_eps_text(r["epsilon"], "∞"))}<sup class="fn">{marks[i]}</sup>'
        vals = [_cell(r, c) for c in COLUMNS]
        body += (f"<tr><td>{_html.escape(str(r['method']))}</td><td>{eps}</td>"
                 + "".join(f"<td>{_html.escape(str(v))}</td>" for v in [r["n_seeds"], *vals]) + "</tr>")
    fn = "".join(f'<li><sup class="fn">{m}</sup> {_html.escape(t)}</li>' for m, t in notes.items())
    exts = ",".join(sorted({f.suffix[1:] for f in grid}))
    files = (f"<code>figures/privacy_utility.{{{exts}}}</code> (the grid, for \\textwidth) and each panel alone "
             f"for \\columnwidth: " + ", ".join(f"<code>{_html.escape(n)}</code>" for n in panels))
    return (f'<figure><img alt="privacy-utility figure" src="{figure_data_uri(grid)}" style="max-width:100%">'
            f"<figcaption>{_html.escape(caption(summary))} Files: {files}.</figcaption></figure>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table><ol class=\"fn\">{fn}</ol>")


def write_privacy_utility(results: pd.DataFrame, bench: dict | None, out: Path, formats: list[str],
                          latex_style: str = "single") -> tuple[list[Path], str | None]:
    """Write the CSV / LaTeX / figures of an ε-axis bench; returns (files, HTML section or None)."""
    df = privacy_utility_frame(results, bench)
    if df is None or not len(df):
        return [], None
    written = []
    if "csv" in formats:
        p = out / "privacy_utility.csv"
        with atomic_path(p) as tmp:
            df.to_csv(tmp, index=False, float_format="%.6g")
        written.append(p)
    summary = summary_frame(df)
    if "latex" in formats:
        p = out / "tex" / "privacy_utility.tex"
        p.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(p, latex_float(summary, latex_style))
        written.append(p)
    section = None
    if {"html", "latex", "markdown"} & set(formats):
        figs = write_figures(summary, out)
        written += figs
        section = html_section(summary, figs) if "html" in formats else None
    return written, section
