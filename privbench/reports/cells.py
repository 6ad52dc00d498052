"""The one rule every table cell follows — text, CSV, HTML, LaTeX and Markdown all format numbers here, so no two
outputs disagree: ``–``, ``∞``, ``n/a`` (docs/benchmarks.md, "Reports") and intervals rounded
outward (docs/cli.md §3, "Intervals"). An undefined template variable counts as missing.
"""
from __future__ import annotations

import math
from typing import Any

from ..metrics.roc import FPR_LABEL, FPR_OF, resolvable, unresolvable_reason  # noqa: F401 - the rule's home
from ..privacy.claims import as_number

NONE_TEXT = "–"
NA_TEXT = "n/a"
INF_TEXT = "∞"



def _missing(v: Any) -> bool:
    if v is None:
        return True
    if type(v).__name__ in ("Undefined", "ChainableUndefined", "StrictUndefined"):  # jinja2, without importing it
        return True
    return isinstance(v, float) and math.isnan(v)


def num(v: Any, nd: int = 3) -> str:
    """A number with ``nd`` decimals (in scientific notation from 1e6 on, where decimals would print hundreds of
    digits: a claimed ε of 1e308); ``–`` when missing, ``∞`` when infinite; other values as text."""
    if _missing(v):
        return NONE_TEXT
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (int, float)) or hasattr(v, "__float__") and not isinstance(v, str):
        try:
            f = float(v)
        except (TypeError, ValueError):
            return str(v)
        if math.isinf(f):
            return INF_TEXT if f > 0 else "−" + INF_TEXT
        return f"{f:.{nd}e}" if abs(f) >= 1e6 else f"{f:.{nd}f}"
    return str(v)


def text(v: Any) -> str:
    """A non-numeric cell (a name, a hash, a count, a mapping of settings): ``–`` when missing, never "None"."""
    if _missing(v) or v == "":
        return NONE_TEXT
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, dict):
        return ", ".join(f"{k}={text(x)}" for k, x in v.items()) or NONE_TEXT
    if isinstance(v, (list, tuple)):
        return ", ".join(text(x) for x in v) or NONE_TEXT
    return str(v)


def _outward(v: float, nd: int, up: bool) -> float:
    """``v`` rounded to ``nd`` decimals away from the interval's inside (a float's last-digit noise is ignored:
    0.94 stays 0.94)."""
    scaled = round(v * 10 ** nd, 6)
    return (math.ceil(scaled) if up else math.floor(scaled)) / 10 ** nd


def ci(c: Any, nd: int = 2) -> str:
    """``[lo, hi]`` of a bootstrap interval (ends rounded outward), or "" when there is none."""
    if _missing(c) or not c or _missing(c[0]) or _missing(c[1]):
        return ""
    lo, hi = float(c[0]), float(c[1])
    lo = lo if math.isinf(lo) else _outward(lo, nd, up=False)
    hi = hi if math.isinf(hi) else _outward(hi, nd, up=True)
    return f"[{num(lo, nd)}, {num(hi, nd)}]"


def metric_text(metrics: dict, metric: str, n_nonmembers: Any, nd: int = 3) -> str:
    """A membership metric's cell: ``n/a`` for an unresolvable TPR, else :func:`num`."""
    if not resolvable(metric, n_nonmembers):
        return NA_TEXT
    return num((metrics or {}).get(metric), nd)


def metric_value(metrics: dict, metric: str, n_nonmembers: Any) -> float | None:
    """A membership metric as a CSV value: None (empty) when missing or an unresolvable TPR."""
    if not resolvable(metric, n_nonmembers):
        return None
    return as_number((metrics or {}).get(metric))
