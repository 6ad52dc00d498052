"""Checkpoints: one atomic unit per name, never running code on load (safetensors for weights, ``weights_only``
torch.load for the optimizer).

A checkpoint ``<name>`` is ``<name>.safetensors`` (every module, prefixed ``model.``, ``ema.``, …),
``<name>.optim.pt`` and the manifest ``<name>.state.json`` (the step, what a resume needs, the other files'
SHA-256). Saving is a journal, so a kill at any instant leaves the previous checkpoint or the new one, never a mix:
the files are written (fsynced) into ``.<name>.tmp-XXXX/``, that folder is renamed to ``.<name>.commit`` (the
atomic step), then its files are moved into place, manifest last. Readers finish an interrupted move
(:func:`recover`) and check the hashes; a writer also removes leftover temporary folders (:func:`clean`).
"""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from pathlib import Path

import torch

from ..core.errors import BadInput
from ..core.io import (
    atomic_path,
    atomic_write_json,
    fsync_dir,
    is_writer,
    load_weights,
    read_json_or_none,
    save_weights,
    sha256_file,
)

RETRAIN = "`privbench train` retrains it"


def save_optimizer(path: Path, state: dict) -> None:
    # serialised in memory, written by us: torch.save straight to a full disk raises an opaque RuntimeError
    # ("unexpected pos"), a write of the bytes raises OSError(ENOSPC), which says what happened
    buf = io.BytesIO()
    torch.save(state, buf)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buf.getbuffer())


