"""The report's ROC figures under ``<out>/figures/`` (PNG, SVG, PDF): per target, by attack and each panel alone
(names and styles: docs/benchmarks.md, "Reports"). An inverted AUC is marked in a legend, and under "inverted:" in
a by-attack panel's title.
"""
from __future__ import annotations

import math
from pathlib import Path

from ..core.io import safe_name
from ..metrics.plots import plot_roc, plot_roc_panels
from ..metrics.roc import is_inverted
from .collect import Result
from .curve_labels import distinguishing_parts, file_suffix, label

FIGURE_FORMATS = ("png", "svg", "pdf")
#: the word a figure adds to an inverted AUC's curve (the tables' "inverted" mark)
INVERTED = "inverted"


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


def _curves(targets: list[dict], cache: dict) -> list[dict]:
    """The targets that have a membership curve, each with its scores per attack, its name in every figure of its
    (dataset, seed) and the parts of that name added to the method/target (reports.curve_labels)."""
    drawn = []
    for b in targets:
        scores = {a["attack"]: sy for a in b["attacks"] if (sy := _scores(a["result"], cache)) is not None}
        inverted = {a["attack"] for a in b["attacks"]
                    if is_inverted(a["metrics"].get("auc"), (a.get("ci") or {}).get("auc"))}
        if scores:
            drawn.append({"block": b, "scores": scores, "base": f"{b['method']}/{b['target']}",
                          "inverted": inverted & set(scores)})
    by_figure: dict[tuple, list[dict]] = {}
    for d in drawn:
        by_figure.setdefault((d["block"]["dataset"], d["block"]["seed"]), []).append(d)
    for group in by_figure.values():
        blocks = [d["block"] for d in group]
        for d, parts in zip(group, distinguishing_parts(blocks, [d["base"] for d in group])):
            d["parts"], d["name"] = parts, label(d["base"], parts)
        # a method's curves side by side in the legend, ε ascending (the targets come in the tables' row order)
        first = {}
        for i, d in enumerate(group):
            first.setdefault(d["base"], i)
        group.sort(key=lambda d: (first[d["base"]], _axis_value(d["block"]), d["name"]))
    return [d for group in by_figure.values() for d in group]


def _axis_value(block: dict) -> float:
    eps = block.get("axis_epsilon")
    if eps is None:
        eps = (block.get("claim") or {}).get("epsilon")
    return math.inf if eps is None else float(eps)


def write_roc_figures(targets: list[dict], out: Path, formats=FIGURE_FORMATS) -> dict:
    """Every ROC figure of the report; returns {"per_target": [...], "by_attack": [...], "per_attack": [...]},
    each entry with its ``title``, ``png`` (path), ``files`` (every format written), ``curves`` (the names
    drawn: one per result that belongs in the figure; ``by_attack``: per panel) and ``inverted`` (the curves
    marked inverted, likewise)."""
    fig_dir = out / "figures"
    used: set[str] = set()

    def stem(name: str) -> Path:
        s, i = name, 2
        while s in used:  # two names that only differ in characters a file name drops: keep both files
            s, i = f"{name}-{i}", i + 1
        used.add(s)
        return fig_dir / s

    curves = _curves(targets, {})
    per_target, panels, groups, marks = [], {}, {}, {}
    for d in curves:
        b = d["block"]
        for attack, sy in d["scores"].items():
            panels.setdefault((b["dataset"], b["seed"]), {}).setdefault(attack, {})[d["name"]] = sy
            if attack in d["inverted"]:
                marks.setdefault((b["dataset"], b["seed"]), {}).setdefault(attack, {})[d["name"]] = INVERTED
        groups.setdefault((b["dataset"], b["seed"]), {})[d["name"]] = d["base"]
        extra = "".join(f", {p.text}" for p in d["parts"])
        title = f"{d['base']}{extra} ({b['dataset']}, seed {b['seed']})"
        base = stem(f"roc-{safe_name(b['dataset'])}-seed{b['seed']}-{safe_name(b['method'])}-"
                    f"{safe_name(b['target'])}{file_suffix(d['parts'])}")
        fig_dir.mkdir(parents=True, exist_ok=True)
        png = plot_roc(d["scores"], base.with_suffix(".png"), title=title, formats=formats,
                       marks={a: INVERTED for a in d["inverted"]})
        per_target.append({"title": title, "role": b["role"], "png": png, "curves": list(d["scores"]),
                           "inverted": sorted(d["inverted"]),
                           "files": [base.with_suffix(f".{f}") for f in formats]})
    by_attack, per_attack = [], []
    for (dataset, seed), by in panels.items():
        title = f"Membership attacks across targets ({dataset}, seed {seed}; log-log ROC)"
        base = stem(f"roc-by-attack-{safe_name(dataset)}-seed{seed}")
        same = groups[(dataset, seed)]  # a method/target's curves share a colour
        marked = marks.get((dataset, seed), {})
        files = plot_roc_panels(by, base.with_suffix(".png"), title=title, formats=formats,
                                ncols=grid_columns(len(by)), groups=same, marks=marked)
        by_attack.append({"title": title, "png": files[0], "files": files, "dataset": dataset, "seed": seed,
                          "attacks": list(by), "curves": {a: list(c) for a, c in by.items()},
                          "inverted": {a: list(c) for a, c in marked.items()}})
        order = list(dict.fromkeys(n for drawn in by.values() for n in drawn))  # the grid's style order
        for attack, drawn in by.items():
            ptitle = f"{attack} across targets ({dataset}, seed {seed})"
            pbase = stem(f"roc-{safe_name(attack)}-{safe_name(dataset)}-seed{seed}")
            png = plot_roc(drawn, pbase.with_suffix(".png"), title=ptitle, formats=formats, order=order,
                           groups=same, marks=marked.get(attack))
            per_attack.append({"title": ptitle, "png": png, "attack": attack, "dataset": dataset, "seed": seed,
                               "curves": list(drawn), "inverted": list(marked.get(attack) or {}),
                               "files": [pbase.with_suffix(f".{f}") for f in formats]})
    return {"per_target": per_target, "by_attack": by_attack, "per_attack": per_attack}
