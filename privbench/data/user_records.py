"""The user's own records as a dataset: ``--dataset PATH`` (docs/cli.md §2).

The records are read once (records_io) and registered for this process under a content-addressed name,
``records-<12 hex of the sha256 of the pixels and labels>``. Records without labels are one class (label 0);
otherwise the classes are the largest label + 1.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..core.errors import BadInput
from ..core.registry import DATASETS
from .base import Dataset, DatasetInfo
from .records_check import is_records_path  # noqa: F401 - the CLI's --dataset PATH test, imported from here too
from .records_io import load_records, records_sha256

PREFIX = "records-"
_PATHS: dict[str, str] = {}  # dataset name -> the path it was registered from, in this process


def registered_paths() -> dict[str, str]:
    """The user's records registered in this process (name -> path): what a worker process registers again."""
    return dict(_PATHS)


def register_records(path: str) -> str:
    """Read ``path``, register its records as a dataset of this process; returns the dataset's name."""
    p = Path(path)
    if p.suffix == ".npy":
        raise BadInput(f"--dataset {path}: an .npy of indices needs a dataset to index; give an .npz of images "
                       "or an image folder")
    x, y, _prov = load_records(p)
    if x.shape[-1] != x.shape[-2]:
        raise BadInput(f"--dataset {path}: records of {x.shape[-2]}×{x.shape[-1]} pixels; the UNet needs square "
                       "images")
    y = torch.zeros(len(x), dtype=torch.long) if y is None else torch.as_tensor(y).long()
    if len(y) != len(x) or (len(y) and int(y.min()) < 0):
        raise BadInput(f"--dataset {path}: labels must be one non-negative integer per record")
    name = PREFIX + records_sha256(x, y)[:12]
    if name not in DATASETS:
        x, y = x.contiguous(), y.contiguous()
        info = DatasetInfo(name, int(x.shape[1]), int(x.shape[-1]), int(y.max()) + 1 if len(y) else 1)

        def loader(data_root=None, download=False):
            del data_root, download  # the dataset loader interface (register_dataset); the records are in memory
            return x.clone(), y.clone()

        DATASETS.add(name, Dataset(info, loader),
                     f"the user's records from {p.name} ({len(x)} records, {x.shape[1]}×{x.shape[2]}×{x.shape[3]}, "
                     f"{info.num_classes} classes)")
    _PATHS.setdefault(name, str(p.resolve()))
    return name
