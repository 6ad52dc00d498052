"""MNIST, CIFAR-10 and CelebA read from torchvision's own on-disk formats under a data root.

Each loader returns the train split as ``(images, labels)``: float32 N×C×H×W in [−1, 1] (x/127.5 − 1), native
size, in file order; a long tensor N. Nothing is cached on disk. Files: ``MNIST/raw/train-{images-idx3,labels-idx1}
-ubyte``; ``cifar-10-batches-py/data_batch_1..5`` (+ ``batches.meta``); ``celeba/img_align_celeba/*.jpg`` + the
five ``list_*.txt``/``identity_CelebA.txt`` files (label ``Male``).

Without ``download`` only the files' existence is checked (trimmed or re-packed copies load); with it torchvision's
md5 checks run and a mismatching file is fetched again. Every failure is one ``BadInput`` line.
"""
from __future__ import annotations

import os
import pickle
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision import datasets as tvd
from torchvision.datasets import cifar as tv_cifar
from torchvision.datasets.utils import check_integrity

from ..core.errors import BadInput

CELEBA_CROP = 140
CELEBA_SIZE = 64

_MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
_CIFAR_FILES = tuple(f for f, _ in tvd.CIFAR10.train_list) + (tvd.CIFAR10.meta["filename"],)
_CELEBA_TEXT = ("list_eval_partition.txt", "list_attr_celeba.txt", "identity_CelebA.txt",
                "list_bbox_celeba.txt", "list_landmarks_align_celeba.txt")  # torchvision reads all five


# ---------------------------------------------------------------------------------------------------- helpers


def _root(data_root) -> str:
    return os.path.abspath(os.path.expanduser(os.fspath(data_root)))


def _one_line(e: BaseException, limit: int = 240) -> str:
    s = " ".join(str(e).split()) or type(e).__name__
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _to_unit(x_uint8: torch.Tensor) -> torch.Tensor:
    """uint8 (any shape) → float32 in [−1, 1]."""
    return x_uint8.to(torch.float32).div_(127.5).sub_(1.0)


def _missing(folder: str, names) -> list[str]:
    return [n for n in names if not os.path.isfile(os.path.join(folder, n))]


def _not_found(root: str, what: str, expected: str, holds: str, extra: str = "") -> BadInput:
    where = "" if os.path.isdir(root) else " (the folder does not exist)"
    return BadInput(f"--data-root {root}{where}: no {what} files found (expected {expected}{extra}; "
                    f"--data-root is the folder that holds {holds}; add --download to fetch)")


def _download_failed(root: str, what: str, e: BaseException) -> BadInput:
    return BadInput(f"--data-root {root}: could not download {what} ({_one_line(e)}); "
                    f"fetch it by hand into {root} in torchvision's layout, then run without --download")


def _unreadable(root: str, what: str, where: str, e: BaseException) -> BadInput:
    return BadInput(f"--data-root {root}: cannot read the {what} files in {where} ({_one_line(e)})")


# ---------------------------------------------------------------------------------------------------- MNIST


class _MNIST(tvd.MNIST):
    """torchvision's MNIST; without download only the two train files we read must exist (MNIST has no md5)."""

    def __init__(self, root, download: bool):
        self._pb_download = bool(download)
        super().__init__(root, train=True, download=download)

    # torchvision derives the folder name from the class name; keep it "MNIST" for this subclass.
    @property
    def raw_folder(self) -> str:
        return os.path.join(self.root, "MNIST", "raw")

    @property
    def processed_folder(self) -> str:
        return os.path.join(self.root, "MNIST", "processed")

    def _check_exists(self) -> bool:
        if self._pb_download:
            return super()._check_exists()
        return not _missing(self.raw_folder, _MNIST_FILES)


def load_mnist(data_root, download: bool = False):
    """MNIST train split → (float32 N×1×28×28 in [−1, 1], long N digits), in file order."""
    root = _root(data_root)
    raw = os.path.join(root, "MNIST", "raw")
    legacy = all(os.path.isfile(os.path.join(root, "MNIST", "processed", f)) for f in ("training.pt", "test.pt"))
    if not download and not legacy and _missing(raw, _MNIST_FILES):
        gz = [f + ".gz" for f in _MNIST_FILES if os.path.isfile(os.path.join(raw, f + ".gz"))]
        extra = f"; found {', '.join(gz)}: --download extracts them" if gz else ""
        raise _not_found(root, "MNIST", f"{raw}/{_MNIST_FILES[0]} and {_MNIST_FILES[1]}", "MNIST/", extra)
    try:
        ds = _MNIST(root, download)
    except Exception as e:  # noqa: BLE001 - torchvision raises RuntimeError/URLError/AssertionError/...: one line, no traceback
        if download:
            raise _download_failed(root, "MNIST", e) from None
        raise _unreadable(root, "MNIST", raw, e) from None
    x, y = ds.data, ds.targets
    if x.dim() != 3 or tuple(x.shape[1:]) != (28, 28) or x.dtype != torch.uint8:
        raise BadInput(f"--data-root {root}: {raw}/{_MNIST_FILES[0]} holds {x.dtype} images of shape "
                       f"{tuple(x.shape[1:])}; MNIST needs uint8 28×28")
    if len(y) != len(x):
        raise BadInput(f"--data-root {root}: MNIST has {len(x)} train images but {len(y)} labels in {raw}")
    return _to_unit(x.unsqueeze(1)).contiguous(), y.to(torch.long).clone()


