"""The report's ROC figures, written under ``<out>/figures/`` as PNG (embedded in the HTML), SVG and PDF:

* ``roc-<dataset>-seed<S>-<method>-<target>.*`` — one per target, every membership attack overlaid;
* ``roc-by-attack-<dataset>-seed<S>.*`` — one panel per membership attack with every target's curve (the figure
  a paper shows: how each attack fares across private methods and baselines), one legend for all panels;
* ``roc-<attack>-<dataset>-seed<S>.*`` — each of those panels alone (a paper's single-column figure), its legend
  with every curve's AUC.

A target keeps its colour, line style and marker in every figure of a (dataset, seed); equal curves stay
visible (different line styles, markers at different offsets). ``report --attacks/--targets`` chooses which
attacks and targets are drawn (reports.layout).
"""
from __future__ import annotations

import math
from pathlib import Path

from ..core.io import safe_name
from ..metrics.plots import plot_roc, plot_roc_panels
from .collect import Result

FIGURE_FORMATS = ("png", "svg", "pdf")


def grid_columns(k: int) -> int:
    """Columns for k panels: the fewest empty slots in the last row, then 3, 2, 4 columns in that order."""
    if k <= 3:
        return max(k, 1)
    return min((3, 2, 4), key=lambda c: math.ceil(k / c) * c - k)


def _scores(r: Result, cache: dict) -> tuple | None:
    if id(r) not in cache:
        try:
            cache[id(r)] = r.load_scores()
        except Exception:  # noqa: BLE001 - a missing scores file drops the curve, not the report
            cache[id(r)] = None
    return cache[id(r)]


def write_roc_figures(targets: list[dict], out: Path, formats=FIGURE_FORMATS) -> dict:
    """Every ROC figure of the report; returns {"per_target": [...], "by_attack": [...]}, each entry with its
    ``title``, ``png`` (path) and ``files`` (every format written)."""
    fig_dir = out / "figures"
    cache: dict = {}
    used: set[str] = set()

    def stem(name: str) -> Path:
        s, i = name, 2
        while s in used:  # two runs with the same method/target/seed (a folder of runs): keep both
            s, i = f"{name}-{i}", i + 1
        used.add(s)
        return fig_dir / s

    per_target, panels = [], {}
    for b in targets:
        curves = {}
        for a in b["attacks"]:
            sy = _scores(a["result"], cache)
            if sy is not None:
                curves[a["attack"]] = sy
                panels.setdefault((b["dataset"], b["seed"]), {}).setdefault(a["attack"], {})[
                    f"{b['method']}/{b['target']}"] = sy
        if not curves:
            continue
        title = f"{b['method']}/{b['target']} ({b['dataset']}, seed {b['seed']})"
        base = stem(f"roc-{safe_name(b['dataset'])}-seed{b['seed']}-{safe_name(b['method'])}-"
                    f"{safe_name(b['target'])}")
        fig_dir.mkdir(parents=True, exist_ok=True)
        png = plot_roc(curves, base.with_suffix(".png"), title=title, formats=formats)
        per_target.append({"title": title, "role": b["role"], "png": png,
                           "files": [base.with_suffix(f".{f}") for f in formats]})
    by_attack, per_attack = [], []
    for (dataset, seed), by in panels.items():
        title = f"Membership attacks across targets ({dataset}, seed {seed}; log-log ROC)"
        base = stem(f"roc-by-attack-{safe_name(dataset)}-seed{seed}")
        files = plot_roc_panels(by, base.with_suffix(".png"), title=title, formats=formats,
                                ncols=grid_columns(len(by)))
        by_attack.append({"title": title, "png": files[0], "files": files, "dataset": dataset, "seed": seed,
                          "attacks": list(by)})
        order = [n for curves in by.values() for n in curves]
        order = list(dict.fromkeys(order))  # the grid's style order: a target looks the same in every file
        for attack, curves in by.items():
            ptitle = f"{attack} across targets ({dataset}, seed {seed})"
            pbase = stem(f"roc-{safe_name(attack)}-{safe_name(dataset)}-seed{seed}")
            png = plot_roc(curves, pbase.with_suffix(".png"), title=ptitle, formats=formats, order=order)
            per_attack.append({"title": ptitle, "png": png, "attack": attack, "dataset": dataset, "seed": seed,
                               "files": [pbase.with_suffix(f".{f}") for f in formats]})
    return {"per_target": per_target, "by_attack": by_attack, "per_attack": per_attack}