def load_optimizer(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means a corrupt file
        raise BadInput(f"checkpoint {path}: corrupt or not loadable safely ({type(e).__name__}); "
                       f"delete it to retrain") from None


def load_into(module: torch.nn.Module, tensors: dict[str, torch.Tensor], path: Path) -> None:
    try:
        module.load_state_dict(tensors, strict=True)
    except RuntimeError as e:
        raise BadInput(f"checkpoint {path}: does not match the model ({str(e).splitlines()[0][:100]})") from None


def checkpoint_paths(ckpt_dir: Path, name: str) -> tuple[Path, Path, Path]:
    """A training checkpoint's files: weights (safetensors), optimizer state, and the manifest JSON."""
    return ckpt_dir / f"{name}.safetensors", ckpt_dir / f"{name}.optim.pt", ckpt_dir / f"{name}.state.json"


def module_tensors(modules: dict[str, torch.nn.Module]) -> dict[str, torch.Tensor]:
    """Several modules' state dicts as one flat dict, each key prefixed by ``<name>.``."""
    return {f"{pre}.{k}": v for pre, m in modules.items() for k, v in m.state_dict().items()}


def split_into(tensors: dict[str, torch.Tensor], modules: dict[str, torch.nn.Module], path: Path) -> None:
    for pre, m in modules.items():
        n = len(pre) + 1
        load_into(m, {k[n:]: v for k, v in tensors.items() if k.startswith(pre + ".")}, path)


# ------------------------------------------------------------------------------------------- the unit

def _commit_dir(ckpt_dir: Path, name: str) -> Path:
    return ckpt_dir / f".{name}.commit"


def recover(ckpt_dir: Path, name: str) -> None:
    """Finish installing a committed checkpoint whose installation was interrupted (idempotent)."""
    commit = _commit_dir(ckpt_dir, name)
    if not commit.is_dir():
        return
    files = sorted((p.name for p in commit.iterdir()), key=lambda f: f.endswith(".state.json"))  # manifest last
    for f in files:
        with contextlib.suppress(FileNotFoundError):  # another reader installed it first
            os.replace(commit / f, ckpt_dir / f)
    fsync_dir(ckpt_dir)
    with contextlib.suppress(FileNotFoundError, OSError):
        commit.rmdir()


def clean(ckpt_dir: Path, name: str) -> None:
    """Writer side, before training ``name``: finish an interrupted commit and remove the temporary folders a
    kill during a save left behind. Under torchrun only rank 0 (the writer) does this."""
    if not is_writer() or not ckpt_dir.is_dir():
        return
    recover(ckpt_dir, name)
    for p in ckpt_dir.glob(f".{name}.tmp-*"):
        shutil.rmtree(p, ignore_errors=True)


def save_checkpoint(ckpt_dir: Path, name: str, tensors: dict[str, torch.Tensor], state: dict, *,
                    optim_state: dict | None = None, meta: dict | None = None) -> None:
    """Write checkpoint ``name`` as one unit: weights ``tensors``, optional optimizer state, and the manifest
    ``state`` (+ the files' SHA-256), by the module's journal. Under torchrun rank 0 alone writes."""
    if not is_writer():
        return
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    recover(ckpt_dir, name)
    tmp = Path(tempfile.mkdtemp(dir=ckpt_dir, prefix=f".{name}.tmp-"))
    try:
        wpath, opath, spath = checkpoint_paths(tmp, name)
        save_weights(wpath, tensors, meta)
        hashes = {"weights": sha256_file(wpath)}
        if optim_state is not None:
            save_optimizer(opath, optim_state)
            hashes["optim"] = sha256_file(opath)
        atomic_write_json(spath, {**state, "sha256": hashes})
        fsync_dir(tmp)
        os.rename(tmp, _commit_dir(ckpt_dir, name))  # the commit point
        fsync_dir(ckpt_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    recover(ckpt_dir, name)


def read_state(ckpt_dir: Path, name: str) -> dict | None:
    """The manifest of checkpoint ``name`` (None when there is none); a corrupt one is BadInput."""
    recover(ckpt_dir, name)
    spath = checkpoint_paths(ckpt_dir, name)[2]
    state = read_json_or_none(spath, f"checkpoint state corrupt; {RETRAIN}")
    if state is None:
        return None
    step = state.get("step") if isinstance(state, dict) else None
    if isinstance(step, bool) or not isinstance(step, int) or step < 0 or not isinstance(state.get("sha256"), dict):
        raise BadInput(f"{spath}: checkpoint state corrupt (no valid step or content hashes); {RETRAIN}")
    return state


def verify(ckpt_dir: Path, name: str, state: dict, which: tuple[str, ...] = ("weights",)) -> None:
    """BadInput unless each file in ``which`` (weights, optim) exists and has the manifest's SHA-256."""
    wpath, opath, spath = checkpoint_paths(ckpt_dir, name)
    for key in which:
        path = wpath if key == "weights" else opath
        if not path.is_file():
            raise BadInput(f"checkpoint {path}: missing (listed by {spath.name}); {RETRAIN}")
        if sha256_file(path) != state["sha256"].get(key):
            raise BadInput(f"checkpoint {path}: damaged (its content hash differs from the one in {spath.name}); "
                           f"{RETRAIN}")


def load_tensors(ckpt_dir: Path, name: str, device, state: dict | None = None) -> dict[str, torch.Tensor]:
    """The verified weights of checkpoint ``name``."""
    state = read_state(ckpt_dir, name) if state is None else state
    wpath = checkpoint_paths(ckpt_dir, name)[0]
    if state is None:
        raise BadInput(f"{wpath}: no checkpoint; train the target first")
    verify(ckpt_dir, name, state)
    return load_weights(wpath, device)


def load_checkpoint_modules(ckpt_dir: Path, name: str, modules: dict[str, torch.nn.Module], device,
                            state: dict | None = None) -> None:
    split_into(load_tensors(ckpt_dir, name, device, state), modules, checkpoint_paths(ckpt_dir, name)[0])


def load_checkpoint_optimizer(ckpt_dir: Path, name: str, state: dict) -> dict:
    verify(ckpt_dir, name, state, ("optim",))
    return load_optimizer(checkpoint_paths(ckpt_dir, name)[1])


def problem(ckpt_dir: Path, name: str) -> str | None:
    """Why checkpoint ``name`` cannot be used (corrupt manifest, a missing or damaged weights file), else None.
    The optimizer state is checked only when a training resumes from it."""
    try:
        state = read_state(ckpt_dir, name)
        if state is not None:
            verify(ckpt_dir, name, state)
    except BadInput as e:
        return str(e)
    return None


def names(ckpt_dir: Path) -> list[str]:
    """The checkpoints in a folder (those with a manifest, or with a commit to finish)."""
    if not ckpt_dir.is_dir():
        return []
    out = {p.name[:-len(".state.json")] for p in ckpt_dir.glob("*.state.json")}
    out |= {p.name[1:-len(".commit")] for p in ckpt_dir.glob(".*.commit")}
    return sorted(out)


def discard(ckpt_dir: Path, name: str) -> None:
    """Remove checkpoint ``name`` (the manifest first, so a kill midway leaves no manifest without its files)."""
    if not is_writer():
        return
    wpath, opath, spath = checkpoint_paths(ckpt_dir, name)
    shutil.rmtree(_commit_dir(ckpt_dir, name), ignore_errors=True)
    for p in (spath, wpath, opath):
        p.unlink(missing_ok=True)
    for p in ckpt_dir.glob(f".{name}.tmp-*"):
        shutil.rmtree(p, ignore_errors=True)
