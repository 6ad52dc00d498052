"""``colored-digits``: the 8×8 digits in colour, embedded — each record in one of six colours fixed by its index,
so that colour behaves like a per-record style (the role colour plays in the PFDM paper's Colorized MNIST).
:func:`colorize` is the colouring (``colored-mnist5k`` uses it too)."""
from __future__ import annotations

import numpy as np
import torch

from ..base import register_dataset
from .digits import digits_arrays

_PALETTE = np.array(
    [[1.0, 0.15, 0.15], [0.15, 1.0, 0.15], [0.2, 0.35, 1.0], [1.0, 0.9, 0.1], [0.1, 0.95, 0.95], [0.95, 0.2, 0.95]],
    dtype=np.float32,
)


def record_colors(n: int) -> np.ndarray:
    rng = np.random.default_rng(20240607)  # fixed: the colour of a record is part of the dataset
    return rng.integers(0, len(_PALETTE), size=n)


def colorize(x: np.ndarray) -> np.ndarray:
    """Gray images N×1×H×W in [−1, 1] → N×3×H×W float32 in [−1, 1]: record i's intensity times its colour
    (:func:`record_colors`), so a blank pixel stays −1 in every channel."""
    inten = (x + 1.0) / 2.0  # [0, 1], N×1×H×W
    col = _PALETTE[record_colors(len(x))][:, :, None, None]  # N×3×1×1
    return (inten * col * 2.0 - 1.0).astype(np.float32)


@register_dataset("colored-digits", 3, 8, 10,
                  "8×8 digits, 3 channels, each record in one of 6 colours fixed by its index (embedded)")
def load_colored_digits(data_root=None, download=False):
    del data_root, download  # the dataset loader interface (register_dataset); made from the embedded digits
    x, y = digits_arrays()
    return torch.from_numpy(colorize(x)), torch.from_numpy(y.copy())
