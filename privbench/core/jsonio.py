"""The one reader of JSON files: a model's ``config.json``, ``model_index.json``, a scheduler config (at most
:data:`MAX_BYTES`), and the records privbench wrote and reads back — results, benches, a run's manifests, which a
user may hand over edited (at most :data:`MAX_RECORD_BYTES`). A FIFO, a dangling link, a file over its bound or
nested too deeply is :class:`BadInput` naming the file, before anything beyond the bound is read (docs/cli.md §3).
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .errors import BadInput
from .yamlio import MAX_BYTES

#: the most bytes of a JSON record privbench writes and reads back (a result, a bench, a run's manifests): a bench
#: of 10⁵ cells takes about 120 MB
MAX_RECORD_BYTES = 256 << 20


def regular_file(path: str | Path, what: str) -> Path:
    """``path`` when it is a regular file (a link to one is fine); BadInput naming it otherwise — missing, a
    dangling link, a directory, a FIFO or a device (reading those blocks or never ends)."""
    p = Path(path)
    name = f"{what} {path}" if what else str(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        dangling = " (a dangling link)" if p.is_symlink() else ""
        raise BadInput(f"{name}: file not found{dangling}") from None
    except OSError as e:
        raise BadInput(f"{name}: unreadable ({e.strerror or type(e).__name__})") from None
    if stat.S_ISDIR(st.st_mode):
        raise BadInput(f"{name}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{name}: not a regular file (a FIFO, socket or device is never read)")
    return p


def read_json(path: str | Path, what: str = "", max_bytes: int = MAX_BYTES) -> Any:
    """The JSON value in ``path`` (a regular file of at most ``max_bytes``); BadInput naming the file (after
    ``what``) otherwise."""
    name = f"{what} {path}" if what else str(path)
    p = regular_file(path, what)
    try:
        with open(p, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as e:
        raise BadInput(f"{name}: unreadable ({e.strerror or type(e).__name__})") from None
    if len(data) > max_bytes:
        raise BadInput(f"{name}: over {max_bytes} bytes; such JSON files are limited to {max_bytes} bytes")
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise BadInput(f"{name}: nested too deeply to read") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise BadInput(f"{name}: not a readable JSON file ({type(e).__name__})") from None


def read_json_object(path: str | Path, what: str, max_bytes: int = MAX_BYTES) -> dict:
    """The JSON object in ``path`` (a regular file of at most ``max_bytes``); BadInput naming the file otherwise."""
    d = read_json(path, what, max_bytes)
    if not isinstance(d, dict):
        raise BadInput(f"{what} {path}: expected a JSON object")
    return d
