"""Rows that coincide: two targets whose scores under one attack are identical (PFDM's ``pipeline:K`` and
``client:K`` below t0, DP-SAD's teacher and centralized's model) read like a bug; the tables add a note saying
which rows coincide and, where the methods declare it (``Method.coinciding_note``), why."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ..core.registry import entry_attribute, has_entry


def _digest(scores_file) -> str | None:
    """A hash of a membership result's scores and labels (None when they cannot be read)."""
    try:
        with np.load(Path(scores_file), allow_pickle=False) as z:
            h = hashlib.sha256()
            for key in ("scores", "labels"):
                h.update(np.ascontiguousarray(z[key], dtype=np.float64).tobytes())
            return h.hexdigest()
    except (OSError, KeyError, ValueError, TypeError):
        return None


def _why(methods: list[str]) -> str:
    notes = []
    for m in dict.fromkeys(methods):
        note = entry_attribute("METHODS", m, "coinciding_note", "") if has_entry("METHODS", m) else ""
        if note and note not in notes:
            notes.append(note)
    return "; ".join(notes) or "the two targets answered this attack's queries with the same network"


def coinciding(rows: list[tuple[str, str, str, tuple, object]]) -> list[tuple[str, list[tuple[str, str]], str]]:
    """(attack, [(method, target)], note) per set of rows with identical scores. ``rows``: (attack, method, target,
    where, scores file) of the membership results; ``where`` (dataset, seed, …) must agree for rows to be
    compared."""
    groups: dict[tuple, list[tuple[str, str]]] = {}
    for attack, method, target, where, scores in rows:
        d = _digest(scores) if scores else None
        if d is None:
            continue
        members = groups.setdefault((attack, tuple(where), d), [])
        if (method, target) not in members:
            members.append((method, target))
    out = []
    for (attack, _where, _d), members in groups.items():
        if len(members) > 1:
            names = " and ".join(f"{m}/{t}" for m, t in members)
            out.append((attack, members, f"{names} have identical {attack} scores: {_why([m for m, _ in members])}"))
    return out
