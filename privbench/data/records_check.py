"""What can be refused about a records SPEC before anything imports torch: the path, the file's kind, and an image
array's dtype and shape from its header. The commands that read records call :func:`precheck_records` first;
:mod:`privbench.data.records_io` applies the same rules (:func:`check_image_array`) with the pixels at hand."""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from ..core.errors import BadInput
from ..core.jsonio import regular_file
from ..core.registry import has_entry

#: the channel counts an image array may have (gray, RGB, RGBA)
CHANNEL_COUNTS = (1, 3, 4)
SPLIT_KEYS = ("mia_train_idxs", "mia_eval_idxs")


def check_image_array(shape: tuple, dtype: np.dtype, spec) -> None:
    """Refuse an image array whose dtype or shape no records layout fits (uint8 N×H×W×C / N×C×H×W / N×H×W with a
    channel count 1, 3 or 4; float N×C×H×W, channels first); the one copy of these rules."""
    shape = tuple(int(s) for s in shape)
    if dtype == np.uint8:
        four = shape + (1,) if len(shape) == 3 else shape
        if len(four) != 4:
            raise BadInput(f"{spec}: uint8 images must be N×H×W×C, N×C×H×W or N×H×W, got shape {shape}")
        if four[-1] not in CHANNEL_COUNTS and four[1] not in CHANNEL_COUNTS:
            raise BadInput(f"{spec}: uint8 images must be N×H×W×C or N×C×H×W with C in 1, 3, 4; got shape {shape}")
        return
    if np.issubdtype(dtype, np.floating):
        if len(shape) != 4:
            raise BadInput(f"{spec}: float images must be N×C×H×W, got shape {shape}")
        if shape[1] not in CHANNEL_COUNTS and shape[-1] in CHANNEL_COUNTS:
            raise BadInput(f"{spec}: float images must be N×C×H×W (channels first), got {shape}; transpose them "
                           f"or store uint8 N×H×W×C")
        return
    raise BadInput(f"{spec}: images of dtype {dtype}: expected uint8 0..255 or float (--records-range)")


def _npy_header(fh) -> tuple[tuple, np.dtype]:
    version = np.lib.format.read_magic(fh)
    read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
    if read is None:
        raise ValueError(f"npy format version {version}")
    shape, _fortran, dtype = read(fh)
    return shape, dtype


def _npz_headers(path: Path) -> dict[str, tuple[tuple, np.dtype]]:
    """{array name: (shape, dtype)} of an .npz archive, from each member's .npy header."""
    out = {}
    try:
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if name.endswith(".npy"):
                    with z.open(name) as fh:
                        out[name[:-4]] = _npy_header(fh)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise BadInput(f"{path}: not a readable .npz without pickle ({type(e).__name__})") from None
    return out


def _check_npz(path: Path) -> None:
    arrays = _npz_headers(path)
    if "images" not in arrays:
        if all(k in arrays for k in SPLIT_KEYS):
            raise BadInput(f"{path}: is a member/held-out index file (mia_train_idxs/mia_eval_idxs): pass it as "
                           f"--split with --dataset and --data-root")
        raise BadInput(f"{path}: no 'images' array (it has: {', '.join(arrays) or 'nothing'})")
    shape, dtype = arrays["images"]
    if dtype.hasobject:
        raise BadInput(f"{path}: holds object arrays (pickled); only plain numeric arrays are read")
    check_image_array(shape, dtype, path)
    if "labels" in arrays:
        lshape, ldtype = arrays["labels"]
        if len(lshape) != 1 or lshape[0] != shape[0]:
            raise BadInput(f"{path}: labels must be a 1-D array of {shape[0]} entries, got shape {lshape}")
        if not np.issubdtype(ldtype, np.integer):
            raise BadInput(f"{path}: labels must be integers, got {ldtype}")
    if shape[0] == 0:
        raise BadInput(f"{path}: holds no records")


def precheck_records(spec) -> None:
    """Refuse a records SPEC that cannot load (one line, exit 2) without importing torch; the full read checks more."""
    if spec is None:
        return
    p = Path(spec)
    if not p.exists():
        raise BadInput(f"{spec}: no such file or directory")
    if p.is_dir():
        return
    regular_file(p, "records")
    if p.suffix == ".npz":
        _check_npz(p)
    elif p.suffix == ".npy":
        try:
            with open(p, "rb") as fh:
                shape, dtype = _npy_header(fh)
        except (OSError, ValueError, EOFError) as e:
            raise BadInput(f"{spec}: not a readable .npy without pickle ({type(e).__name__})") from None
        if len(shape) >= 3:  # images (as an .npz's); 1-D integers are dataset indices, read with the dataset
            check_image_array(shape, dtype, spec)
    else:
        raise BadInput(f"{spec}: expected an .npz or .npy of images, an image folder, or an .npy of dataset indices")


def is_records_path(value: str | None) -> bool:
    """Whether a ``--dataset`` value names the user's records (an existing .npz or folder), importing no dataset."""
    if not value or has_entry("DATASETS", value):
        return False
    p = Path(value)
    return p.suffix == ".npz" or p.is_dir() or "/" in value or "\\" in value
