"""Run directories: naming by config hash, atomic writes, a lock per run, caching and resume.

A run directory ``<runs-dir>/<method>-<dataset>-<hash>`` holds ``config.yaml`` (the full resolved config),
safetensors checkpoints, ``log.txt``, the persisted data splits, and attack results. Equal training configs
share a run; different ones never overwrite each other.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import yaml

from .errors import BadInput


def default_runs_dir() -> Path:
    return Path(os.environ.get("PRIVBENCH_HOME", "runs"))


def run_dir_for(cfg, runs_dir: str | Path | None = None) -> Path:
    base = Path(runs_dir) if runs_dir else default_runs_dir()
    return base / f"{cfg.method}-{cfg.dataset}-{cfg.training_hash()}"


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def safe_name(name: str) -> str:
    """A target name as a file-name part: ``client:0`` → ``client0`` (names in run and attack folders)."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "" for ch in name.replace(":", "")) or "target"


def read_json_or_none(path: Path, corrupt: str) -> Any:
    """A JSON file's content, None when it does not exist; a corrupt one is BadInput ``<path>: <corrupt>``."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        raise BadInput(f"{path}: {corrupt}") from None


def _json_default(o):
    import numpy as np

    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path next to ``path``; rename it into place only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix or ".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@contextlib.contextmanager
def run_lock(run_dir: Path, what: str = "train") -> Iterator[None]:
    """An exclusive lock on the run: a second process waits instead of training the same run twice."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / f".{what}.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"privbench: {run_dir} is being trained by another process; waiting for it", file=sys.stderr)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def log(run_dir: Path, msg: str) -> None:
    """Append one timestamped line to the run's log.txt."""
    run_dir.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    with open(run_dir / "log.txt", "a") as f:
        f.write(f"{stamp} {msg}\n")


def write_config(run_dir: Path, cfg) -> None:
    """Write config.yaml once; a run dir whose config disagrees with ours is refused, never overwritten."""
    path = run_dir / "config.yaml"
    text = yaml.safe_dump(cfg.to_dict(), sort_keys=False)
    if path.exists():
        try:
            old = yaml.safe_load(path.read_text())
        except yaml.YAMLError:
            raise BadInput(f"{path}: unreadable config.yaml; remove the run directory to retrain") from None
        from .config import config_from_dict

        if config_from_dict(old).training_hash() != cfg.training_hash():
            raise BadInput(f"{path}: belongs to a different config (hash mismatch); refusing to overwrite")
        return
    atomic_write_text(path, text)


def read_config(run_dir: str | Path):
    from .config import config_from_dict

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
