"""Captions of records under test, for text-to-image targets: an ``.npz`` ``captions`` array, a folder's
``metadata.jsonl`` (Hugging Face ``imagefolder``: ``file_name``, ``text``; one line per image) or ``--caption
TEMPLATE`` (docs/external-models.md, "Records with captions"). An ``S…`` (UTF-8 bytes) array is decoded;
``file_name`` is relative to the folder; ``{word}`` past nine is the number, ``{name}`` without folders the label.

Every caption is at most :data:`MAX_CAPTION_CHARS` characters, checked before the text exists where it can be: an
``.npz`` array's width from its header (a unicode array is as wide as its longest entry, so one huge caption makes
the whole array huge), a template from its format specs' widths and precisions.
"""
from __future__ import annotations

import json
import re
import string
from pathlib import Path

import numpy as np

from ..core.errors import BadInput

MAX_METADATA_BYTES = 64 << 20
MAX_CAPTION_CHARS = 10_000
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
TEMPLATE_FIELDS = ("label", "word", "name")


def _npy_header(z, name: str, path) -> tuple[tuple, np.dtype]:
    """(shape, dtype) of array ``name`` of an open ``.npz``, from its header alone (no data read)."""
    try:
        with z.zip.open(f"{name}.npy") as fh:
            version = np.lib.format.read_magic(fh)
            read = {(1, 0): np.lib.format.read_array_header_1_0,
                    (2, 0): np.lib.format.read_array_header_2_0}.get(version)
            if read is None:
                raise BadInput(f"{path}: {name} is in .npy format version {version[0]}.{version[1]}; a plain "
                               f"unicode array is written in 1.0")
            shape, _, dtype = read(fh)
    except BadInput:
        raise
    except (OSError, ValueError, KeyError) as e:
        raise BadInput(f"{path}: {name} has no readable .npy header ({type(e).__name__})") from None
    return shape, dtype


def npz_captions(z, n: int, path) -> list[str] | None:
    """The ``captions`` array of an open ``.npz`` (None when absent), its shape and width checked from the header."""
    if "captions" not in z.files:
        return None
    shape, dtype = _npy_header(z, "captions", path)
    if dtype.hasobject:
        raise BadInput(f"{path}: captions is an object (pickled) array; store a NumPy unicode array "
                       f"(np.array(list_of_str)) instead")
    if dtype.kind not in "US" or len(shape) != 1:
        raise BadInput(f"{path}: captions must be a 1-D unicode array, got {dtype} {shape}")
    if shape[0] != n:
        raise BadInput(f"{path}: {shape[0]} captions for {n} images")
    # U: 4 bytes per character, as wide as the longest caption; S: UTF-8 bytes, up to 4 per character
    width = dtype.itemsize // 4 if dtype.kind == "U" else dtype.itemsize
    if width > (MAX_CAPTION_CHARS if dtype.kind == "U" else 4 * MAX_CAPTION_CHARS):
        raise BadInput(f"{path}: captions array of {dtype} holds captions of up to {width:,} "
                       f"{'characters' if dtype.kind == 'U' else 'bytes'}; a caption is limited to "
                       f"{MAX_CAPTION_CHARS:,} characters")
    a = z["captions"]
    if a.dtype.kind == "S":
        try:
            a = np.char.decode(a, "utf-8")
        except UnicodeDecodeError:
            raise BadInput(f"{path}: captions are bytes that are not UTF-8") from None
    out = [str(c) for c in a]
    for i, c in enumerate(out):
        check_length(c, f"{path}: caption {i}")
    return out


def check_length(caption: str, where: str) -> str:
    """``caption``, or BadInput when it is longer than :data:`MAX_CAPTION_CHARS`."""
    if len(caption) > MAX_CAPTION_CHARS:
        raise BadInput(f"{where}: {len(caption):,} characters; a caption is limited to {MAX_CAPTION_CHARS:,}")
    return caption


def folder_captions(folder: Path, files: list[Path]) -> list[str] | None:
    """Captions of ``files`` from ``folder/metadata.jsonl`` (None when the folder has none)."""
    meta = folder / "metadata.jsonl"
    if not meta.is_file():
        return None
    if meta.stat().st_size > MAX_METADATA_BYTES:
        raise BadInput(f"{meta}: larger than {MAX_METADATA_BYTES >> 20} MiB")
    by_name: dict[str, str] = {}
    try:
        lines = meta.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{meta}: not a readable UTF-8 file ({type(e).__name__})") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError:
            raise BadInput(f"{meta}:{i}: not a JSON object") from None
        if not isinstance(d, dict) or not isinstance(d.get("file_name"), str) or not isinstance(d.get("text"), str):
            raise BadInput(f"{meta}:{i}: needs string keys file_name and text")
        if d["file_name"] in by_name:
            raise BadInput(f"{meta}:{i}: {d['file_name']} has a second caption")
        by_name[d["file_name"]] = check_length(d["text"], f"{meta}:{i}: text")
    names = [str(f.relative_to(folder)) for f in files]
    missing = [nm for nm in names if nm not in by_name]
    if missing:
        raise BadInput(f"{meta}: no caption for {len(missing)} of {len(names)} images (e.g. {missing[0]})")
    return [by_name[nm] for nm in names]


def check_template(template: str) -> str:
    """The template, or BadInput for a field it cannot fill or a format spec (width, precision, nested field) that
    could exceed :data:`MAX_CAPTION_CHARS`."""
    shown = template if len(template) <= 80 else template[:77] + "..."
    if len(template) > MAX_CAPTION_CHARS:
        raise BadInput(f"--caption {shown!r}: {len(template):,} characters; a caption is limited to "
                       f"{MAX_CAPTION_CHARS:,}")
    try:
        parts = [(f, spec or "") for _, f, spec, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise BadInput(f"--caption {shown!r}: not a format template ({e})") from None
    bad = [f for f, _ in parts if f not in TEMPLATE_FIELDS]
    if bad:
        raise BadInput(f"--caption {shown!r}: unknown field {{{bad[0]}}}; use {{label}}, {{word}} or {{name}}")
    for f, spec in parts:
        if "{" in spec:
            raise BadInput(f"--caption {shown!r}: {{{f}}} takes its format from another field; write the width "
                           f"or precision as a number")
        # every number of a spec is a width, a precision or a digit fill character: none may exceed the cap
        if any(int(d) > MAX_CAPTION_CHARS for d in re.findall(r"\d+", spec)):
            raise BadInput(f"--caption {shown!r}: {{{f}:{spec}}} pads or cuts beyond {MAX_CAPTION_CHARS:,} "
                           f"characters, the limit of a caption")
    return template


def template_captions(template: str, labels, class_names: dict | None = None, where: str = "records") -> list[str]:
    """One caption per label from ``template`` (``{label}``, ``{word}``, ``{name}``)."""
    check_template(template)
    if labels is None:
        raise BadInput(f"--caption {template!r}: {where} have no labels to fill it with (give captions instead)")
    names = {v: k for k, v in (class_names or {}).items()}
    out = []
    for lab in (int(v) for v in labels):
        word = NUMBER_WORDS[lab] if 0 <= lab < 10 else str(lab)
        try:
            text = template.format(label=lab, word=word, name=names.get(lab, str(lab)))
        except ValueError as e:  # a spec the value's type does not take ({word:d}, {label:.3s})
            raise BadInput(f"--caption {template!r}: cannot fill it for label {lab} ({e})") from None
        out.append(check_length(text, f"--caption {template!r} for label {lab}"))
    return out
