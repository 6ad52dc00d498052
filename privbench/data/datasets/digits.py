"""``digits``: scikit-learn's 8×8 digits, embedded (scikit-learn ships them): never downloads."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from ..base import register_dataset


@lru_cache(maxsize=4)
def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images N×1×8×8 float32 in [−1, 1], labels N int64), cached; callers copy before changing them."""
    from sklearn.datasets import load_digits  # lazy: scikit-learn only when digits is read, not with the registry

    d = load_digits()
    x = d.images.astype(np.float32) / 8.0 - 1.0  # pixel values 0..16 → [−1, 1]
    return x[:, None], d.target.astype(np.int64)


@register_dataset("digits", 1, 8, 10, "scikit-learn's 8×8 digits, 1797 records, 1 channel, 10 classes (embedded)")
def load_digits_data(data_root=None, download=False):
    del data_root, download  # the dataset loader interface (register_dataset); the records ship with scikit-learn
    x, y = digits_arrays()
    return torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
