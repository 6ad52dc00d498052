"""Public pre-training (``train.init=public``): the network every method starts from, trained non-privately on the
run partition's public split only (PDP-Diffusion, DP-LDM, DPImageBench's "pre-train then DP-fine-tune").

Cached under ``<runs root>/pretrain-<dataset>-<key>/``, keyed by what decides its weights and never by the members,
so every ε cell, seed, reference model and method with the same public split shares it (docs/methods.md §0).
:func:`pretrained_denoiser` returns the weights to any holder of a :class:`~privbench.models.method.RunContext`;
:meth:`RunContext.initial_denoiser` applies them.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from pathlib import Path

import torch

from ..core.config import config_hash
from ..core.errors import BadInput
from ..core.io import atomic_write_json, path_lock
from .training import TrainData, is_trained, load_ema, train_denoiser

#: bump when the pre-training changes (new store directory)
PRETRAIN_VERSION = 1
_NAME = "public"


def pretrain_settings(cfg, steps: int | None = None) -> dict:
    """What decides the pre-trained weights besides the public records (``steps``: default
    ``train.public_steps``, 0 = ``train.steps``)."""
    t = cfg.train
    steps = steps or t.public_steps or t.steps
    train = {k: getattr(t, k) for k in ("batch_size", "lr", "weight_decay", "warmup", "grad_clip", "ema_decay")}
    return {"version": PRETRAIN_VERSION, "dataset": cfg.dataset, "resolution": cfg.data.resolution,
            "model": dataclasses.asdict(cfg.model), "diffusion": dataclasses.asdict(cfg.diffusion),
            "steps": steps, "train": train, "seed": t.public_seed}


def public_hash(public: list[int]) -> str:
    return hashlib.sha256(json.dumps(sorted(int(i) for i in public)).encode()).hexdigest()


def pretrain_dir(ctx, steps: int | None = None) -> Path:
    key = config_hash({"public": public_hash(ctx.split.public), **pretrain_settings(ctx.cfg, steps)})
    return Path(ctx.store_root) / f"pretrain-{ctx.cfg.dataset}-{key}"


def pretrained_denoiser(ctx, steps: int | None = None) -> torch.nn.Module:
    """The denoiser pre-trained on ``ctx.split.public`` (trained once under a lock, then loaded from the cache);
    ``steps`` other than ``train.public_steps`` is another cached pre-training (DP-SAD's public teacher)."""
    return load_ema(_fresh(ctx), ensure_pretrained(ctx, steps), _NAME, ctx.device)


def ensure_pretrained(ctx, steps: int | None = None) -> Path:
    """Train the pre-training on ``ctx.split.public`` unless it is cached; returns its checkpoint folder."""
    public = list(ctx.split.public)
    if not public:
        raise BadInput("train.init=public: the run has no public split; set data.public=pool or classes:A-B")
    cfg, out = ctx.cfg, pretrain_dir(ctx, steps)
    settings = pretrain_settings(cfg, steps)
    ckpt_dir = out / "checkpoints"
    if not is_trained(ckpt_dir, _NAME, settings["steps"]):
        with path_lock(out.parent, out.name, "is pre-training on the public split"):
            if not is_trained(ckpt_dir, _NAME, settings["steps"]):
                _pretrain(ctx, public, settings, out)
    return ckpt_dir


def _fresh(ctx) -> torch.nn.Module:
    """The pre-training's initial network: seeded by ``train.public_seed``, never by the run's seed."""
    return ctx.build_denoiser(seed=ctx.cfg.train.public_seed)


def _pretrain(ctx, public: list[int], settings: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    x, y = ctx.records(public)
    dev = ctx.device
    data = TrainData(x.to(dev), y.to(dev) if ctx.num_classes else None)
    tcfg = copy.copy(ctx.cfg.train)
    atomic_write_json(out / "pretrain.json", {"n_public": len(public), "public_sha256": public_hash(public),
                                              "public_mode": ctx.split.public_mode, **settings,
                                              "note": "non-private pre-training on the public split only "
                                                      "(train.init=public); no member is read"})
    ctx.log(f"[pretrain] {settings['steps']} non-private steps on {len(public)} public records in {out}")
    train_denoiser(_fresh(ctx), data, ctx.schedule.alphas_cumprod(), tcfg, out / "checkpoints", name=_NAME,
                   seed=settings["seed"], device=dev, steps=settings["steps"], desc="pre-train on public records")


def load_into(model: torch.nn.Module, pretrained: torch.nn.Module) -> list[str]:
    """Copy the pre-trained weights into ``model`` (same architecture; a condition the pre-training did not have,
    e.g. PFDM's clipped/unclipped flag, keeps its seeded initialisation). Returns the names left as initialised."""
    have = pretrained.state_dict()
    own = model.state_dict()
    missing = [k for k in own if k not in have]
    bad = [k for k in own if k in have and have[k].shape != own[k].shape]
    if bad:
        raise BadInput(f"train.init=public: the pre-trained network differs in {bad[0]} (shape)")
    model.load_state_dict({k: have.get(k, v) for k, v in own.items()})
    return missing
