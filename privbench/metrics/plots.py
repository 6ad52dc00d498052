"""Figures: log-log ROC curves (PNG, and SVG/PDF for papers), ROC panels across targets, and image grids.

matplotlib is imported lazily and used only through its object-oriented API (no pyplot state, no display backend).
Files are written atomically; vector files carry no creation date and fixed SVG ids, so the same numbers give the
same file.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..core.errors import BadInput
from ..core.io import atomic_path
from .roc import auc as _auc
from .roc import roc_points

__all__ = ["plot_roc", "plot_roc_panels", "roc_figure", "roc_panels_figure", "save_figure", "plot_image_grid"]

DPI = 120
FORMATS = ("png", "svg", "pdf")
# image cells are upscaled (nearest neighbour) until their longer side is at least this many pixels
MIN_CELL_PX = 64
_STYLES = ("-", "--", "-.", ":")
# markers cycle on their own, at a per-curve offset, so two coinciding curves still both show
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
_MARK_STEP = 0.12   # markevery: one marker per this fraction of the axes diagonal
_LEGEND_LINE_IN = 0.2  # height of one legend entry at fontsize "small", in inches


def _atomic_write(path: str | os.PathLike, write) -> Path:
    """``write(tmp)`` into a temporary file that replaces ``path`` only when complete (privbench.core.io)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        write(str(tmp))
    return path


def _prepare(curves: Mapping[str, tuple[Any, Any]], what: str = "curves") -> tuple[list, int]:
    """(name, fpr, tpr, auc) per curve and the largest class size among them."""
    if not isinstance(curves, Mapping) or len(curves) == 0:
        raise BadInput(f"{what}: expected a non-empty mapping name -> (scores, labels)")
    prepared = []
    n_max = 1
    for name, pair in curves.items():
        try:
            scores, labels = pair
        except (TypeError, ValueError):
            raise BadInput(f"{what}[{name!r}]: expected a (scores, labels) pair") from None
        fpr, tpr, _ = roc_points(scores, labels)
        a = _auc(scores, labels)
        y = np.asarray(labels.detach().cpu().numpy() if hasattr(labels, "detach") else labels) == 1
        n_max = max(n_max, int(y.sum()), int((~y).sum()))
        prepared.append((str(name), fpr, tpr, a))
    return prepared, n_max


def _style(i: int) -> dict:
    """Colour, line style and marker of the i-th curve (neighbours differ in all three)."""
    return {"color": f"C{i % 10}", "linestyle": _STYLES[i % len(_STYLES)], "marker": _MARKERS[i % len(_MARKERS)],
            "markersize": 4, "markerfacecolor": "none",
            "markevery": (round((i % 6) * _MARK_STEP / 6, 4), _MARK_STEP)}


def _styles(names: Sequence[str], order: Sequence[str] | None,
            groups: Mapping[str, str] | None = None) -> dict[str, dict]:
    """Each name's style by its place in ``order`` (names not in it after), the same in every figure drawn with that
    ``order``. A group of ``groups`` (name → group) shares a colour; its members differ in line style and marker."""
    order = list(order or [])
    order += [n for n in names if n not in order]
    if not groups:
        return {n: _style(order.index(n)) for n in names}
    keys = list(dict.fromkeys(groups.get(n, n) for n in order))
    out = {}
    for n in names:
        g = keys.index(groups.get(n, n))
        m = [o for o in order if groups.get(o, o) == groups.get(n, n)].index(n)
        s = _style(order.index(n))  # its own marker offset: equal curves stay visible
        out[n] = {**s, "color": f"C{g % 10}", "linestyle": _STYLES[m % len(_STYLES)],
                  "marker": _MARKERS[(g + m) % len(_MARKERS)]}
    return out


def _roc_axes(ax, prepared: list, lo: float, styles: Mapping[str, dict], label_auc: bool = True,
              marks: Mapping[str, str] | None = None) -> None:
    """The curves, chance and log-log axes; with ``label_auc`` each legend entry carries its AUC and ``marks`` word."""
    marks = marks or {}
    for name, fpr, tpr, a in prepared:
        mark = f", {marks[name]}" if name in marks else ""
        # straight segments between the exact ROC points (a tie group gives a diagonal, as in the AUC)
        ax.plot(np.clip(fpr, lo, 1.0), np.clip(tpr, lo, 1.0),
                label=f"{name} (AUC={a:.3f}{mark})" if label_auc else name,
                clip_on=False, linewidth=1.4, **styles[name])
    ax.plot([lo, 1.0], [lo, 1.0], linestyle=(0, (1, 3)), color="grey", linewidth=1.0, label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, 1.0)
    ax.set_ylim(lo, 1.0)
    ax.set_xlabel("False positive rate")
    ax.set_ylabel("True positive rate")
    ax.grid(True, which="major", alpha=0.3)


