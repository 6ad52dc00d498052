"""Records under test brought by the user: ``.npz`` arrays, image folders, or indices into a registered dataset.

The SPEC formats, pixel ranges, the PIA/SecMI split file and how records are fitted to the model:
docs/external-models.md, "On the command line". Arrays are read with ``allow_pickle=False``; an ``.npz`` may carry
unicode ``captions`` (:mod:`.captions`). Dataset indices are in privbench's fixed order (CIFAR-10: the order of
``data_batch_1..5``, which the PIA/SecMI index files refer to).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..core.errors import BadInput
from ..core.jsonio import regular_file
from .base import load_dataset
from .captions import folder_captions, npz_captions
from .image_range import dataset_range, decode_images, eight_bit_range, grid_digests

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
#: the largest factor records are upscaled by to the model's side (beyond it scores describe the resize)
MAX_UPSCALE = 4
SPLIT_KEYS = ("mia_train_idxs", "mia_eval_idxs")


def _fail(spec, what: str) -> BadInput:
    return BadInput(f"{spec}: {what}")


# ---------------------------------------------------------------------- readers

def _read_npz(path: Path, records_range: str = "auto", want_channels: int | None = None
              ) -> tuple[torch.Tensor, torch.Tensor | None, dict]:
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise _fail(path, f"not a readable .npz without pickle ({type(e).__name__})") from None
    with z:
        if not hasattr(z, "files"):
            raise _fail(path, "expected an .npz archive with an 'images' array")
        if "images" not in z.files:
            if all(k in z.files for k in SPLIT_KEYS):
                raise _fail(path, "is a member/held-out index file (mia_train_idxs/mia_eval_idxs): pass it as "
                                  "--split with --dataset and --data-root")
            raise _fail(path, f"no 'images' array (it has: {', '.join(z.files) or 'nothing'})")
        try:
            images = z["images"]
            labels = z["labels"] if "labels" in z.files else None
        except ValueError:
            raise _fail(path, "holds object arrays (pickled); only plain numeric arrays are read") from None
        captions = npz_captions(z, len(images), path)
    x, layout, rng = decode_images(images, path, records_range, want_channels)
    y = None
    if labels is not None:
        if labels.ndim != 1 or len(labels) != len(x):
            raise _fail(path, f"labels must be a 1-D array of {len(x)} entries, got shape {labels.shape}")
        if not np.issubdtype(labels.dtype, np.integer):
            raise _fail(path, f"labels must be integers, got {labels.dtype}")
        y = torch.from_numpy(labels.astype(np.int64))
    prov = {"kind": "npz", "layout": layout, **rng}
    if captions is not None:
        prov["captions"] = captions  # popped by the caller (runs.external.RecordSet), never written as provenance
    return x, y, prov


def _pil_to_array(path: Path, want_channels: int | None) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError  # lazy: PIL only for image files

    try:
        with Image.open(path) as im:
            im.load()
            mode = im.mode
            if mode in ("1", "L", "I;16", "I", "F"):
                if mode in ("I;16", "I", "F"):
                    raise _fail(path, f"{mode} images (more than 8 bits) are not read; save 8-bit png/jpg")
                gray = np.asarray(im.convert("L"))
                if want_channels == 3:
                    return np.repeat(gray[..., None], 3, axis=2)
                return gray[..., None]
            if mode in ("RGBA", "LA", "P", "PA"):
                rgba = np.asarray(im.convert("RGBA"))
                if (rgba[..., 3] != 255).any():
                    raise _fail(path, "has transparent pixels; flatten it onto a background first")
                rgb = rgba[..., :3]
            else:
                rgb = np.asarray(im.convert("RGB"))
    except Image.DecompressionBombError as e:  # PIL's bound on pixels per image (a few-KB file, gigapixels)
        raise _fail(path, f"refused as a decompression bomb ({' '.join(str(e).split())[:120]})") from None
    except (OSError, UnidentifiedImageError) as e:
        raise _fail(path, f"not a readable image ({type(e).__name__})") from None
    if want_channels == 1:
        if not ((rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all()):
            raise _fail(path, "is a colour image and the model has 1 channel; refusing to convert colour to gray")
        return rgb[..., :1]
    return rgb


def _list_images(folder: Path) -> list[Path]:
    return sorted(f for f in folder.iterdir() if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES)


def _read_folder(folder: Path, want_channels: int | None, size: tuple[int, int] | None, records_range: str = "auto"):
    rng = eight_bit_range(folder, records_range)
    top = _list_images(folder)
    classes = sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    per_class = {c: _list_images(folder / c) for c in classes}
    per_class = {c: v for c, v in per_class.items() if v}
    if top and per_class:
        raise _fail(folder, "holds images both at the top level and in class sub-folders; use one layout")
    if not top and not per_class:
        raise _fail(folder, "no png/jpg images found (directly or in class sub-folders)")
    files, labels = (top, None) if top else ([], [])
    if per_class:
        names = sorted(per_class)
        for i, c in enumerate(names):
            files += per_class[c]
            labels += [i] * len(per_class[c])
    arrays, resized = [], 0
    for f in files:
        a = _pil_to_array(f, want_channels)
        t = torch.from_numpy(np.array(a, dtype=np.float32)).permute(2, 0, 1).div_(127.5).sub_(1.0)
        if size is not None and tuple(t.shape[1:]) != size:
            t = _resize(t[None], size, f)[0]
            resized += 1
        arrays.append(t)
    shapes = {tuple(a.shape) for a in arrays}
    if len(shapes) > 1:
        raise _fail(folder, f"images of different sizes/channels {sorted(shapes)[:3]}; give the model's size")
    x = torch.stack(arrays)
    y = torch.as_tensor(labels, dtype=torch.long) if labels is not None else None
    prov = {"kind": "image-folder", "layout": "8-bit pixels, x/127.5 - 1", "files": len(files), **rng}
    if per_class:
        prov["classes"] = {c: i for i, c in enumerate(sorted(per_class))}
    if resized:
        prov["resized_files"] = resized
    captions = folder_captions(folder, files)
    if captions is not None:
        prov["captions"] = captions  # metadata.jsonl (popped by the caller, as for .npz)
    return x, y, prov


def _read_npy(path: Path, dataset: str | None, data_root, records_range: str, want_channels: int | None):
    """An .npy of images (3-D or 4-D, as an .npz's ``images``; no labels) or of integer dataset indices (1-D)."""
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise _fail(path, f"not a readable .npy without pickle ({type(e).__name__})") from None
    if arr.ndim >= 3:
        x, layout, rng = decode_images(arr, path, records_range, want_channels)
        return x, None, {"kind": "npy-images", "layout": layout, **rng}
    if not dataset:
        raise _fail(path, "an .npy of indices needs --dataset (and --data-root for torchvision datasets)")
    x, y, prov = dataset_records(arr, dataset, data_root, str(path))
    return x, y, {**prov, **dataset_range(path, records_range)}


def dataset_records(idx, dataset: str, data_root, where: str, data=None):
    """(x, y, provenance) of the given indices of a registered dataset (native size); ``data``: its (x, y) if loaded."""
    idx = np.asarray(idx)
    if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
        raise BadInput(f"{where}: expected a 1-D array of integer dataset indices, got {idx.dtype} {idx.shape}")
    x, y = data if data is not None else load_dataset(dataset, data_root or None)
    if len(idx) and (idx.min() < 0 or idx.max() >= len(y)):
        raise BadInput(f"{where}: indices must lie in [0, {len(y)}) for dataset {dataset} "
                       f"(found {int(idx.min())}..{int(idx.max())})")
    t = torch.as_tensor(idx.astype(np.int64))
    return x[t], y[t], {"kind": "dataset-indices", "dataset": dataset, "index": t.tolist(),
                        **dataset_range(where, "auto")}


def read_split(path, *, what: str = "--split") -> tuple[np.ndarray, np.ndarray]:
    """(member indices, non-member indices) of a PIA/SecMI split file (``mia_train_idxs`` / ``mia_eval_idxs``)."""
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"{what} {path}: no such file")
    try:
        z = np.load(p, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise BadInput(f"{what} {path}: not a readable .npz without pickle ({type(e).__name__})") from None
    with z:
        if not hasattr(z, "files") or any(k not in z.files for k in SPLIT_KEYS):
            have = ", ".join(getattr(z, "files", [])) or "nothing"
            raise BadInput(f"{what} {path}: expected arrays mia_train_idxs (members) and mia_eval_idxs "
                           f"(non-members), as SecMI's member_splits files; it has: {have}")
        try:
            mem, non = np.asarray(z["mia_train_idxs"]), np.asarray(z["mia_eval_idxs"])
        except (OSError, ValueError, EOFError) as e:  # an object array (pickled) or a corrupt member
            raise BadInput(f"{what} {path}: not plain integer arrays without pickle ({type(e).__name__})") from None
    for name, a in (("mia_train_idxs", mem), ("mia_eval_idxs", non)):
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer) or len(a) == 0:
            raise BadInput(f"{what} {path}: {name} must be a non-empty 1-D integer array")
    return mem.astype(np.int64), non.astype(np.int64)


