"""The run store: run directories named by config hash, their config.yaml, log and lock, the content hashes of
their artefacts, and result discovery (the layout: docs/cli.md §7).
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from pathlib import Path
from typing import Iterator

from ..core.config import config_from_dict
from ..core.errors import BadInput
from ..core.io import append_log, atomic_write_json, atomic_write_text, file_lock, sha256_file
from ..core.jsonio import MAX_RECORD_BYTES, read_json
from ..core.yamlio import dump_yaml, load_yaml

DONE = "train_done.json"
#: what training does not produce: bookkeeping, and what attacks, sampling, reports and bench cells add later
NOT_TRAINING = {"log.txt", DONE, "result.json", "scores.npz", "report.md"}
NOT_TRAINING_DIRS = {"attacks", "report", "fid"}


def default_runs_dir() -> Path:
    return Path(os.environ.get("PRIVBENCH_HOME", "runs"))


def run_dir_for(cfg, runs_dir: str | Path | None = None) -> Path:
    base = Path(runs_dir) if runs_dir else default_runs_dir()
    return base / f"{cfg.method}-{cfg.dataset}-{cfg.training_hash()}"


#: a run store that cannot be written for these reasons is bad input (exit 2); other errors are exit 3
BAD_STORE_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EEXIST, errno.ENAMETOOLONG}

_BUSY = {"train": "is being trained by another process", "attack": "is being attacked by another process"}


@contextlib.contextmanager
def run_lock(run_dir: Path, what: str = "train", *, lock_name: str | None = None) -> Iterator[None]:
    """An exclusive lock ``<run_dir>/.<lock_name or what>.lock``: a second process waits instead of doing the same
    work twice. Called only for work that was validated: it creates the run directory (a run store that cannot
    be written is BadInput naming it)."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = file_lock(run_dir / f".{lock_name or what}.lock", _BUSY.get(what, f"is locked by another process "
                                                                                 f"({what})"))
        lock.__enter__()
    except OSError as e:
        if e.errno not in BAD_STORE_ERRNOS:
            raise
        raise BadInput(f"run store {run_dir.parent}: cannot write {run_dir.name} ({e.strerror or e})") from None
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def log(run_dir: Path, msg: str) -> None:
    """Append one timestamped line to the run's log.txt."""
    append_log(run_dir, msg)


def write_config(run_dir: Path, cfg) -> None:
    """Write config.yaml once; a run dir whose config disagrees with ours is refused, never overwritten."""
    path = run_dir / "config.yaml"
    if path.exists():
        try:
            old = config_from_dict(load_yaml(path.read_text(), str(path)))
        except (BadInput, OSError, UnicodeDecodeError):
            raise BadInput(f"{path}: unreadable config.yaml; remove the run directory to retrain") from None
        if old.training_hash() != cfg.training_hash():
            raise BadInput(f"{path}: belongs to a different config (hash mismatch); refusing to overwrite")
        return
    atomic_write_text(path, dump_yaml(cfg.to_dict()))


def read_config(run_dir: str | Path):
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise BadInput(f"{run_dir}: not a privbench run directory (no config.yaml)")
    try:
        return config_from_dict(load_yaml(path.read_text(), str(path)))
    except BadInput as e:
        msg = str(e)
        raise BadInput(msg if msg.startswith(str(path)) else f"{path}: unreadable config ({msg})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: unreadable config ({type(e).__name__})") from None


# ------------------------------------------------------------------------------------------- artefact hashes

def training_artefacts(run_dir: Path) -> list[Path]:
    """The files training left in ``run_dir``: everything but bookkeeping (log, dot-files), optimizer states (their
    checkpoint's manifest holds their hash) and what attacks, samples, reports and FID cells write."""
    out = []
    for p in sorted(run_dir.rglob("*")):
        rel = p.relative_to(run_dir)
        if not p.is_file() or any(part.startswith(".") for part in rel.parts):
            continue
        if rel.parts[0] in NOT_TRAINING_DIRS or (len(rel.parts) == 1 and (rel.name in NOT_TRAINING
                                                                          or rel.name.startswith("samples-"))):
            continue
        if rel.name.endswith(".optim.pt"):
            continue
        out.append(p)
    return out


def artefact_hashes(run_dir: Path) -> dict[str, str]:
    """``{relative path: SHA-256}`` of the run's training artefacts."""
    return {p.relative_to(run_dir).as_posix(): sha256_file(p) for p in training_artefacts(run_dir)}


def write_done(run_dir: Path, info: dict) -> dict:
    d = {**info, "sha256": artefact_hashes(run_dir)}
    atomic_write_json(run_dir / DONE, d)
    return d


def read_done(run_dir: Path) -> dict | None:
    """train_done.json, or None when training has not finished (or the file is not a valid record)."""
    path = run_dir / DONE
    if not path.exists() and not path.is_symlink():
        return None
    try:
        d = read_json(path, "", MAX_RECORD_BYTES)
    except BadInput:
        return {"sha256": None}  # exists but unreadable: every artefact counts as unverified
    return d if isinstance(d, dict) else {"sha256": None}


def damaged_artefacts(run_dir: Path, done: dict | None = None) -> list[str]:
    """Relative paths of the recorded training artefacts that are missing or whose content changed; ``["*"]`` when
    the record has no hashes (an unreadable train_done.json)."""
    done = read_done(run_dir) if done is None else done
    if done is None:
        return []
    recorded = done.get("sha256")
    if not isinstance(recorded, dict):
        return ["*"]
    bad = []
    for rel, digest in recorded.items():
        p = run_dir / rel
        if not p.is_file() or sha256_file(p) != digest:
            bad.append(rel)
    return bad


def done_digest(done: dict) -> str:
    """One hash of a finished training's artefact record: results computed from the run carry it (``trained_from``)."""
    return hashlib.sha256(json.dumps(done.get("sha256"), sort_keys=True).encode()).hexdigest()[:16]


def verified_done(run_dir: Path) -> dict | None:
    """train_done.json when training finished and every recorded artefact is intact, else None."""
    done = read_done(run_dir)
    if done is None or damaged_artefacts(run_dir, done):
        return None
    return done


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
            raise BadInput(f"{p}: {'not a regular file or directory' if p.exists() else 'no such file or directory'}")
    return out
