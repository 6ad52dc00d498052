"""The denoiser training loop: AdamW, warm-up, grad clipping, EMA, checkpoints and exact resume.

Randomness is drawn per step from a generator seeded by (seed, step), so a run resumed from a checkpoint
follows exactly the trajectory of an uninterrupted one, and the same config + seed gives the same weights
on CPU.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from ..core import distributed, progress
from ..core.errors import BadInput, WorkFailed
from ..core.io import append_log as log
from ..core.seeding import step_generator
from . import checkpoint as ckpt


@dataclass
class TrainData:
    """Training records on the training device. ``extra`` is an optional second discrete condition;
    ``weights`` (optional) are per-record sampling probabilities (uniform when None)."""
    x: torch.Tensor
    y: torch.Tensor | None = None
    extra: torch.Tensor | None = None
    weights: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.x.shape[0]


class EMA:
    """Exponential moving average of parameters (buffers copied)."""

    def __init__(self, model: nn.Module, decay: float):
        self.decay = decay
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        ema_p = list(self.model.parameters())
        torch._foreach_lerp_(ema_p, [p.detach() for p in model.parameters()], 1.0 - self.decay)
        for eb, b in zip(self.model.buffers(), model.buffers()):
            eb.copy_(b)


def diffusion_loss(model: nn.Module, x0, y, extra, t, noise, alphas_cumprod) -> torch.Tensor:
    """Per-record DDPM simple loss ‖ε − ε_θ(x_t, t)‖² (mean over pixels), shape (B,)."""
    a = alphas_cumprod[t].view(-1, 1, 1, 1)
    x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
    eps = model(x_t, t, y, extra)
    return ((eps - noise) ** 2).flatten(1).mean(1)


def train_denoiser(model: nn.Module, data: TrainData, alphas_cumprod: torch.Tensor, tcfg, ckpt_dir: Path, *,
                   name: str, seed: int, device, t_range: tuple[int, int] | None = None, desc: str | None = None,
                   steps: int | None = None, loss_fn: Callable | None = None) -> nn.Module:
    """Train ``model`` (ε-prediction) on ``data`` and return its EMA copy (eval mode).

    t is drawn uniformly from ``t_range`` = [lo, hi] inclusive (model timesteps; default all of [0, T−1]).
    Checkpoints ``<name>.safetensors`` (+ optimizer, + state json) every ``tcfg.checkpoint_every`` steps and
    at the end; an existing checkpoint is resumed and a finished one is loaded without training.

    ``tcfg.precision`` = bf16 runs the loss under bf16 autocast (weights, AdamW and EMA stay fp32);
    ``tcfg.channels_last`` and ``tcfg.compile`` change how the steps run, not what they compute. The loop never
    waits for the device inside a step: the loss is read back once per ``log_every`` steps.

    Under torchrun (privbench.core.distributed) the model is wrapped in DistributedDataParallel. Every rank draws
    the global batch of ``tcfg.batch_size`` records (indices, t, noise) from the same step generator and computes
    the loss on its own contiguous slice, weighted so that DDP's average over ranks is the mean over the global
    batch: the step is the single-process step. Rank 0 alone writes checkpoints and logs (the other ranks' writes
    are no-ops: core/io.is_writer). ``loss_fn`` must return one loss per record.
    """
    device = torch.device(device)
    steps = tcfg.steps if steps is None else steps
    T = alphas_cumprod.shape[0]
    lo, hi = t_range if t_range is not None else (0, T - 1)
    world = distributed.world_size()
    B = tcfg.batch_size
    distributed.check_global_batch(B)
    if distributed.is_main():
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        ckpt.clean(ckpt_dir, name)
    distributed.barrier()  # no rank reads the checkpoint while rank 0 tidies it
    model.to(device)
    channels_last = bool(getattr(tcfg, "channels_last", False))
    if channels_last:
        model.to(memory_format=torch.channels_last)
    ema = EMA(model, tcfg.ema_decay)
    opt = torch.optim.AdamW(model.parameters(), lr=tcfg.lr, weight_decay=tcfg.weight_decay)
    start = 0
    state = ckpt.read_state(ckpt_dir, name)
    if state is not None:
        ckpt.load_checkpoint_modules(ckpt_dir, name, {"model": model, "ema": ema.model}, device, state)
        start = int(state["step"])
        if start >= steps:
            return ema.model
        opt.load_state_dict(ckpt.load_checkpoint_optimizer(ckpt_dir, name, state))
        log(ckpt_dir.parent if ckpt_dir.name == "checkpoints" else ckpt_dir,
            f"[{name}] resumed from checkpoint at step {start}/{steps}")
    run_dir = ckpt_dir.parent if ckpt_dir.name == "checkpoints" else ckpt_dir
    ac = alphas_cumprod.to(device)
    loss_fn = loss_fn or diffusion_loss
    bf16 = getattr(tcfg, "precision", "fp32") == "bf16"
    net = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, device_ids=[device.index if device.index is not None
                                                         else torch.cuda.current_device()]
                                      if device.type == "cuda" else None)
    if getattr(tcfg, "compile", False):
        net = torch.compile(net)
    r_lo, r_hi = distributed.shard(B)
    if world > 1:  # dropout draws from the default RNG: each rank its own stream (same seed → same run)
        torch.manual_seed(distributed.rank_seed(seed, start))
    n = len(data)
    model.train()
    running, n_run = torch.zeros((), device=device), 0
    bar = progress.bar(total=steps, initial=start, desc=desc or f"train {name}", unit="step")

    def checkpoint(step):  # weights, optimizer and step as one unit (models/checkpoint.py)
        ckpt.save_checkpoint(ckpt_dir, name, ckpt.module_tensors({"model": model, "ema": ema.model}),
                             {"step": step, "steps": steps}, optim_state=opt.state_dict(), meta={"step": step})

    for step in range(start, steps):
        g = step_generator(seed, step, device)
        if data.weights is None:
            idx = torch.randint(0, n, (B,), generator=g, device=device)
        else:
            idx = torch.multinomial(data.weights, B, replacement=True, generator=g)
        t = torch.randint(lo, hi + 1, (B,), generator=g, device=device)
        noise = torch.randn((B, *data.x.shape[1:]), generator=g, device=device)
        if world > 1:  # this rank's slice of the global batch (all ranks drew the same one)
            idx, t, noise = idx[r_lo:r_hi], t[r_lo:r_hi], noise[r_lo:r_hi]
        x0 = data.x[idx]
        y = data.y[idx] if data.y is not None else None
        extra = data.extra[idx] if data.extra is not None else None
        if channels_last:
            x0 = x0.contiguous(memory_format=torch.channels_last)
            noise = noise.contiguous(memory_format=torch.channels_last)
        lr = tcfg.lr * min(1.0, (step + 1) / tcfg.warmup) if tcfg.warmup else tcfg.lr
        for group in opt.param_groups:
            group["lr"] = lr
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            losses = loss_fn(net, x0, y, extra, t, noise, ac)
        if world > 1:
            if losses.dim() != 1:
                raise ValueError("train_denoiser under torchrun: loss_fn must return one loss per record")
            loss = losses.float().sum() * (world / B)  # DDP averages over ranks: the global-batch mean
        else:
            loss = losses.float().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if tcfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg.grad_clip)
        opt.step()
        ema.update(model)
        running += loss.detach()
        n_run += 1
        if (step + 1) % tcfg.log_every == 0 or step + 1 == steps:
            # one host sync per log interval, not per step; under torchrun the mean over ranks (each rank's loss is
            # its slice's share, so the sum over ranks / world is the global-batch loss)
            avg = float(distributed.all_reduce_sum([running])[0]) / world / n_run
            if not math.isfinite(avg):
                log(run_dir, f"[{name}] loss diverged to {avg} at step {step + 1}; stopping")
                raise WorkFailed(f"training {name} diverged (loss {avg}) at step {step + 1}; see {run_dir}/log.txt")
            log(run_dir, f"[{name}] step {step + 1}/{steps} loss {avg:.5f} lr {lr:.2e}")
            bar.set_postfix(loss=f"{avg:.4f}")
            running, n_run = torch.zeros((), device=device), 0
        bar.update(1)
        if (step + 1) % tcfg.checkpoint_every == 0 or step + 1 == steps:
            checkpoint(step + 1)  # a no-op on ranks other than 0
    bar.close()
    distributed.barrier()  # the other ranks may read the final checkpoint next (is_trained, load_ema)
    ema.model.eval()
    return ema.model


def load_ema(model: nn.Module, ckpt_dir: Path, name: str, device) -> nn.Module:
    """Load the EMA weights of a finished training into ``model`` (checked against the checkpoint's manifest)."""
    ckpt.load_checkpoint_modules(ckpt_dir, name, {"ema": model}, device)
    return model.to(device).eval()


def is_trained(ckpt_dir: Path, name: str, steps: int) -> bool:
    """Checkpoint ``name`` exists, reached ``steps`` and its weights match its manifest."""
    try:
        st = ckpt.read_state(ckpt_dir, name)
        if st is None or int(st.get("step", 0)) < steps:
            return False
        ckpt.verify(ckpt_dir, name, st)
    except BadInput:
        return False
    return True
