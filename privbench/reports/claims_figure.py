"""The paper-claims figure ``figures/paper_claims.*``: one panel per claim of ``paper_claims.csv``, each on its own
axis (docs/benchmarks.md, "Reports"), so a reader sees which intervals overlap and whether the paired difference
excludes 0.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..metrics.plots import save_figure
from .figures import FIGURE_FORMATS, grid_columns

TEXT_WIDTH, FONT = 7.0, 7  # inches, points


def _interval(r, side: str) -> tuple[float, float, float] | None:
    m, lo, hi = (r.get(f"{side}_mean"), r.get(f"{side}_ci_lo"), r.get(f"{side}_ci_hi"))
    if m is None or pd.isna(m):
        return None
    lo = m if lo is None or pd.isna(lo) else lo
    hi = m if hi is None or pd.isna(hi) else hi
    return float(m), float(lo), float(hi)


def _panel(ax, diff_ax, r) -> None:
    """Means and intervals on ``ax``; the paired difference on ``diff_ax`` (hidden where the seeds do not pair)."""
    from matplotlib.ticker import MaxNLocator  # lazy: matplotlib only when a figure is drawn

    for y, (side, color) in enumerate((("subject", "C0"), ("baseline", "C1"))):
        iv = _interval(r, side)
        if iv is not None:
            m, lo, hi = iv
            ax.errorbar([m], [y], xerr=[[m - lo], [hi - m]], fmt="o", color=color, capsize=3, markersize=4)
    ax.set_yticks([0, 1], labels=[str(r[s]).replace(" (", "\n(") for s in ("subject", "baseline")])
    ax.set_ylim(-0.6, 1.6)
    ax.invert_yaxis()
    arrow = {"lower": " ↓", "higher": " ↑"}.get(str(r.get("better")), "")
    ax.set_xlabel(f"{r['metric']}{arrow}", fontsize=FONT)
    ax.set_title(f"{r['id']}\n{r['verdict']}", fontsize=FONT)
    ax.tick_params(labelsize=FONT)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
    d, dlo, dhi = r.get("paired_diff_mean"), r.get("paired_diff_ci_lo"), r.get("paired_diff_ci_hi")
    if d is None or pd.isna(d):
        diff_ax.set_visible(False)
        return
    diff_ax.errorbar([d], [0], xerr=[[d - dlo], [dhi - d]], fmt="s", color="0.2", capsize=3, markersize=3)
    diff_ax.axvline(0, color="0.5", linestyle=":", linewidth=0.8)
    diff_ax.set_yticks([])
    lo, hi = min(dlo, 0.0), max(dhi, 0.0)
    pad = 0.1 * (hi - lo or 1.0)
    diff_ax.set_xlim(lo - pad, hi + pad)
    diff_ax.set_xlabel(f"subject − baseline, paired ({int(r['paired_n_seeds'])} seeds)", fontsize=FONT)
    diff_ax.tick_params(labelsize=FONT)
    diff_ax.xaxis.set_major_locator(MaxNLocator(nbins=4))


def write_claims_figure(df: pd.DataFrame, out: Path, formats=FIGURE_FORMATS) -> list[Path]:
    """Draw ``paper_claims_frame``'s ``df`` to ``out/figures/paper_claims.*``; returns the files written."""
    rows = [r for r in df.to_dict("records") if _interval(r, "subject") or _interval(r, "baseline")]
    if not rows:
        return []
    # lazy: matplotlib only when a figure is drawn
    from matplotlib.figure import Figure

    cols = min(grid_columns(len(rows)), 2)  # the subject and baseline names beside each panel need the width
    nrows = math.ceil(len(rows) / cols)
    fig = Figure(figsize=(TEXT_WIDTH, 2.2 * nrows), layout="constrained")
    grid = fig.subplots(2 * nrows, cols, squeeze=False, gridspec_kw={"height_ratios": [3, 1] * nrows})
    for i in range(nrows * cols):
        ax, diff_ax = grid[2 * (i // cols), i % cols], grid[2 * (i // cols) + 1, i % cols]
        if i < len(rows):
            _panel(ax, diff_ax, rows[i])
        else:
            ax.set_visible(False)
            diff_ax.set_visible(False)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    return save_figure(fig, out / "figures" / "paper_claims", formats)
