"""What privacy costs: utility and leakage against ε, per method, beside the non-private baselines (issue 20 §5).

From a bench whose suite has an ``epsilons`` axis (bench/plan.py: each cell carries its ``variant`` and
``epsilon``), one row per run (method entry × ε × seed) with: formal ε; FID (the fid cell's overall FID);
downstream accuracy with its bootstrap CI, class fidelity, precision and recall (the utility cell,
runs/utility.py); the best membership attack by AUC with its AUC and TPR@1%FPR and their bootstrap CIs (a TPR the
non-member count cannot resolve stays empty); the largest empirical ε lower bound of the run's attacks. Written as
``privacy_utility.csv``, ``tex/privacy_utility.tex`` (one row per method × ε, means over seeds) and the figure
``figures/privacy_utility.{png,svg,pdf}`` (one panel per quantity, ε on a log axis, one line per private method
with a CI band — over seeds where there are several, else the single run's bootstrap CI —, every non-private
baseline a horizontal line at ε = ∞).
"""
from __future__ import annotations

import base64
import html as _html
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..bench.cell_schema import cells_of
from ..core.io import atomic_path, atomic_write_text
from .cells import ci as interval
from .cells import num

#: the range a panel's value can take: a normal band over seeds is clipped to it (a TPR band never reads -0.00)
RANGES = {"fid": (0.0, math.inf), "downstream_accuracy": (0.0, 1.0), "best_auc": (0.0, 1.0),
          "best_tpr_1pct": (0.0, 1.0), "eps_lower_bound": (0.0, math.inf)}
PANELS = [("fid", "FID (overall) ↓", None), ("downstream_accuracy", "downstream accuracy ↑", "downstream_ci"),
          ("best_auc", "best attack AUC", "best_auc_ci"), ("best_tpr_1pct", "best attack TPR@1%FPR", "best_tpr_1pct_ci"),
          ("eps_lower_bound", "empirical ε lower bound", None)]


def _read(path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError, TypeError):
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


def _reference(eps) -> bool:
    """A run drawn as a horizontal reference line (ε = ∞ or ε = 0: not a point of a log ε axis)."""
    return not (np.isfinite(eps) and eps > 0)


def _eps_text(eps: float, infinity: str) -> str:
    return infinity if not np.isfinite(eps) else f"{eps:g}"


def privacy_utility_frame(results: pd.DataFrame, bench: dict | None) -> pd.DataFrame | None:
    """One row per run of an ε-axis bench; None when the bench has no ε axis."""
    if not bench or not any(c.epsilon is not None for c in cells_of(bench)):
        return None
    rows = []
    for run_dir, r in _runs(bench).items():
        # results.csv holds run directories relative to the report's source (reports.tables.rel); a run
        # directory's name (method-dataset-<config hash>) is unique in a store
        same = results["run_dir"].map(lambda p: Path(str(p)).name) == Path(str(run_dir)).name if len(results) else None
        mem = results[same & (results["kind"] == "membership")] if len(results) else results
        u = r.get("utility") or {}
        d = u.get("downstream") or {}
        formal = mem["formal_epsilon"].max() if len(mem) else None
        row = {"method": r["method"], "registered_method": r["registered"], "role": r["role"],
               "epsilon": _axis_epsilon(r["epsilon"], formal), "seed": r["seed"],
               "formal_epsilon": formal, "fid": r.get("fid"),
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
                        "eps_lower_bound": np.nanmax(mem[["eps_lb_cp", "eps_lb_one_run"]].to_numpy(dtype=float))
                        if mem[["eps_lb_cp", "eps_lb_one_run"]].notna().any().any() else None})
        rows.append(row)
    df = pd.DataFrame(rows)
    return df.sort_values(["role", "method", "epsilon", "seed"], ascending=[False, True, True, True],
                          kind="stable").reset_index(drop=True) if len(df) else df


def _band(g: pd.DataFrame, col: str, ci: str | None) -> tuple[float, float, float]:
    """(mean, lo, hi): over seeds (mean ± 1.96·sd/√n, clipped to the panel's range) where there are several,
    else the run's own CI."""
    if col not in g:  # no run of the group has this panel (e.g. no membership attack)
        return (math.nan,) * 3
    v = pd.to_numeric(g[col], errors="coerce").dropna()
    if not len(v):
        return (math.nan,) * 3
    m = float(v.mean())
    if len(v) > 1:
        h = 1.96 * float(v.std(ddof=1)) / math.sqrt(len(v))
        lo, hi = RANGES.get(col, (-math.inf, math.inf))
        return m, max(m - h, lo), min(m + h, hi)
    if ci and f"{ci}_lo" in g and pd.notna(g[f"{ci}_lo"].iloc[0]):
        return m, float(g[f"{ci}_lo"].iloc[0]), float(g[f"{ci}_hi"].iloc[0])
    return m, m, m


def summary_frame(df: pd.DataFrame) -> pd.DataFrame:
    """One row per method × ε: every panel's mean and band, the number of seeds."""
    rows = []
    for (method, eps), g in df.groupby(["method", "epsilon"], sort=False):
        row = {"method": method, "epsilon": eps, "n_seeds": int(g["seed"].nunique())}
        for col, _, ci in PANELS:
            row[col], row[f"{col}_lo"], row[f"{col}_hi"] = _band(g, col, ci)
        rows.append(row)
    return pd.DataFrame(rows)


