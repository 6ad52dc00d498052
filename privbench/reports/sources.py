"""RESULTS for ``audit``, ``report`` and ``check`` from Python: paths, or the objects ``privbench.attack`` returns.
An in-memory result is written as an ordinary one and read back; all of one call's share a run folder (docs/api.md §8).
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..core.errors import BadInput
from ..core.io import atomic_path, atomic_write_json, safe_name, sha256_file
from ..runs.result_schema import AttackResult

#: the run folder in-memory results are written to (under the folder a call gives, or a temporary one)
IN_MEMORY = "in-memory"


def is_in_memory(obj: Any) -> bool:
    """Whether ``obj`` is a result held in memory (``privbench.attack``'s object), not a path."""
    return isinstance(getattr(obj, "result", None), AttackResult) and hasattr(obj, "scores")


def check_sources(results: Any) -> list:
    """``results`` as a list of paths and in-memory results; BadInput for anything else or an empty list."""
    if isinstance(results, (str, os.PathLike)) or is_in_memory(results):
        results = [results]
    try:
        items = list(results)
    except TypeError:
        raise BadInput(f"results: expected a list of result paths or privbench.attack results, got "
                       f"{type(results).__name__}") from None
    if not items:
        raise BadInput("results: empty; give result folders, result.json files or privbench.attack results")
    for x in items:
        if not (isinstance(x, (str, os.PathLike)) or is_in_memory(x)):
            raise BadInput(f"results: {type(x).__name__} is neither a path nor a privbench.attack result")
    return items


def write_in_memory(items: list, into: Path) -> list[Path]:
    """Write every in-memory result of ``items`` under ``into``/in-memory; returns all of them as paths (paths
    given stay as they are), in order."""
    run_dir = (into / IN_MEMORY).resolve()
    out: list[Path] = []
    for i, x in enumerate(items):
        if not is_in_memory(x):
            out.append(Path(x))
            continue
        r: AttackResult = x.result
        d = run_dir / "attacks" / f"{i:02d}-{safe_name(r.target)}-{safe_name(r.label)}"
        d.mkdir(parents=True, exist_ok=True)
        arrays = {} if x.scores is None else {"scores": np.asarray(x.scores, dtype=np.float64),
                                               "labels": np.asarray(x.labels).astype(np.int64)}
        with atomic_path(d / "scores.npz") as tmp, open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
        written = replace(r, run_dir=str(run_dir), scores_path=str(d / "scores.npz"),
                          sha256={"scores.npz": sha256_file(d / "scores.npz")})
        atomic_write_json(d / "result.json", written.to_json())
        out.append(d / "result.json")
    return out


@contextlib.contextmanager
def as_paths(results: Any) -> Iterator[tuple[list[Path], Path | None]]:
    """(paths, the temporary folder in-memory results were written to, else None), removed on exit."""
    items = check_sources(results)
    if not any(is_in_memory(x) for x in items):
        yield [Path(x) for x in items], None
        return
    with tempfile.TemporaryDirectory(prefix="privbench-results-") as tmp:
        yield write_in_memory(items, Path(tmp)), Path(tmp)
