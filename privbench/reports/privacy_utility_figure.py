"""The privacy–utility figure (reports.privacy_utility's summary drawn against ε), sized for a paper: a grid at
\\textwidth and each panel alone at \\columnwidth. Sizes, axes, lines and interval kinds: docs/benchmarks.md,
"Reports"; a band shows one interval kind only, mixed kinds become error bars (:func:`caption` names them).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..metrics.plots import save_figure
from .figures import FIGURE_FORMATS, grid_columns

#: (column, panel title) in the order the panels are drawn
PANELS = [("fid", "FID (overall) ↓"), ("downstream_accuracy", "downstream accuracy ↑"),
          ("best_auc", "best attack AUC"), ("best_tpr_1pct", "best attack TPR@1%FPR"),
          ("eps_lower_bound", "empirical ε lower bound")]
LOG_PANELS = {"fid"}
#: inches: a two-column paper's \columnwidth and \textwidth (10-pt article: 3.34 in, 6.9 in)
COLUMN_WIDTH, TEXT_WIDTH = 3.3, 7.0
#: points: the smallest type in the figure at those widths
FONT = 7
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
_BAND = {"bootstrap": {"alpha": 0.2, "linewidth": 0}, "seeds": {"alpha": 0.15, "hatch": "////", "linewidth": 0}}
INTERVAL_TEXT = {
    "bootstrap": "95 % bootstrap CI of the single run",
    "seeds": "95 % CI of the mean over seeds (Student's t-interval: mean ± t(0.975; n-1) standard errors)",
}
#: a band kind's legend entry (the caption says it in full)
LEGEND_TEXT = {"bootstrap": "95 % bootstrap CI (one run)", "seeds": "95 % CI over seeds"}
X_LABEL = "ε (formal, per method's basis)"
_LEGEND = {"fontsize": FONT, "frameon": False, "handlelength": 1.6, "columnspacing": 0.8, "handletextpad": 0.4}


def is_reference(eps) -> bool:
    """A run drawn as a horizontal reference line (ε = ∞ or ε = 0: not a point of a log ε axis)."""
    return not (np.isfinite(eps) and eps > 0)


def _kind(row, col: str) -> str:
    """The interval kind of one point ("seeds", "bootstrap"), "" when it has none."""
    lo, hi = row.get(f"{col}_lo"), row.get(f"{col}_hi")
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)) or lo == hi:
        return ""
    return str(row.get(f"{col}_interval") or "")


def line_intervals(g: pd.DataFrame, col: str) -> tuple[str, list[str]]:
    """How one method's line shows its intervals: ("band", kinds) when every point with a value has an interval of
    one kind, ("bars", kinds) when they differ, ("", kinds) when none has one; kinds per point."""
    vals = pd.to_numeric(g[col], errors="coerce").to_numpy(dtype=float)
    kinds = [_kind(r, col) for _, r in g.iterrows()]
    present = [k for k, v in zip(kinds, vals) if np.isfinite(v)]
    if not any(present):
        return "", kinds
    return ("band" if len(set(present)) == 1 else "bars"), kinds


def _split(summary: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    ref = summary["epsilon"].map(is_reference).astype(bool)
    return summary[~ref], summary[ref]


def _colours(summary: pd.DataFrame) -> dict[str, int]:
    """Each method's colour and marker index, the same in every panel and file (private methods first)."""
    private, base = _split(summary)
    names = list(dict.fromkeys(list(private["method"]) + list(base["method"])))
    return {m: i for i, m in enumerate(names)}


def _chance(summary: pd.DataFrame) -> dict[float, list[str]]:
    """Chance accuracy → the methods measured against it (one value unless runs test on different classes)."""
    out: dict[float, list[str]] = {}
    if "downstream_chance" not in summary:
        return out
    for _, r in summary.iterrows():
        c = r["downstream_chance"]
        if c is not None and np.isfinite(c) and c > 0 and r["method"] not in out.setdefault(float(c), []):
            out[float(c)].append(r["method"])
    return out


