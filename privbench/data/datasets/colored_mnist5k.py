"""``colored-mnist5k``: the 5,000 MNIST digits of ``mnist5k`` in colour, for the PFDM paper's Colorized MNIST
(C-MNIST) experiment — each record in one of six colours fixed by its index, coloured as ``colored-digits`` is
(:func:`colored_digits.colorize`). Same records, labels, order and extractor split as ``mnist5k``."""
from __future__ import annotations

import torch

from ..base import register_dataset
from .colored_digits import colorize
from .mnist5k import EXTRACTOR_PER_CLASS, N_CLASSES, SIDE, mnist5k_arrays


@register_dataset("colored-mnist5k", 3, SIDE, N_CLASSES,
                  "mnist5k's 5000 28×28 digits, 3 channels, each record in one of 6 colours fixed by its index "
                  "(C-MNIST; offline); 100 per class are the feature extractor's split, in no run",
                  extractor_per_class=EXTRACTOR_PER_CLASS)
def load_colored_mnist5k(data_root=None, download=False):
    del data_root, download  # the dataset loader interface (register_dataset); made from mnist5k's records
    x, y = mnist5k_arrays()
    return torch.from_numpy(colorize(x)), torch.from_numpy(y.copy())