# ---------------------------------------------------------------------- fitting to the model

def _resize(x: torch.Tensor, size: tuple[int, int], spec) -> torch.Tensor:
    h, w = x.shape[-2:]
    if h != w or size[0] != size[1]:
        raise _fail(spec, f"images are {h}×{w}, the model takes {size[0]}×{size[1]}; only square images are "
                          f"resized (a non-square resize would distort them)")
    if size[0] > MAX_UPSCALE * h:
        raise _fail(spec, f"records are {h}x{w}, the model takes {size[0]}x{size[1]}: privbench upscales records "
                          f"at most {MAX_UPSCALE}x (scores on upscaled records say little about the model); bring "
                          f"records of the model's size")
    return F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False).clamp(-1, 1)


def fit_to_model(x: torch.Tensor, image_shape, spec, prov: dict) -> torch.Tensor:
    """Records with the model's channels and side, or BadInput."""
    if image_shape is None:
        return x
    c, h, w = (int(s) for s in image_shape)
    if x.shape[1] != c:
        hint = "; float images must be N×C×H×W (channels first)" if x.shape[-1] == c else ""
        raise _fail(spec, f"records have {x.shape[1]} channels, the model takes {c}{hint}")
    if tuple(x.shape[2:]) != (h, w):
        prov["resized"] = f"{x.shape[2]}x{x.shape[3]} -> {h}x{w} (bilinear, antialiased)"
        x = _resize(x, (h, w), spec)
    return x


