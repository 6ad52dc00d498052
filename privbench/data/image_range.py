"""The pixel range of records brought by the user, and their conversion to the model's [−1, 1].

``--records-range`` (``auto``, ``-1:1``, ``0:1``, ``0:255``), how ``auto`` decides and the same-encoding rule:
docs/external-models.md, "Pixel range".
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch

from ..core.errors import BadInput
from .records_check import CHANNEL_COUNTS, check_image_array

RANGES = ("auto", "-1:1", "0:1", "0:255")
#: slack on the range bounds (float rounding of a rescaled image)
TOLERANCE = 1e-4
#: under ``auto``, float records whose maximum is below this are not taken for 8-bit values: real 8-bit images
#: that dark are rare, while a 0..16 or 0..100 scale read as 0..255 would hide a memorising model's leak
EIGHT_BIT_MIN_MAX = 128.0


def check_range_name(records_range) -> str:
    if records_range not in RANGES:
        raise BadInput(f"--records-range {records_range!r}: choose one of {', '.join(RANGES)}")
    return records_range


def _uint8_layout(images: np.ndarray, spec, want_channels: int | None) -> str:
    """"NHWC" or "NCHW" of a 4-D uint8 array, from where a channel count (1, 3, 4) sits; BadInput if neither."""
    last, first = images.shape[-1] in CHANNEL_COUNTS, images.shape[1] in CHANNEL_COUNTS
    if last and first and want_channels is not None:  # e.g. 3×3×3: the model's channel count decides
        last = images.shape[-1] == want_channels
        first = not last and images.shape[1] == want_channels
    if last:
        return "NHWC"
    if first:
        return "NCHW"
    raise BadInput(f"{spec}: uint8 images must be N×H×W×C or N×C×H×W with C in 1, 3, 4; got shape "
                   f"{images.shape}")


def _decode_uint8(images: np.ndarray, spec, records_range: str, want_channels: int | None):
    if records_range not in ("auto", "0:255"):
        raise BadInput(f"{spec}: uint8 images hold 0..255; --records-range {records_range} does not apply to them")
    if images.ndim == 3:
        images = images[..., None]
    layout = _uint8_layout(images, spec, want_channels)
    t = torch.from_numpy(np.ascontiguousarray(images))
    if layout == "NHWC":
        t = t.permute(0, 3, 1, 2)
    x = t.float().div_(127.5).sub_(1.0)
    return x, f"uint8 {'×'.join(layout)}, x/127.5 - 1", {"range": "0:255", "encoding": "uint8",
                                                       "range_basis": "uint8"}


def infer_float_range(lo: float, hi: float, spec) -> str:
    """The range of float records whose values span [lo, hi], or BadInput."""
    if lo < -TOLERANCE:
        if lo >= -1 - TOLERANCE and hi <= 1 + TOLERANCE:
            return "-1:1"
    elif hi <= 1 + TOLERANCE:
        raise BadInput(f"{spec}: float images all lie in [0, 1] (found [{lo:.3g}, {hi:.3g}]): [0, 1] records (as "
                       f"torchvision's ToTensor gives) or [-1, 1] records without a negative pixel cannot be told "
                       f"apart; give --records-range 0:1 or -1:1")
    elif hi < EIGHT_BIT_MIN_MAX:
        raise BadInput(f"{spec}: float images span [{lo:.3g}, {hi:.3g}]: above [0, 1] but with no value near 8-bit "
                       f"white (max < {EIGHT_BIT_MIN_MAX:g}), so not read as 0..255 (sklearn's raw digits are 0..16: "
                       f"divide by 16 and give --records-range 0:1); if they are 8-bit values, give --records-range "
                       f"0:255")
    elif hi <= 255 + TOLERANCE:
        return "0:255"
    raise BadInput(f"{spec}: float images span [{lo:.3g}, {hi:.3g}], inside none of [-1, 1], [0, 1], [0, 255]; "
                   f"rescale them")


def _decode_float(images: np.ndarray, spec, records_range: str):
    x = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32))
    if not bool(torch.isfinite(x).all()):
        raise BadInput(f"{spec}: images hold NaN or infinite values")
    lo, hi = (float(x.min()), float(x.max())) if x.numel() else (0.0, 0.0)
    if records_range == "auto":
        rng, basis = infer_float_range(lo, hi, spec), f"inferred from the values [{lo:.3g}, {hi:.3g}]"
    else:
        rng, basis = records_range, "declared (--records-range)"
        a, b = (float(v) for v in rng.split(":"))
        if lo < a - TOLERANCE * max(1.0, b) or hi > b + TOLERANCE * max(1.0, b):
            raise BadInput(f"{spec}: --records-range {rng} but the float images span [{lo:.3g}, {hi:.3g}]")
    if rng == "0:1":
        x = x.mul_(2.0).sub_(1.0)
    elif rng == "0:255":
        x = x.div_(127.5).sub_(1.0)
    x = x.clamp_(-1.0, 1.0)
    how = {"-1:1": "as given", "0:1": "2x - 1", "0:255": "x/127.5 - 1"}[rng]
    return x, f"float N×C×H×W in [{rng.replace(':', ', ')}], {how}", {"range": rng, "encoding": "float",
                                                                       "range_basis": basis}


def decode_images(images: np.ndarray, spec, records_range: str = "auto", want_channels: int | None = None):
    """(x N×C×H×W float32 in [−1, 1], layout text, range provenance) of an image array (uint8 or float)."""
    check_range_name(records_range)
    check_image_array(images.shape, images.dtype, spec)
    if images.dtype == np.uint8:
        return _decode_uint8(images, spec, records_range, want_channels)
    return _decode_float(images, spec, records_range)


def eight_bit_range(spec, records_range: str) -> dict:
    """The range provenance of 8-bit image files (always 0..255); a declared other range is BadInput."""
    if check_range_name(records_range) not in ("auto", "0:255"):
        raise BadInput(f"{spec}: image files hold 8-bit pixels (0..255); --records-range {records_range} does not "
                       f"apply to them")
    return {"range": "0:255", "encoding": "uint8", "range_basis": "8-bit image files"}


def dataset_range(spec, records_range: str) -> dict:
    """The range provenance of a registered dataset's records (privbench's loader gives [−1, 1])."""
    if check_range_name(records_range) not in ("auto", "-1:1"):
        raise BadInput(f"{spec}: dataset indices select privbench's own [-1, 1] records; --records-range "
                       f"{records_range} does not apply to them")
    return {"range": "-1:1", "encoding": "dataset", "range_basis": "privbench's dataset loader"}


def check_same_encoding(mem_prov: dict, non_prov: dict) -> dict:
    """BadInput unless members and non-members share range and encoding; returns their common range record."""
    a = (mem_prov.get("range"), mem_prov.get("encoding"))
    b = (non_prov.get("range"), non_prov.get("encoding"))
    if a != b:
        raise BadInput(f"members ({mem_prov.get('spec')}: {a[1]} in {a[0]}) and non-members "
                       f"({non_prov.get('spec')}: {b[1]} in {b[0]}) are encoded differently; a set scaled or "
                       f"quantised differently from the other is told apart without the model: bring both the same "
                       f"way")
    return {"range": a[0], "encoding": a[1], "members": mem_prov.get("range_basis"),
            "nonmembers": non_prov.get("range_basis")}


def grid_digests(x: torch.Tensor) -> list[bytes]:
    """One digest per record of [−1, 1] images on the 8-bit grid (round((x + 1)·127.5)), whatever their encoding."""
    q = torch.round((x.detach().to("cpu", torch.float64) + 1.0) * 127.5).clamp_(0, 255).to(torch.uint8)
    return [hashlib.sha256(r.tobytes()).digest() for r in q.contiguous().numpy()]