def _draw_intervals(ax, g: pd.DataFrame, col: str, colour: str, floor: float) -> None:
    mode, kinds = line_intervals(g, col)
    x = g["epsilon"].to_numpy(dtype=float)
    m = pd.to_numeric(g[col], errors="coerce").to_numpy(dtype=float)
    lo = np.maximum(g[f"{col}_lo"].to_numpy(dtype=float), floor)
    hi = g[f"{col}_hi"].to_numpy(dtype=float)
    if mode == "band":
        ax.fill_between(x, lo, hi, color=colour, **_BAND[next(k for k in kinds if k)])
    elif mode == "bars":
        for kind, cap in (("seeds", 2.5), ("bootstrap", 0)):
            sel = np.array([k == kind for k in kinds])
            if sel.any():
                ax.errorbar(x[sel], m[sel], yerr=[m[sel] - lo[sel], hi[sel] - m[sel]], fmt="none", ecolor=colour,
                            elinewidth=0.8, capsize=cap, capthick=0.8)


def _panel(ax, summary: pd.DataFrame, col: str, title: str, colours: dict[str, int]) -> None:
    """One quantity against ε on ``ax``."""
    private, base = _split(summary)
    eps = np.sort(private["epsilon"].unique().astype(float))
    ax.set_xscale("log")
    ax.set_xlim(*((eps.min() / 1.5, eps.max() * 1.5) if len(eps) else (0.5, 50)))
    values = pd.to_numeric(summary[col], errors="coerce").to_numpy(dtype=float)
    log = col in LOG_PANELS and (values[np.isfinite(values)] > 0).any()
    if log:
        ax.set_yscale("log")
    floor = float(np.nanmin(values[values > 0])) / 10 if log else -math.inf  # a band's foot stays on the log axis
    if not np.isfinite(values).any():
        ax.text(0.5, 0.5, "not computed", ha="center", va="center", transform=ax.transAxes, fontsize=FONT)
        ax.set_yticks([])
    for method, g in private.groupby("method", sort=False):
        g = g.sort_values("epsilon")
        i = colours[method]
        ax.plot(g["epsilon"], g[col], marker=_MARKERS[i % len(_MARKERS)], markersize=3.5, linewidth=1.1,
                label=method, color=f"C{i % 10}")
        _draw_intervals(ax, g, col, f"C{i % 10}", floor)
    for _, b in base.iterrows():
        if np.isfinite(b[col]):
            eps_text = "∞" if not np.isfinite(b["epsilon"]) else f"{b['epsilon']:g}"
            ax.axhline(b[col], ls="--", linewidth=1.0, color=f"C{colours[b['method']] % 10}",
                       label=f"{b['method']} (ε = {eps_text})")
    if col == "downstream_accuracy":
        chances = _chance(summary)
        for c, methods in chances.items():
            k = round(1 / c)
            who = "" if len(chances) == 1 else f", {', '.join(methods)}"
            ax.axhline(c, ls=":", linewidth=1.0, color="grey", label=f"chance (1/{k} classes{who})")
    if len(eps):
        ax.set_xticks(eps, [f"{e:g}" for e in eps])
        ax.xaxis.set_minor_locator(_no_ticks())
    ax.set_xlabel(X_LABEL, fontsize=FONT)
    ax.set_title(title, fontsize=FONT + 1)
    ax.tick_params(which="both", labelsize=FONT)
    ax.yaxis.get_offset_text().set_fontsize(FONT)
    ax.grid(True, which="major", alpha=0.3, linewidth=0.5)


def _no_ticks():
    from matplotlib.ticker import NullLocator  # lazy: matplotlib only when the figure is drawn

    return NullLocator()


def _legend_entries(fig, summary: pd.DataFrame) -> tuple[list, list[str]]:
    """Every line of every panel once (a panel may lack some: no FID, no baseline value), then a patch per band
    kind drawn."""
    # lazy: matplotlib only when the figure is drawn
    from matplotlib.patches import Patch

    labelled: dict = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            labelled.setdefault(lab, h)
    for kind in band_kinds(summary):
        labelled[LEGEND_TEXT[kind]] = Patch(facecolor="grey", edgecolor="grey", **_BAND[kind])
    return list(labelled.values()), list(labelled)