# ---------------------------------------------------------------------------------------------------- CIFAR-10


_RECONSTRUCT = np.zeros(1).__reduce__()[0]  # numpy's ndarray rebuild function, whatever its module is called


def _latin1_encode(text, encoding="utf-8"):
    """``_codecs.encode`` as protocol-2 pickles use it for bytes; only the latin-1 form they write is accepted."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"_codecs.encode({type(text).__name__}, {encoding!r}) is not allowed")
    return text.encode("latin-1")


class _ArrayUnpickler(pickle.Unpickler):
    """Reads the CIFAR-10 python batches (dicts of str / bytes / int lists and numpy arrays) without ever running
    code: unpickling may only build numpy arrays and dtypes; any other global is refused, so a crafted file under
    --data-root is an unreadable file, not a program (Python docs, "Restricting Globals")."""

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
                ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
                ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
                ("_codecs", "encode"): _latin1_encode}

    def find_class(self, module, name):
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} (only numpy arrays may be "
                                         "unpickled)") from None


def _read_cifar_batch(path: str) -> dict:
    with open(path, "rb") as f:
        d = _ArrayUnpickler(f, encoding="latin1").load()
    if not isinstance(d, dict) or "data" not in d or not ({"labels", "fine_labels"} & set(d)):
        raise ValueError(f"{os.path.basename(path)} is not a CIFAR batch (a dict with data and labels)")
    return d


def _download_cifar10(root: str) -> None:
    """torchvision's download: fetch and extract the archive (md5-checked) unless every batch's md5 matches."""
    folder = os.path.join(root, tvd.CIFAR10.base_folder)
    files = list(tvd.CIFAR10.train_list) + [(tvd.CIFAR10.meta["filename"], tvd.CIFAR10.meta["md5"])]
    if all(check_integrity(os.path.join(folder, f), md5) for f, md5 in files):
        return
    tv_cifar.download_and_extract_archive(tvd.CIFAR10.url, root, filename=tvd.CIFAR10.filename,
                                          md5=tvd.CIFAR10.tgz_md5)
    bad = [f for f, md5 in files if not check_integrity(os.path.join(folder, f), md5)]
    if bad:
        raise RuntimeError(f"{', '.join(bad)} do not match torchvision's md5 after the download")


def load_cifar10(data_root, download: bool = False):
    """CIFAR-10 train split (data_batch_1..5 in order) → (float32 N×3×32×32 in [−1, 1], long N classes)."""
    root = _root(data_root)
    folder = os.path.join(root, tvd.CIFAR10.base_folder)
    if not download:
        miss = _missing(folder, _CIFAR_FILES)
        if len(miss) == len(_CIFAR_FILES):
            tgz = os.path.join(root, tvd.CIFAR10.filename)
            extra = f"; found {tgz}: extract it there, or --download extracts it" if os.path.isfile(tgz) else ""
            raise _not_found(root, "CIFAR-10", f"{folder}/data_batch_1..5 and batches.meta", "cifar-10-batches-py/",
                             extra)
        if miss:
            raise BadInput(f"--data-root {root}: CIFAR-10 is incomplete: {folder} lacks {', '.join(miss)} "
                           f"(expected data_batch_1..5 and batches.meta; add --download to fetch)")
    if download:
        try:
            _download_cifar10(root)
        except Exception as e:  # noqa: BLE001 - any failure to read the files is one line (BadInput)
            raise _download_failed(root, "CIFAR-10", e) from None
    try:
        batches = [_read_cifar_batch(os.path.join(folder, f)) for f, _ in tvd.CIFAR10.train_list]
        x = np.concatenate([np.asarray(b["data"]) for b in batches])
        y = np.asarray([v for b in batches for v in b.get("labels", b.get("fine_labels"))], dtype=np.int64)
        x = np.ascontiguousarray(x.reshape(-1, 3, 32, 32))  # each row: the R plane, then G, then B
    except Exception as e:  # noqa: BLE001 - any failure to read the files is one line (BadInput)
        raise _unreadable(root, "CIFAR-10", folder, e) from None
    if x.dtype != np.uint8 or len(y) != len(x):
        raise BadInput(f"--data-root {root}: the CIFAR-10 batches in {folder} hold {len(x)} {x.dtype} images "
                       f"and {len(y)} labels; expected uint8 images, one label each")
    return _to_unit(torch.from_numpy(x)), torch.from_numpy(y)


# ---------------------------------------------------------------------------------------------------- CelebA


class _CelebA(tvd.CelebA):
    """torchvision's CelebA; without download the md5 checks become existence checks (same files, same folder)."""

    def __init__(self, root, download: bool):
        self._pb_download = bool(download)
        super().__init__(root, split="train", target_type="attr", download=download)

    def _check_integrity(self) -> bool:
        if self._pb_download:
            return super()._check_integrity()
        folder = os.path.join(self.root, self.base_folder)
        names = [f for _, _, f in self.file_list if os.path.splitext(f)[1] not in (".zip", ".7z")]
        return not _missing(folder, names) and os.path.isdir(os.path.join(folder, "img_align_celeba"))