def roc_figure(curves: Mapping[str, tuple[Any, Any]], title: str = "", order: Sequence[str] | None = None,
               groups: Mapping[str, str] | None = None, marks: Mapping[str, str] | None = None):
    """The Figure of :func:`plot_roc`: one log-log ROC, the legend below the axes (never over a curve)."""
    from matplotlib.figure import Figure  # lazy

    prepared, n_max = _prepare(curves)
    lo = 1.0 / n_max
    # a fixed layout in inches (axes, labels, title above, legend below): constrained layout would draw twice
    legend_h = _LEGEND_LINE_IN * (len(prepared) + 1) + 0.1
    left, right, top, bottom = 0.75, 0.2, (0.4 if title else 0.15), 0.55 + legend_h
    w, h = 5.0, 4.0 + top + bottom
    fig = Figure(figsize=(w, h))
    ax = fig.add_axes((left / w, bottom / h, 1 - (left + right) / w, 1 - (top + bottom) / h))
    _roc_axes(ax, prepared, lo, _styles([n for n, *_r in prepared], order, groups), marks=marks)
    # y given: matplotlib then does not search for a higher title place at every draw
    ax.set_title(title, fontsize="medium", y=1.0)
    fig.legend(loc="lower center", bbox_to_anchor=(0.5, 0.05 / h), fontsize="small", ncol=1, frameon=False)
    return fig


def roc_panels_figure(panels: Mapping[str, Mapping[str, tuple[Any, Any]]], title: str = "", ncols: int = 3,
                      groups: Mapping[str, str] | None = None,
                      marks: Mapping[str, Mapping[str, str]] | None = None):
    """One log-log ROC panel per key of ``panels`` (e.g. per attack), each with its curves (e.g. per target).

    One legend (no AUCs) below all panels, in rows of ``ncols``; ``marks``: panel → {name: word}, named in the
    panel's title ("inverted: a, b")."""
    from matplotlib.figure import Figure  # lazy

    if not isinstance(panels, Mapping) or not panels:
        raise BadInput("panels: expected a non-empty mapping panel -> {name: (scores, labels)}")
    prepared = {k: _prepare(v, f"panels[{k!r}]") for k, v in panels.items()}
    names: list[str] = []
    for plist, _ in prepared.values():
        names += [n for n, *_r in plist if n not in names]
    styles = _styles(names, names, groups)
    k = len(prepared)
    ncols = max(1, min(ncols, k))
    nrows = math.ceil(k / ncols)
    legend_cols = max(1, min(len(names) + 1, 2 * ncols))
    legend_h = 0.22 * math.ceil((len(names) + 1) / legend_cols)
    fig = Figure(figsize=(4.2 * ncols, nrows * 4.0 + legend_h + 0.4), layout="constrained")
    # 2·ncols grid columns so that a short last row can be centred (each panel spans two of them)
    grid = fig.add_gridspec(nrows, 2 * ncols)
    for i, (panel, (plist, n_max)) in enumerate(prepared.items()):
        row, col = divmod(i, ncols)
        in_row = min(ncols, k - row * ncols)
        offset = ncols - in_row  # half-panels of margin on each side of a short row
        ax = fig.add_subplot(grid[row, offset + 2 * col: offset + 2 * col + 2])
        _roc_axes(ax, plist, 1.0 / n_max, styles, label_auc=False)
        ax.set_title(panel + _marked_line((marks or {}).get(panel) or {}), fontsize="medium")
    handles: dict = {}
    for ax in fig.axes:  # every name once, in first-seen order, then chance
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    handles["chance"] = handles.pop("chance")
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", fontsize="small",
               ncol=legend_cols, frameon=False)
    if title:
        fig.suptitle(title, fontsize="large")
    return fig


def _marked_line(marks: Mapping[str, str]) -> str:
    """A panel title's second line naming its marked curves by word: "\ninverted: a, b" ("" when none)."""
    by_word: dict[str, list[str]] = {}
    for name, word in marks.items():
        by_word.setdefault(word, []).append(name)
    return "".join(f"\n{word}: {', '.join(names)}" for word, names in by_word.items())


