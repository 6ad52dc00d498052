"""Datasets as (images N×C×H×W float32 in [−1, 1], labels N long), in a fixed order.

Each dataset is one file in ``privbench/data/datasets/`` that registers its loader together with its info
(channels, size, classes, its extractor split) with :func:`register_dataset`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from ..core.errors import BadInput
from ..core.registry import DATASETS
from .splits import reserved_split


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    channels: int
    size: int
    num_classes: int
    #: records per class of the extractor split (:func:`extractor_split`; docs/methods.md §0); 0 = none
    extractor_per_class: int = 0


@dataclass(frozen=True)
class Dataset:
    """A registered dataset: its shape/classes and the loader ``(data_root, download) -> (images, labels)``."""
    info: DatasetInfo
    loader: Callable


def register_dataset(name: str, channels: int, size: int, num_classes: int, description: str,
                     extractor_per_class: int = 0):
    """Decorator for a loader ``(data_root=None, download=False) -> (images N×C×H×W in [−1, 1], labels N)``:
    registers it with its info under ``name`` (one file per dataset in privbench/data/datasets/)."""
    def deco(loader: Callable) -> Callable:
        info = DatasetInfo(name, channels, size, num_classes, extractor_per_class)
        DATASETS.add(name, Dataset(info, loader), description)
        return loader
    return deco


def dataset_info(name: str) -> DatasetInfo:
    return DATASETS.get(name).factory.info


def extractor_split(name: str, labels) -> list[int]:
    """The records dataset ``name`` reserves for its feature extractor, sorted ([] when none; docs/methods.md §0)."""
    labels = labels.numpy() if isinstance(labels, torch.Tensor) else labels
    return reserved_split(labels, dataset_info(name).extractor_per_class, name)


def need_root(name: str, data_root) -> str:
    if not data_root:
        raise BadInput(f"--data-root is required for dataset {name!r} (torchvision format; add --download to fetch)")
    return data_root


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
    x, y = DATASETS.get(name).factory.loader(data_root=data_root, download=download)
    x = resize_to(x.float(), resolution)
    return x.contiguous(), y.long()
