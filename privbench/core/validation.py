"""Validation of user-given numbers: one clear BadInput line naming the input and what is allowed."""
from __future__ import annotations

import math
import numbers
import os
from pathlib import Path
from typing import Any

from .errors import BadInput


def real(value, name: str) -> float:
    """A real number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise BadInput(f"{name}={value!r}: must be a number")
    return float(value)


def positive_finite(value, name: str, what: str = "") -> float:
    """A finite number > 0."""
    v = real(value, name)
    if not (v > 0 and math.isfinite(v)):
        raise BadInput(f"{name}={value!r}: must be a finite number > 0{what}")
    return v


def open_unit(value, name: str) -> float:
    """A number in (0, 1) (a δ, say)."""
    v = real(value, name)
    if not (0.0 < v < 1.0):
        raise BadInput(f"{name}={value!r}: must be in (0, 1)")
    return v


def integer_at_least(value, name: str, minimum: int) -> int:
    """An integer (numpy integers too, not bools) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < minimum:
        raise BadInput(f"{name}={value!r}: must be an integer >= {minimum}")
    return int(value)


#: the longest target name: it is part of folder and figure file names (a file name is at most 255 bytes)
MAX_TARGET_NAME = 100


def target_name(value: Any, name: str) -> str:
    """A target's name as results, tables and file names carry it: 1..:data:`MAX_TARGET_NAME` printable
    characters (a line break would split the one-line outputs)."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_TARGET_NAME or not value.isprintable():
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise BadInput(f"{name} {shown}: expected 1..{MAX_TARGET_NAME} printable characters (it names the model in "
                       f"results and file names)")
    return value


def path_arg(value: Any, name: str) -> Path:
    """A file or folder argument of the library: a non-empty ``str`` or ``os.PathLike`` (the command line's are
    strings already)."""
    if isinstance(value, (str, os.PathLike)) and str(value):
        return Path(value)
    raise BadInput(f"{name}: expected a path (str or os.PathLike), got {type(value).__name__}")


def confidence(value: Any, name: str = "confidence") -> float:
    """A confidence level strictly between 0 and 1."""
    try:
        c = float(value)
    except (TypeError, ValueError):
        c = float("nan")
    if not (0.0 < c < 1.0):
        raise BadInput(f"{name} {value!r}: expected a number strictly between 0 and 1 (e.g. 0.95)")
    return c


def audit_delta(value: Any, name: str = "delta") -> float:
    """The δ of an empirical bound: a number in [0, 1)."""
    try:
        d = float(value)
    except (TypeError, ValueError):
        d = float("nan")
    if not (0.0 <= d < 1.0):
        raise BadInput(f"{name}: expected a number in [0, 1), got {value!r}")
    return d
