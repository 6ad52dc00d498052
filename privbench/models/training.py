"""Non-private denoiser training: the DDPM loss, its step strategy (AdamW, grad clipping, DDP) and
:func:`train_denoiser`, which runs it in the one training loop (models/loop.py: warm-up, EMA, checkpoints and
exact resume). The same config + seed gives the same weights on CPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..core import distributed
from ..core.errors import BadInput
from ..core.seeding import step_generator
from . import checkpoint as ckpt
from .loop import StepStrategy, Summary, train_loop


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


def diffusion_loss(model: nn.Module, x0, y, extra, t, noise, alphas_cumprod) -> torch.Tensor:
    """Per-record DDPM simple loss ‖ε − ε_θ(x_t, t)‖² (mean over pixels), shape (B,)."""
    a = alphas_cumprod[t].view(-1, 1, 1, 1)
    x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
    eps = model(x_t, t, y, extra)
    return ((eps - noise) ** 2).flatten(1).mean(1)


class PlainStep(StepStrategy):
    """The non-private step: a batch of ``tcfg.batch_size`` records drawn with replacement (or by ``data.weights``),
    t uniform on [lo, hi], the per-record loss averaged, backward, global grad-norm clipping, AdamW. Under torchrun
    each rank computes its slice of the same global batch in DistributedDataParallel (docs/scaling.md §2)."""

    def __init__(self, data: TrainData, alphas_cumprod: torch.Tensor, tcfg, device, t_range: tuple[int, int],
                 loss_fn: Callable):
        self.data, self.tcfg, self.t_range, self.loss_fn = data, tcfg, t_range, loss_fn
        self.batch = tcfg.batch_size
        distributed.check_global_batch(self.batch)
        self.ac = alphas_cumprod.to(torch.device(device))
        self.net: nn.Module | None = None

    def optimizer(self, model, tcfg):
        return torch.optim.AdamW(model.parameters(), lr=tcfg.lr, weight_decay=tcfg.weight_decay)

    def prepare(self, run):
        net = run.model
        if distributed.is_distributed():
            device = run.device
            net = DistributedDataParallel(net, device_ids=[device.index if device.index is not None
                                                           else torch.cuda.current_device()]
                                          if device.type == "cuda" else None)
        if getattr(self.tcfg, "compile", False):
            net = torch.compile(net)
        self.net = net

    def batch_draws(self, step, run):
        """(x0, y, extra, t, noise) of this rank's share of step ``step``'s global batch."""
        data, device, B = self.data, run.device, self.batch
        g = step_generator(run.seed, step, device)
        if data.weights is None:
            idx = torch.randint(0, len(data), (B,), generator=g, device=device)
        else:
            idx = torch.multinomial(data.weights, B, replacement=True, generator=g)
        lo, hi = self.t_range
        t = torch.randint(lo, hi + 1, (B,), generator=g, device=device)
        noise = torch.randn((B, *data.x.shape[1:]), generator=g, device=device)
        if distributed.is_distributed():  # this rank's slice of the global batch (all ranks drew the same one)
            r_lo, r_hi = distributed.shard(B)
            idx, t, noise = idx[r_lo:r_hi], t[r_lo:r_hi], noise[r_lo:r_hi]
        x0 = data.x[idx]
        if run.channels_last:
            x0 = x0.contiguous(memory_format=torch.channels_last)
            noise = noise.contiguous(memory_format=torch.channels_last)
        return (x0, data.y[idx] if data.y is not None else None,
                data.extra[idx] if data.extra is not None else None, t, noise)

    def gradients(self, step, run):
        x0, y, extra, t, noise = self.batch_draws(step, run)
        with torch.autocast(run.device.type, dtype=torch.bfloat16, enabled=run.bf16):
            losses = self.loss_fn(self.net, x0, y, extra, t, noise, self.ac)
        world = distributed.world_size()
        if world > 1:
            if losses.dim() != 1:
                raise ValueError("train_denoiser under torchrun: loss_fn must return one loss per record")
            loss = losses.float().sum() * (world / self.batch)  # DDP averages over ranks: the global-batch mean
        else:
            loss = losses.float().mean()
        loss.backward()
        if self.tcfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(run.model.parameters(), self.tcfg.grad_clip)
        return {"loss": loss.detach()}

    def summarize(self, sums, n, step, run):
        del step, run  # part of the StepStrategy.summarize interface
        # one host sync per log interval; under torchrun the sum over ranks / world is the global-batch loss
        avg = float(distributed.all_reduce_sum([sums["loss"]])[0]) / distributed.world_size() / n
        return Summary(avg, shown=f"loss {avg:.5f} ", postfix=f"{avg:.4f}")


def train_denoiser(model: nn.Module, data: TrainData, alphas_cumprod: torch.Tensor, tcfg, ckpt_dir: Path, *,
                   name: str, seed: int, device, t_range: tuple[int, int] | None = None, desc: str | None = None,
                   steps: int | None = None, loss_fn: Callable | None = None) -> nn.Module:
    """Train ``model`` (ε-prediction) on ``data`` and return its EMA copy (eval mode): :func:`train_loop`
    (models/loop.py) with a :class:`PlainStep`.

    t is drawn uniformly from ``t_range`` = [lo, hi] inclusive (model timesteps; default all of [0, T−1]);
    ``loss_fn`` must return one loss per record. ``tcfg.precision`` = bf16 runs the loss under bf16 autocast
    (weights, AdamW and EMA stay fp32)."""
    T = alphas_cumprod.shape[0]
    step = PlainStep(data, alphas_cumprod, tcfg, device, t_range if t_range is not None else (0, T - 1),
                     loss_fn or diffusion_loss)
    return train_loop(model, step, tcfg, ckpt_dir, name=name, seed=seed, device=device,
                      steps=tcfg.steps if steps is None else steps, desc=desc)


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
