"""What every training method shares: the run context (config, data, splits, device) and the Method API.

A Method trains inside its run directory (idempotent, resumable) and yields named Targets.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from ..data.datasets import dataset_info, load_dataset
from ..data.splits import ClientSplit, MemberSplit, class_matched, client_split, member_split
from ..errors import BadInput
from ..runs import atomic_write_text, log
from .schedule import Schedule
from .target import Target
from .unet import Denoiser, build_denoiser


def resolve_device(device: str | None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise BadInput("--device cuda: no CUDA device is available here; use --device cpu or auto")
    if device not in ("cpu", "cuda") and not str(device).startswith("cuda:"):
        raise BadInput(f"--device {device!r}: choose auto, cpu or cuda")
    return torch.device(device)


@dataclass
class RunContext:
    cfg: object
    run_dir: Path
    device: torch.device
    #: an explicit member split (reference models: a random half of a pool), used instead of the seeded one
    split_override: MemberSplit | None = None

    @property
    def ckpt_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    @cached_property
    def dataset(self) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.cfg.data
        return load_dataset(self.cfg.dataset, d.data_root or None, d.download, d.resolution)

    @property
    def info(self):
        return dataset_info(self.cfg.dataset)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.dataset[0].shape[1:])

    @cached_property
    def split(self) -> MemberSplit:
        path = self.run_dir / "split.json"
        if self.split_override is not None:
            if not path.exists():
                atomic_write_text(path, self.split_override.to_json())
            return self.split_override
        if path.exists():
            return MemberSplit.from_json(path.read_text())
        s = member_split(len(self.dataset[1]), self.cfg.data.n_members, self.cfg.data.n_nonmembers, self.cfg.seed)
        atomic_write_text(path, s.to_json())
        return s

    @cached_property
    def clients(self) -> ClientSplit:
        path = self.run_dir / "clients.json"
        if path.exists():
            return ClientSplit.from_json(path.read_text())
        p = self.cfg.pfdm
        s = client_split(self.split.members, self.dataset[1].numpy(), p.n_clients, self.info.num_classes,
                         p.majority_classes, p.imbalance, self.cfg.seed)
        atomic_write_text(path, s.to_json())
        return s

    def records(self, indices) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        x, y = self.dataset
        return x[idx], y[idx]

    @property
    def schedule(self) -> Schedule:
        return Schedule.from_config(self.cfg.diffusion)

    @property
    def num_classes(self) -> int | None:
        return self.info.num_classes if self.cfg.model.class_conditional else None

    def new_denoiser(self, num_extra: int = 0) -> Denoiser:
        c, h, _ = self.image_shape
        torch.manual_seed(self.cfg.seed)  # same init for the same config and seed
        return build_denoiser(self.cfg.model, c, h, self.info.num_classes, num_extra)

    def log(self, msg: str) -> None:
        log(self.run_dir, msg)


class Method:
    """Base class. Subclasses set ``name``, ``default_target`` and implement ``train``, ``target_names``
    and ``load_target``."""
    name = "?"
    default_target = "model"
    # Config the method reads besides data/model/diffusion/train ("section" or "section.key"); only these enter
    # the config hash that names its run. None = every training section (safe for a method that does not say).
    config_keys: tuple[str, ...] | None = None

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.cfg = ctx.cfg

    def train(self) -> None:
        raise NotImplementedError

    def target_names(self) -> list[str]:
        return [self.default_target]

    def check_target(self, name: str | None) -> str:
        name = name or self.default_target
        names = self.target_names()
        if name not in names:
            raise BadInput(f"--target {name!r}: method {self.name} has targets: {', '.join(names)}")
        return name

    def load_target(self, name: str | None = None) -> Target:
        raise NotImplementedError

    def privacy(self, target: str) -> dict | None:
        """The formal guarantee of ``target`` with its basis, or None for non-private targets."""
        return None

    def client_attack_split(self, k: int) -> tuple[list[int], list[int]]:
        """The membership game of a model trained on client k's records only: those records vs non-members with
        the same class counts (the client's class mix is skewed; see :func:`class_matched`)."""
        mem = list(self.ctx.clients.clients[k])
        non = class_matched(mem, self.ctx.split.nonmembers, self.ctx.dataset[1].numpy(), self.cfg.seed)
        return mem, non

    def training_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Records the target was trained on (members) — for memorization and reconstruction."""
        return self.ctx.records(self.ctx.split.members)

    def make_target(self, name: str, model, *, private=False, note="", **kw) -> Target:
        return Target(name, self.name, model, self.ctx.schedule, self.ctx.device, self.ctx.num_classes,
                      private=private, note=note, meta={"shape": self.ctx.image_shape}, **kw)


def _validate_default(self) -> None:
    """Method-specific checks of the config (BadInput); called before anything is written."""


Method.validate = _validate_default
