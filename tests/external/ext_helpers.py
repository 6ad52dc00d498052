"""Helpers of the external-model tests: tiny diffusers UNets, record files, the CLI, a pickle payload."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch
from click.testing import CliRunner

from privbench.testing.ddpm import MEMORIZE_STEPS, digits_split, tiny_unet, train_memorizing_unet, write_npz

__all__ = ["MEMORIZE_STEPS", "digits_split", "tiny_unet", "train_memorizing_unet", "write_npz"]


def cli(*args):
    """Run the privbench CLI in-process; (exit code, stdout, stderr)."""
    from privbench.cli import main

    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


class _Payload:
    """Unpickling this runs ``open(marker, 'w')`` — the test proves it never happens."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def write_pickle_payload(path: Path, marker: Path, torch_format: bool = False) -> Path:
    obj = {"net_model": _Payload(marker), "ema_model": _Payload(marker)}
    if torch_format:
        torch.save(obj, path)
    else:
        with open(path, "wb") as fh:
            pickle.dump(obj, fh)
    return path


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).rglob("*"))


def write_fake_cifar10(root: Path, per_batch: int = 4, seed: int = 0) -> np.ndarray:
    """A tiny ``cifar-10-batches-py/`` in the python tarball's format (5 training batches of dict pickles,
    data = N×3072 uint8 as R, G, B planes); returns the training images N×3×32×32 in file order."""
    rng = np.random.default_rng(seed)
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    xs = []
    for b in range(1, 6):
        x = rng.integers(0, 256, size=(per_batch, 3, 32, 32), dtype=np.uint8)
        y = [int(v) for v in rng.integers(0, 10, size=per_batch)]
        with open(folder / f"data_batch_{b}", "wb") as fh:
            pickle.dump({"labels": y, "data": x.reshape(per_batch, 3072)}, fh, protocol=2)
        xs.append(x)
    with open(folder / "test_batch", "wb") as fh:
        pickle.dump({"labels": [0], "data": np.zeros((1, 3072), dtype=np.uint8)}, fh, protocol=2)
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)]}, fh, protocol=2)
    return np.concatenate(xs)
