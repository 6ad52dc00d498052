"""PNG figures: log-log ROC curves and image grids.

matplotlib is imported lazily (inside the functions) and only through its object-oriented Agg API, so importing
``privbench.metrics`` stays light and no global pyplot state or display backend is touched. Files are written
atomically (temporary file in the same folder, then rename).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..core.errors import BadInput
from ..core.io import atomic_path

__all__ = ["plot_roc", "plot_image_grid"]

DPI = 120
# image cells are upscaled (nearest neighbour) until their longer side is at least this many pixels
MIN_CELL_PX = 64


def _atomic_write(path: str | os.PathLike, write) -> Path:
    """``write(tmp)`` into a temporary file that replaces ``path`` only when complete (privbench.core.io)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        write(str(tmp))
    return path


def plot_roc(
    curves: Mapping[str, tuple[Any, Any]], path: str | os.PathLike, title: str = ""
) -> Path:
    """Log-log ROC (FPR on x, TPR on y) of one or more score sets, each labelled with its AUC, plus chance.

    ``curves`` maps a legend name to ``(scores, labels)`` (members = 1, higher score = member). Both axes run
    from 1/n to 1, n being the largest class size among the curves; rates of 0 are drawn at that floor so the
    low-FPR end of every curve stays visible. Returns the path of the PNG.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from privbench.metrics.roc import auc as _auc
    from privbench.metrics.roc import roc_points

    if not isinstance(curves, Mapping) or len(curves) == 0:
        raise BadInput("curves: expected a non-empty mapping name -> (scores, labels)")
    prepared = []
    n_max = 1
    for name, pair in curves.items():
        try:
            scores, labels = pair
        except (TypeError, ValueError):
            raise BadInput(f"curves[{name!r}]: expected a (scores, labels) pair") from None
        fpr, tpr, _ = roc_points(scores, labels)
        a = _auc(scores, labels)
        y = np.asarray(labels.detach().cpu().numpy() if hasattr(labels, "detach") else labels) == 1
        n_max = max(n_max, int(y.sum()), int((~y).sum()))
        prepared.append((str(name), fpr, tpr, a))
    lo = 1.0 / n_max

    fig = Figure(figsize=(5.0, 5.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for name, fpr, tpr, a in prepared:
        # straight segments between the exact ROC points (a tie group gives a diagonal, as in the AUC)
        ax.plot(np.clip(fpr, lo, 1.0), np.clip(tpr, lo, 1.0), label=f"{name} (AUC={a:.3f})", clip_on=False)
    ax.plot([lo, 1.0], [lo, 1.0], linestyle="--", color="grey", linewidth=1.0, label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, 1.0)
    ax.set_ylim(lo, 1.0)
    ax.set_xlabel("False positive rate")
    ax.set_ylabel("True positive rate")
    if title:
        ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    return _atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=DPI, format="png"))


def plot_image_grid(
    images: Any,
    path: str | os.PathLike,
    nrow: int | None = None,
    labels: Sequence[Any] | None = None,
) -> Path:
    """Write ``images`` (N×C×H×W in [−1, 1], C = 1 or 3) as a PNG grid with ``nrow`` images per row.

    ``nrow`` defaults to ceil(sqrt(N)). Cells are upscaled by an integer factor (nearest neighbour) so that
    small images such as 8×8 digits are visible. ``labels`` (one per image, any printable value) are written
    above their cells. Returns the path of the PNG.
    """
    from PIL import Image, ImageDraw

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