def write_figure(summary: pd.DataFrame, out: Path) -> list[Path]:
    import matplotlib  # lazy: matplotlib only when the figure is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: matplotlib only when the figure is drawn

    ref = summary["epsilon"].map(_reference).astype(bool)
    private, base = summary[~ref], summary[ref]
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.4))
    eps = private["epsilon"].to_numpy(dtype=float)
    xlim = (eps.min() / 1.5, eps.max() * 1.5) if len(eps) else (0.5, 50)
    for ax, (col, label, _) in zip(axes, PANELS):
        ax.set_xscale("log")
        ax.set_xlim(*xlim)  # explicit: a panel without data (no FID computed) is not autoscaled on a log axis
        if not np.isfinite(pd.to_numeric(summary[col], errors="coerce")).any():
            ax.text(0.5, 0.5, "not computed", ha="center", va="center", transform=ax.transAxes)
            ax.set_yticks([])
        for i, (method, g) in enumerate(private.groupby("method", sort=False)):
            g = g.sort_values("epsilon")
            ax.plot(g["epsilon"], g[col], marker="o", label=method, color=f"C{i}")
            ax.fill_between(g["epsilon"], g[f"{col}_lo"], g[f"{col}_hi"], alpha=0.2, color=f"C{i}")
        for j, (_, b) in enumerate(base.iterrows()):
            if np.isfinite(b[col]):
                ax.axhline(b[col], ls="--", color=f"C{len(private['method'].unique()) + j}",
                           label=f"{b['method']} (ε = {_eps_text(b['epsilon'], '∞')})")
        ax.set_xlabel("ε (formal, per method's basis)")
        ax.set_title(label, fontsize=10)
    # one legend with every line (a panel may lack some: no FID, no baseline value), on the first panel with data
    labelled: dict = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            labelled.setdefault(lab, h)
    home = next((ax for ax in axes if ax.get_legend_handles_labels()[0]), axes[0])
    home.legend(list(labelled.values()), list(labelled), fontsize=7)
    fig.tight_layout()
    (out / "figures").mkdir(parents=True, exist_ok=True)
    paths = [out / "figures" / f"privacy_utility.{ext}" for ext in ("png", "svg", "pdf")]
    for p in paths:
        fig.savefig(p, dpi=130)
    plt.close(fig)
    return paths


def _fmt(m, lo, hi, nd=3) -> str:
    """The one cell rule (reports/cells.py): "–" when missing, the mean and, over seeds, its [lo, hi]."""
    if m is None or not np.isfinite(m):
        return num(m, nd)
    # the interval one decimal shorter than the value, as in the membership tables ("0.517 [0.47, 0.57]")
    return num(m, nd) if lo == hi or not np.isfinite(lo) else f"{num(m, nd)} {interval((lo, hi), max(nd - 1, 1))}"


def latex_float(summary: pd.DataFrame, style: str = "single") -> str:
    """The table as ``report --latex-style`` sets tables: ``single`` a ``table`` float, ``twocolumn`` a ``table*``
    (the full text width) in ``\\footnotesize``; with the style marker the layout test reads."""
    star, size = ("table*", "\\footnotesize\n\\setlength{\\tabcolsep}{2.5pt}\n") if style == "twocolumn" else ("table", "")
    return (f"% privbench latex-style: {style}\n\\begin{{{star}}}[t]\n\\centering\n{size}"
            f"\\caption{{What privacy costs: utility and leakage against $\\varepsilon$ (mean [95\\% interval: over seeds where there are several, else the run's own bootstrap CI])}}\n"
            f"{latex_table(summary)}\\end{{{star}}}\n")


def latex_table(summary: pd.DataFrame) -> str:
    head = ["method", "$\\varepsilon$", "seeds", "FID", "downstream acc.", "best AUC", "best TPR@1\\%FPR",
            "$\\hat\\varepsilon$ lower bound"]
    lines = ["\\begin{tabular}{ll r" + " l" * len(PANELS) + "}", "\\toprule", " & ".join(head) + " \\\\", "\\midrule"]
    for _, r in summary.iterrows():
        eps = _eps_text(r["epsilon"], "$\\infty$")
        cells = [str(r["method"]).replace("_", "\\_"), eps, str(r["n_seeds"])]
        cells += [_fmt(r[c], r[f"{c}_lo"], r[f"{c}_hi"], 1 if c == "fid" else 3) for c, _, _ in PANELS]
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"


def html_section(summary: pd.DataFrame, png: Path) -> str:
    img = base64.b64encode(png.read_bytes()).decode()
    head = "".join(f"<th>{_html.escape(h)}</th>" for h in ["method", "ε", "seeds"] + [p[1] for p in PANELS])
    body = ""
    for _, r in summary.iterrows():
        eps = _eps_text(r["epsilon"], "∞")
        vals = [_fmt(r[c], r[f"{c}_lo"], r[f"{c}_hi"], 1 if c == "fid" else 3) for c, _, _ in PANELS]
        body += "<tr>" + "".join(f"<td>{_html.escape(str(v))}</td>" for v in [r["method"], eps, r["n_seeds"], *vals])
        body += "</tr>"
    return (f'<p>Utility and leakage against ε (bands: 95 % over seeds, or the single run\'s bootstrap CI).</p>'
            f'<img alt="privacy-utility figure" src="data:image/png;base64,{img}" style="max-width:100%">'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def write_privacy_utility(results: pd.DataFrame, bench: dict | None, out: Path, formats: list[str],
                          latex_style: str = "single") -> tuple[list[Path], str | None]:
    """Write the CSV / LaTeX / figure of an ε-axis bench; returns (files, HTML section or None)."""
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
        figs = write_figure(summary, out)
        written += figs
        section = html_section(summary, figs[0]) if "html" in formats else None
    return written, section
