"""The run store: run directories named by config hash, their config.yaml, log and lock, and result discovery.

A run directory ``<runs-dir>/<method>-<dataset>-<hash>`` holds ``config.yaml`` (the full resolved config),
safetensors checkpoints, ``log.txt``, the persisted data splits, and attack results. Equal training configs
share a run; different ones never overwrite each other (docs/cli.md §7).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

import yaml

from ..core.config import config_from_dict
from ..core.errors import BadInput
from ..core.io import append_log, atomic_write_text, path_lock


def default_runs_dir() -> Path:
    return Path(os.environ.get("PRIVBENCH_HOME", "runs"))


def run_dir_for(cfg, runs_dir: str | Path | None = None) -> Path:
    base = Path(runs_dir) if runs_dir else default_runs_dir()
    return base / f"{cfg.method}-{cfg.dataset}-{cfg.training_hash()}"


@contextlib.contextmanager
def run_lock(run_dir: Path, what: str = "train") -> Iterator[None]:
    """An exclusive lock on the run: a second process waits instead of doing the same work twice."""
    busy = "is being trained by another process" if what == "train" else f"is locked by another process ({what})"
    with path_lock(run_dir, what, busy):
        yield


def log(run_dir: Path, msg: str) -> None:
    """Append one timestamped line to the run's log.txt."""
    append_log(run_dir, msg)


def write_config(run_dir: Path, cfg) -> None:
    """Write config.yaml once; a run dir whose config disagrees with ours is refused, never overwritten."""
    path = run_dir / "config.yaml"
    text = yaml.safe_dump(cfg.to_dict(), sort_keys=False)
    if path.exists():
        try:
            old = yaml.safe_load(path.read_text())
        except yaml.YAMLError:
            raise BadInput(f"{path}: unreadable config.yaml; remove the run directory to retrain") from None
        if config_from_dict(old).training_hash() != cfg.training_hash():
            raise BadInput(f"{path}: belongs to a different config (hash mismatch); refusing to overwrite")
        return
    atomic_write_text(path, text)


def read_config(run_dir: str | Path):
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise BadInput(f"{run_dir}: not a privbench run directory (no config.yaml)")
    try:
        return config_from_dict(yaml.safe_load(path.read_text()))
    except (yaml.YAMLError, KeyError, TypeError) as e:
        raise BadInput(f"{path}: unreadable config ({type(e).__name__})") from None


def find_results(paths: list[str | Path]) -> list[Path]:
    """RESULTS arguments of check/audit: run dirs, bench dirs or result.json files → result.json paths."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            found = sorted(p.rglob("result.json"))
            if not found:
                raise BadInput(f"{p}: no result.json found under this directory")
            out.extend(found)
        else:
            raise BadInput(f"{p}: no such file or directory")
    return out
