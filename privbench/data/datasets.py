"""Datasets as (images N×C×H×W float32 in [−1, 1], labels N long), in a fixed order.

``digits`` and ``colored-digits`` are embedded (scikit-learn ships the 8×8 digits): they never download.
``mnist``, ``cifar10`` and ``celeba`` read torchvision's on-disk formats under a data root.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import BadInput
from ..registry import DATASETS


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    channels: int
    size: int
    num_classes: int


_INFO = {
    "digits": DatasetInfo("digits", 1, 8, 10),
    "colored-digits": DatasetInfo("colored-digits", 3, 8, 10),
    "mnist": DatasetInfo("mnist", 1, 28, 10),
    "cifar10": DatasetInfo("cifar10", 3, 32, 10),
    "celeba": DatasetInfo("celeba", 3, 64, 2),
}


def dataset_info(name: str) -> DatasetInfo:
    DATASETS.get(name)
    return _INFO[name]


@lru_cache(maxsize=4)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = d.images.astype(np.float32) / 8.0 - 1.0  # pixel values 0..16 → [−1, 1]
    return x[:, None], d.target.astype(np.int64)


def load_digits_data(data_root=None, download=False):
    x, y = _digits()
    return torch.from_numpy(x.copy()), torch.from_numpy(y.copy())


# Six saturated colours; each record's colour is fixed by its index, so that colour behaves like a
# per-record style (the role colour plays in the PFDM paper's Colorized MNIST).
_PALETTE = np.array(
    [[1.0, 0.15, 0.15], [0.15, 1.0, 0.15], [0.2, 0.35, 1.0], [1.0, 0.9, 0.1], [0.1, 0.95, 0.95], [0.95, 0.2, 0.95]],
    dtype=np.float32,
)


def record_colors(n: int) -> np.ndarray:
    rng = np.random.default_rng(20240607)  # fixed: the colour of a record is part of the dataset
    return rng.integers(0, len(_PALETTE), size=n)


def load_colored_digits(data_root=None, download=False):
    x, y = _digits()
    inten = (x + 1.0) / 2.0  # [0, 1], N×1×8×8
    col = _PALETTE[record_colors(len(x))][:, :, None, None]  # N×3×1×1
    rgb = inten * col * 2.0 - 1.0
    return torch.from_numpy(rgb.astype(np.float32)), torch.from_numpy(y.copy())


DATASETS.add("digits", load_digits_data, "scikit-learn's 8×8 digits, 1797 records, 1 channel, 10 classes (embedded)")
DATASETS.add("colored-digits", load_colored_digits,
             "8×8 digits, 3 channels, each record in one of 6 colours fixed by its index (embedded)")


def _tv_loaders():
    from . import torchvision_formats as tvf

    return tvf


def _mnist(data_root=None, download=False):
    return _tv_loaders().load_mnist(_need_root("mnist", data_root), download)


def _cifar10(data_root=None, download=False):
    return _tv_loaders().load_cifar10(_need_root("cifar10", data_root), download)


def _celeba(data_root=None, download=False):
    return _tv_loaders().load_celeba(_need_root("celeba", data_root), download)


def _need_root(name, data_root):
    if not data_root:
        raise BadInput(f"--data-root is required for dataset {name!r} (torchvision format; add --download to fetch)")
    return data_root


DATASETS.add("mnist", _mnist, "MNIST 28×28 from torchvision files under --data-root (train split)")
DATASETS.add("cifar10", _cifar10, "CIFAR-10 32×32 from torchvision files under --data-root (train split)")
DATASETS.add("celeba", _celeba, "CelebA aligned faces from torchvision files under --data-root; label = Male")


def resize_to(x: torch.Tensor, size: int) -> torch.Tensor:
    """Pad (when smaller by an even margin) or resize images to size×size; values stay in [−1, 1]."""
    h = x.shape[-1]
    if size in (0, h):
        return x
    if size > h and (size - h) % 2 == 0:
        p = (size - h) // 2
        return F.pad(x, (p, p, p, p), value=-1.0)  # background is black (−1)
    return F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False).clamp(-1, 1)


def load_dataset(name: str, data_root: str | None = None, download: bool = False, resolution: int = 0):
    """``privbench.load_dataset(name, data_root=None)`` → (images N×C×H×W in [−1, 1], labels N)."""
    x, y = DATASETS.create(name, data_root=data_root, download=download)
    x = resize_to(x.float(), resolution)
    return x.contiguous(), y.long()