def band_kinds(summary: pd.DataFrame) -> list[str]:
    """The interval kinds drawn as bands in the figure, in :data:`INTERVAL_TEXT` order."""
    private, _ = _split(summary)
    kinds = set()
    for col, _ in PANELS:
        for _, g in private.groupby("method", sort=False):
            mode, k = line_intervals(g.sort_values("epsilon"), col)
            if mode == "band":
                kinds.add(next(x for x in k if x))
    return [k for k in INTERVAL_TEXT if k in kinds]


def _has_bars(summary: pd.DataFrame) -> bool:
    private, _ = _split(summary)
    return any(line_intervals(g, col)[0] == "bars" for col, _ in PANELS for _, g in private.groupby("method"))


def panel_figure(summary: pd.DataFrame, col: str):
    """One panel, :data:`COLUMN_WIDTH` wide, its legend below the axes."""
    # lazy: matplotlib only when the figure is drawn
    from matplotlib.figure import Figure

    fig = Figure(layout="constrained")
    _panel(fig.add_subplot(), summary, col, dict(PANELS)[col], _colours(summary))
    handles, labels = _legend_entries(fig, summary)
    fig.set_size_inches(COLUMN_WIDTH, 2.3 + 0.14 * math.ceil(len(labels) / 2))  # the axes keep their height
    fig.legend(handles, labels, loc="outside lower center", ncol=2, **_LEGEND)
    return fig


def grid_figure(summary: pd.DataFrame):
    """Every panel, :data:`TEXT_WIDTH` wide; the legend in the last row's free slot, else below the grid."""
    # lazy: matplotlib only when the figure is drawn
    from matplotlib.figure import Figure

    ncols = grid_columns(len(PANELS))
    nrows = math.ceil(len(PANELS) / ncols)
    free = nrows * ncols > len(PANELS)
    fig = Figure(figsize=(TEXT_WIDTH, 2.1 * nrows + (0 if free else 0.6)), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    colours = _colours(summary)
    for ax, (col, title) in zip(axes, PANELS):
        _panel(ax, summary, col, title, colours)
    handles, labels = _legend_entries(fig, summary)
    for ax in axes[len(PANELS):]:
        ax.axis("off")
    if free:
        axes[len(PANELS)].legend(handles, labels, loc="center", **_LEGEND)
    else:
        fig.legend(handles, labels, loc="outside lower center", ncol=3, **_LEGEND)
    return fig


def caption(summary: pd.DataFrame) -> str:
    """What the figure shows, naming every interval kind it draws and how (a band or a bar)."""
    parts = ["Utility and leakage against ε (log axis): one line per private method, its mean over seeds at each "
             "ε; dashed horizontal lines: runs off the ε axis (ε = ∞ non-private, ε = 0 public-only), their mean "
             "over seeds; dotted grey: chance accuracy (1/k of the k classes the downstream classifier is tested "
             "on); FID on a log axis."]
    kinds = band_kinds(summary)
    if "bootstrap" in kinds:
        parts.append(f"Solid band: {INTERVAL_TEXT['bootstrap']} (a line with one seed at every ε).")
    if "seeds" in kinds:
        parts.append(f"Hatched band: {INTERVAL_TEXT['seeds']} (a line with several seeds at every ε).")
    if _has_bars(summary):
        parts.append(f"Error bars (a line whose ε points differ in their number of seeds): capped, "
                     f"{INTERVAL_TEXT['seeds']}; plain, {INTERVAL_TEXT['bootstrap']}.")
    parts.append("A point without a band or bar has no interval (e.g. the FID of one run).")
    return " ".join(parts)


def write_figures(summary: pd.DataFrame, out: Path, formats=FIGURE_FORMATS) -> list[Path]:
    """The grid, then each panel alone, under ``out/figures/`` in every format; returns the paths, grid first."""
    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    paths = save_figure(grid_figure(summary), fig_dir / "privacy_utility.png", formats)
    for col, _ in PANELS:
        paths += save_figure(panel_figure(summary, col), fig_dir / f"privacy_utility-{col}.png", formats)
    return paths
