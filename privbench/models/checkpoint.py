"""Checkpoints that never run code on load: safetensors for weights, weights_only torch.load for the optimizer."""
from __future__ import annotations

from pathlib import Path

import torch

from ..core.errors import BadInput
from ..core.io import atomic_path, atomic_write_json, load_weights, read_json_or_none, save_weights


def save_optimizer(path: Path, state: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_optimizer(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means a corrupt file
        raise BadInput(f"checkpoint {path}: corrupt or not loadable safely ({type(e).__name__}); "
                       f"delete it to retrain") from None


def read_state(path: Path) -> dict | None:
    return read_json_or_none(path, "checkpoint state corrupt; delete it to retrain")


def write_state(path: Path, state: dict) -> None:
    atomic_write_json(path, state)


def load_into(module: torch.nn.Module, tensors: dict[str, torch.Tensor], path: Path) -> None:
    try:
        module.load_state_dict(tensors, strict=True)
    except RuntimeError as e:
        raise BadInput(f"checkpoint {path}: does not match the model ({str(e).splitlines()[0][:100]})") from None


def checkpoint_paths(ckpt_dir: Path, name: str) -> tuple[Path, Path, Path]:
    """A training checkpoint's files: weights (safetensors), optimizer state, and the state JSON written last."""
    return ckpt_dir / f"{name}.safetensors", ckpt_dir / f"{name}.optim.pt", ckpt_dir / f"{name}.state.json"


def save_modules(path: Path, modules: dict[str, torch.nn.Module], meta: dict | None = None) -> None:
    """Several modules in one safetensors file, each state-dict key prefixed by ``<name>.``."""
    save_weights(path, {f"{pre}.{k}": v for pre, m in modules.items() for k, v in m.state_dict().items()}, meta)


def load_modules(path: Path, modules: dict[str, torch.nn.Module], device) -> None:
    """The inverse of :func:`save_modules` for the given names (other prefixes in the file are ignored)."""
    tensors = load_weights(path, device)
    for pre, m in modules.items():
        n = len(pre) + 1
        load_into(m, {k[n:]: v for k, v in tensors.items() if k.startswith(pre + ".")}, path)
