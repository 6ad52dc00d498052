"""Captions of records under test, for text-to-image targets.

Three sources, one caption per record:

* an ``.npz`` with ``images`` and ``captions`` — a 1-D NumPy unicode array (dtype ``<U…``; UTF-8 bytes ``S…`` are
  decoded), one entry per image; read with ``allow_pickle=False`` (an object array is refused, never unpickled);
* an image folder with a ``metadata.jsonl`` (the Hugging Face ``imagefolder`` convention): one JSON object per
  line with ``file_name`` (relative to the folder) and ``text``; every image needs exactly one line. The file is
  read only up to :data:`MAX_METADATA_BYTES`;
* ``--caption TEMPLATE`` for class-labelled records: ``{label}`` is the label, ``{word}`` its English number word
  (0–9: ``zero`` … ``nine``, else the number), ``{name}`` the class folder's name (else the label).
"""
from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np

from ..core.errors import BadInput

MAX_METADATA_BYTES = 64 << 20
MAX_CAPTION_CHARS = 10_000
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
TEMPLATE_FIELDS = ("label", "word", "name")


def npz_captions(z, n: int, path) -> list[str] | None:
    """The ``captions`` array of an open ``.npz`` (None when absent)."""
    if "captions" not in z.files:
        return None
    try:
        a = z["captions"]
    except ValueError:
        raise BadInput(f"{path}: captions is an object (pickled) array; store a NumPy unicode array "
                       f"(np.array(list_of_str)) instead") from None
    if a.dtype.kind == "S":
        try:
            a = np.char.decode(a, "utf-8")
        except UnicodeDecodeError:
            raise BadInput(f"{path}: captions are bytes that are not UTF-8") from None
    if a.dtype.kind != "U" or a.ndim != 1:
        raise BadInput(f"{path}: captions must be a 1-D unicode array, got {a.dtype} {a.shape}")
    if len(a) != n:
        raise BadInput(f"{path}: {len(a)} captions for {n} images")
    return [str(c) for c in a]


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
        by_name[d["file_name"]] = d["text"][:MAX_CAPTION_CHARS]
    names = [str(f.relative_to(folder)) for f in files]
    missing = [nm for nm in names if nm not in by_name]
    if missing:
        raise BadInput(f"{meta}: no caption for {len(missing)} of {len(names)} images (e.g. {missing[0]})")
    return [by_name[nm] for nm in names]


def check_template(template: str) -> str:
    """The template, or BadInput for a field it cannot fill."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise BadInput(f"--caption {template!r}: not a format template ({e})") from None
    bad = [f for f in fields if f not in TEMPLATE_FIELDS]
    if bad:
        raise BadInput(f"--caption {template!r}: unknown field {{{bad[0]}}}; use {{label}}, {{word}} or {{name}}")
    return template


def template_captions(template: str, labels, class_names: dict | None = None, where: str = "records") -> list[str]:
    """One caption per label from ``template`` (see the module doc)."""
    check_template(template)
    if labels is None:
        raise BadInput(f"--caption {template!r}: {where} have no labels to fill it with (give captions instead)")
    names = {v: k for k, v in (class_names or {}).items()}
    out = []
    for lab in (int(v) for v in labels):
        word = NUMBER_WORDS[lab] if 0 <= lab < 10 else str(lab)
        out.append(template.format(label=lab, word=word, name=names.get(lab, str(lab))))
    return out
