"""``privbench export``: privbench's own targets as diffusers folders that any diffusers code loads (docs/cli.md
§1: layouts, what is refused, the ᾱ convention). privbench's label embedding, added to the time embedding, is copied
into diffusers' own ``class_embedding`` (``num_class_embeds=K``, ``class_embed_type=None``: the same sum), and the
predictions are checked equal on export (:data:`EXPORT_TOLERANCE`, else WorkFailed).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import torch

from ..core.errors import BadInput, WorkFailed
from ..core.io import atomic_write_json, check_writable
from ..models.unet import Denoiser
from . import train as api
from .store import read_config

EXPORT_TOLERANCE = 1e-6


def to_diffusers_unet(den):
    """A diffusers ``UNet2DModel`` computing exactly what privbench's Denoiser ``den`` computes (no extra input)."""
    from diffusers import UNet2DModel  # lazy: diffusers (seconds to import) only when this runs

    if not isinstance(den, Denoiser):
        raise BadInput(f"export: the target's network is a {type(den).__name__}, not privbench's Denoiser")
    if den.extra_emb is not None:
        raise BadInput("export: this network takes an extra condition besides the class (PFDM client models); "
                       "diffusers' UNet2DModel has no such input")
    cfg = {k: v for k, v in dict(den.unet.config).items() if not k.startswith("_")}
    sd = dict(den.unet.state_dict())
    if den.label_emb is not None:
        cfg.update(class_embed_type=None, num_class_embeds=int(den.label_emb.num_embeddings))
        sd["class_embedding.weight"] = den.label_emb.weight.detach().clone()
    unet = UNet2DModel(**cfg)
    unet.load_state_dict({k: v.detach().clone().cpu() for k, v in sd.items()}, strict=True)
    return unet.eval()


def _scheduler_of(tgt):
    # lazy: diffusers (seconds to import) only when this runs
    from diffusers import DDPMScheduler

    s = tgt.schedule
    return DDPMScheduler(num_train_timesteps=int(s.num_timesteps), beta_start=float(s.beta_start),
                         beta_end=float(s.beta_end), beta_schedule=s.beta_schedule, variance_type=s.variance_type,
                         clip_sample=bool(tgt.clip_sample), prediction_type="epsilon")


@torch.no_grad()
def max_prediction_gap(tgt, unet, n: int = 8, seed: int = 0) -> float:
    """max |ε_privbench − ε_diffusers| over a seeded batch of noisy inputs, timesteps and labels."""
    g = torch.Generator().manual_seed(seed)
    shape = tgt.meta["shape"]
    x = torch.randn((n, *shape), generator=g)
    t = torch.randint(0, tgt.num_timesteps, (n,), generator=g)
    y = torch.randint(0, tgt.num_classes, (n,), generator=g) if tgt.num_classes else None
    a = tgt.predict_noise(x, t, y).cpu()
    b = unet(x, t, class_labels=y, return_dict=False)[0]
    return float((a - b).abs().max())


def export_target(run_dir, target: str | None = None, out=None) -> dict:
    """Write ``target`` of a trained run to ``out`` in diffusers format; returns what was written."""
    if out is None:
        raise BadInput("export: --out DIR is required")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"--out {out}: exists and is not an empty folder; refusing to overwrite")
    check_writable(out, "--out")  # before the target is loaded
    run_dir = Path(run_dir)
    cfg = read_config(run_dir)
    method = api.make_method(cfg, run_dir, "cpu")
    name = method.check_target(target)
    tgt = api.load_target(run_dir, name, device="cpu")
    if tgt._eps_fn is not None or tgt._sampler is not None or tgt.extra is not None:
        raise BadInput(f"export: target {name!r} of {cfg.method} is not a single network sampled by the plain DDPM "
                       f"chain (it composes networks or takes an extra condition); export supports single-UNet "
                       f"targets such as centralized/model")
    unet = to_diffusers_unet(tgt.model)
    gap = max_prediction_gap(tgt, unet)
    if not gap <= EXPORT_TOLERANCE:
        raise WorkFailed(f"export: the diffusers UNet differs from the privbench target by {gap:.3g} (> 1e-6)")
    sched = _scheduler_of(tgt)
    try:
        privacy = method.privacy(name)
    except NotImplementedError:
        privacy = None
    conditional = bool(tgt.num_classes)
    layout = "unet+scheduler" if conditional else "pipeline"
    load_with = ("from diffusers import UNet2DModel, DDPMScheduler; unet = UNet2DModel.from_pretrained(OUT); "
                 "scheduler = DDPMScheduler.from_pretrained(OUT); eps = unet(x_t, t, class_labels=y).sample"
                 if conditional else
                 "from diffusers import DDPMPipeline; pipe = DDPMPipeline.from_pretrained(OUT)")
    meta = {"source_run": str(run_dir.resolve()), "method": cfg.method, "target": name, "dataset": cfg.dataset,
            "preset": cfg.preset, "seed": cfg.seed, "config_hash": cfg.training_hash(), "layout": layout,
            "class_conditional": conditional, "num_classes": tgt.num_classes,
            "sample_shape": list(tgt.meta["shape"]), "prediction_type": "epsilon",
            "privacy": privacy, "max_abs_gap_to_privbench": gap, "load_with": load_with,
            "note": "weights are the target's EMA weights, as privbench attacks them"}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    try:
        if conditional:
            unet.save_pretrained(str(tmp), safe_serialization=True)
            sched.save_pretrained(str(tmp))
        else:
            # lazy: diffusers (seconds to import) only when this runs
            from diffusers import DDPMPipeline

            DDPMPipeline(unet=unet, scheduler=sched).save_pretrained(str(tmp), safe_serialization=True)
        atomic_write_json(tmp / "privbench_export.json", meta)
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(tmp)
    return {"out": str(out), **meta}