def load_records(spec, *, image_shape=None, dataset: str | None = None, data_root=None, records_range: str = "auto"):
    """(images N×C×H×W in [−1, 1], labels or None, provenance) of one SPEC (``records_range``: :mod:`.image_range`)."""
    p = Path(spec)
    if not p.exists():
        raise _fail(spec, "no such file or directory")
    want_c = int(image_shape[0]) if image_shape is not None else None
    size = (int(image_shape[1]), int(image_shape[2])) if image_shape is not None else None
    if not p.is_dir():
        regular_file(p, "records")  # a FIFO named members.npz would block the read forever
    if p.is_dir():
        x, y, prov = _read_folder(p, want_c, size, records_range)
    elif p.suffix == ".npz":
        x, y, prov = _read_npz(p, records_range, want_c)
    elif p.suffix == ".npy":
        x, y, prov = _read_npy(p, dataset, data_root, records_range, want_c)
    else:
        raise _fail(spec, "expected an .npz or .npy of images, an image folder, or an .npy of dataset indices")
    if len(x) == 0:
        raise _fail(spec, "holds no records")
    if x.dim() != 4 or 0 in x.shape[1:]:
        raise _fail(spec, f"images of shape {list(x.shape[1:])} hold no pixels")
    prov = {"spec": str(spec), **prov, "n": int(len(x)), "source_shape": list(x.shape[1:])}
    x = fit_to_model(x.float().contiguous(), image_shape, spec, prov)
    return x.contiguous(), y, prov


def repeated_count(x: torch.Tensor, index=None) -> int:
    """How many records of one set repeat an earlier one: the same dataset index, or the same pixels on the 8-bit
    grid (a record counted twice would count twice in every rate and interval)."""
    repeated: set[int] = set()
    for keys in (grid_digests(x), None if index is None else np.asarray(index).tolist()):
        seen: set = set()
        for i, k in enumerate(keys or ()):
            if k in seen:
                repeated.add(i)
            seen.add(k)
    return len(repeated)


def shared_count(members: torch.Tensor, nonmembers: torch.Tensor, mem_index=None, non_index=None) -> int:
    """How many member records also appear among the non-members: same dataset index, or the same pixels on the
    8-bit grid (:func:`~privbench.data.image_range.grid_digests`), so a re-encoded copy is found too."""
    non = set(grid_digests(nonmembers))
    shared = {i for i, d in enumerate(grid_digests(members)) if d in non}
    if mem_index is not None and non_index is not None:
        ni = set(np.asarray(non_index).tolist())
        shared |= {i for i, v in enumerate(np.asarray(mem_index).tolist()) if v in ni}
    return len(shared)


def records_sha256(*tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        if t is None:
            h.update(b"none")
            continue
        a = t.detach().cpu().contiguous()
        h.update(f"{a.dtype}|{tuple(a.shape)}".encode())
        h.update(a.numpy().tobytes())
    return h.hexdigest()