def _center_crop(a: np.ndarray, size: int) -> np.ndarray:
    """H×W×C uint8 → size×size×C, the offsets of torchvision's center_crop (zero padding if too small)."""
    h, w = a.shape[:2]
    if h < size or w < size:
        ph, pw = max(size - h, 0), max(size - w, 0)
        a = np.pad(a, ((ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
        h, w = a.shape[:2]
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
    return a[top : top + size, left : left + size]


def _read_face(path: str) -> np.ndarray:
    with Image.open(path) as im:
        a = np.asarray(im.convert("RGB"))
    return _center_crop(a, CELEBA_CROP)


def load_celeba(data_root, download: bool = False, chunk: int = 1024):
    """CelebA train split (partition 0, in list_eval_partition order) → (float32 N×3×64×64 in [−1, 1], long N Male).

    Each aligned 178×218 face is center-cropped to 140×140 and resized to 64×64 (bilinear, antialiased, rounded back
    to the uint8 grid as a PIL/torchvision resize would)."""
    root = _root(data_root)
    folder = os.path.join(root, tvd.CelebA.base_folder)
    img_dir = os.path.join(folder, "img_align_celeba")
    layout = f"{img_dir}/*.jpg and {', '.join(_CELEBA_TEXT)} in {folder}"
    if not download:
        miss = _missing(folder, _CELEBA_TEXT) + ([] if os.path.isdir(img_dir) else ["img_align_celeba/"])
        if len(miss) == len(_CELEBA_TEXT) + 1:
            z = os.path.join(folder, "img_align_celeba.zip")
            extra = f"; found {z}: extract it there" if os.path.isfile(z) else ""
            raise _not_found(root, "CelebA", layout, "celeba/", extra)
        if miss:
            raise BadInput(f"--data-root {root}: CelebA is incomplete: {folder} lacks {', '.join(miss)} "
                           f"(expected {layout}; add --download to fetch)")
    try:
        ds = _CelebA(root, download)
    except Exception as e:  # noqa: BLE001 - any failure to read the files is one line (BadInput)
        if download:
            raise _download_failed(root, "CelebA", e) from None
        raise _unreadable(root, "CelebA", folder, e) from None
    if "Male" not in ds.attr_names:
        raise BadInput(f"--data-root {root}: {folder}/list_attr_celeba.txt has no 'Male' column "
                       f"(its header line is the second line of the file)")
    n = len(ds.filename)
    if n == 0:
        raise BadInput(f"--data-root {root}: {folder}/list_eval_partition.txt lists no train images (partition 0)")
    if ds.attr.dim() != 2 or ds.attr.shape[0] != n:
        raise BadInput(f"--data-root {root}: {folder}/list_attr_celeba.txt has {ds.attr.shape[0]} rows for "
                       f"{n} train images; the list files must cover the same images in the same order")
    y = ds.attr[:, ds.attr_names.index("Male")].to(torch.long).clone()

    paths = [os.path.join(img_dir, f) for f in ds.filename]
    out = torch.empty(n, 3, CELEBA_SIZE, CELEBA_SIZE, dtype=torch.float32)
    workers = min(16, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:  # PIL decodes outside the GIL
        for s in range(0, n, chunk):
            part = paths[s : s + chunk]
            try:
                faces = list(pool.map(_read_face, part))
            except Exception as e:  # noqa: BLE001 - any failure to read the files is one line (BadInput)
                raise BadInput(f"--data-root {root}: cannot read a CelebA image in {img_dir} ({_one_line(e)})") \
                    from None
            x = torch.from_numpy(np.stack(faces)).permute(0, 3, 1, 2).to(torch.float32)  # B×3×140×140, 0..255
            x = F.interpolate(x, size=(CELEBA_SIZE, CELEBA_SIZE), mode="bilinear", antialias=True,
                              align_corners=False)
            out[s : s + len(part)] = x.round_().clamp_(0, 255).div_(127.5).sub_(1.0)
    return out, y