def save_figure(fig, path: str | os.PathLike, formats: Sequence[str] = ("png",)) -> list[Path]:
    """Write ``fig`` as ``path`` with each suffix of ``formats`` (png, svg, pdf); returns the paths written."""
    # lazy
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise BadInput(f"figure formats {list(formats)}: choose from {', '.join(FORMATS)}")
    FigureCanvasAgg(fig)
    path = Path(path)
    out = []
    meta = {"png": None, "svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}}
    for fmt in formats:
        target = path.with_suffix(f".{fmt}")
        with rc_context({"svg.hashsalt": "privbench", "svg.fonttype": "none", "pdf.fonttype": 42}):
            out.append(_atomic_write(target, lambda tmp, f=fmt: fig.savefig(tmp, dpi=DPI, format=f,
                                                                          metadata=meta[f])))
    return out


def plot_roc(
    curves: Mapping[str, tuple[Any, Any]], path: str | os.PathLike, title: str = "",
    formats: Sequence[str] = ("png",), order: Sequence[str] | None = None, groups: Mapping[str, str] | None = None,
    marks: Mapping[str, str] | None = None,
) -> Path:
    """Log-log ROC (FPR on x, TPR on y) of one or more score sets, each labelled with its AUC, plus chance.

    ``curves``: legend name → ``(scores, labels)``; axes from 1/n (n: the largest class size, rates of 0 drawn
    there) to 1. ``order``, ``groups``: :func:`_styles`; ``marks``: name → a word after the AUC ("inverted").
    Returns the path of the first of ``formats``."""
    return save_figure(roc_figure(curves, title, order, groups, marks), path, formats)[0]


def plot_roc_panels(
    panels: Mapping[str, Mapping[str, tuple[Any, Any]]], path: str | os.PathLike, title: str = "",
    formats: Sequence[str] = ("png",), ncols: int = 3, groups: Mapping[str, str] | None = None,
    marks: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Path]:
    """:func:`roc_panels_figure` written in each of ``formats``; returns the paths."""
    return save_figure(roc_panels_figure(panels, title, ncols, groups, marks), path, formats)


def plot_image_grid(
    images: Any,
    path: str | os.PathLike,
    nrow: int | None = None,
    labels: Sequence[Any] | None = None,
) -> Path:
    """Write ``images`` (N×C×H×W in [−1, 1], C = 1 or 3) as a PNG grid with ``nrow`` (default ⌈√N⌉) images per row,
    cells upscaled to at least :data:`MIN_CELL_PX`, each ``labels`` entry above its cell. Returns the path."""
    from PIL import Image, ImageDraw  # lazy: PIL only for image grids

    if hasattr(images, "detach"):
        images = images.detach().cpu().float().numpy()
    arr = np.asarray(images, dtype=np.float64)
    if arr.ndim != 4:
        raise BadInput(f"images: expected N×C×H×W, got shape {tuple(arr.shape)}")
    n, c, h, w = arr.shape
    if n == 0:
        raise BadInput("images: the batch is empty")
    if c not in (1, 3):
        raise BadInput(f"images: expected 1 or 3 channels, got {c}")
    if not np.all(np.isfinite(arr)):
        raise BadInput("images: contains NaN or infinite values")
    if nrow is None:
        nrow = int(math.ceil(math.sqrt(n)))
    if isinstance(nrow, bool) or not isinstance(nrow, (int, np.integer)) or nrow < 1:
        raise BadInput(f"nrow: expected a positive integer, got {nrow!r}")
    nrow = int(nrow)
    if labels is not None:
        labels = [str(v) for v in labels]
        if len(labels) != n:
            raise BadInput(f"labels: expected {n} labels (one per image), got {len(labels)}")

    scale = max(1, int(math.ceil(MIN_CELL_PX / max(h, w))))
    u8 = np.round((np.clip(arr, -1.0, 1.0) + 1.0) * 127.5).astype(np.uint8)
    if c == 1:
        u8 = np.repeat(u8, 3, axis=1)
    u8 = u8.repeat(scale, axis=2).repeat(scale, axis=3)  # nearest-neighbour upscale
    ch, cw = h * scale, w * scale
    pad = 2
    label_h = 12 if labels is not None else 0
    ncol = min(nrow, n)
    nrows = int(math.ceil(n / nrow))
    H = nrows * (ch + label_h + pad) + pad
    W = ncol * (cw + pad) + pad
    canvas = np.full((H, W, 3), 255, dtype=np.uint8)
    for i in range(n):
        r, col = divmod(i, nrow)
        top = pad + r * (ch + label_h + pad) + label_h
        left = pad + col * (cw + pad)
        canvas[top : top + ch, left : left + cw] = u8[i].transpose(1, 2, 0)
    img = Image.fromarray(canvas)
    if labels is not None:
        draw = ImageDraw.Draw(img)
        for i, text in enumerate(labels):
            r, col = divmod(i, nrow)
            top = pad + r * (ch + label_h + pad)
            left = pad + col * (cw + pad)
            draw.text((left + 1, top), text[: max(1, cw // 6)], fill=(0, 0, 0))
    return _atomic_write(path, lambda tmp: img.save(tmp, format="PNG"))
