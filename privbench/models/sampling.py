"""Samplers: DDPM ancestral (diffusers' DDPMScheduler.step) and deterministic DDIM (η = 0).

Both run a *partial* chain: they take x at model timestep ``t_start`` (its noise level is
``alphas_cumprod[t_start]``) and apply reverse steps down to ``t_stop``, returning x at level ``t_stop − 1``
(level −1 is clean data). The full chain is t_start = T−1, t_stop = 0; PFDM's coarse-to-fine sampler is two
such partial chains.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..core import progress
from ..core.schedule import ddim_step

EpsFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x_t, t) → ε̂ for a fixed condition


@torch.no_grad()
def ddpm_chain(eps_fn: EpsFn, x: torch.Tensor, t_start: int, t_stop: int, scheduler,
               generator: torch.Generator | None = None, desc: str | None = None) -> torch.Tensor:
    """Ancestral sampling x_{t_start} → x_{t_stop−1} with diffusers' DDPM step (t_start − t_stop + 1 NFEs)."""
    bar = progress.bar(total=t_start - t_stop + 1, desc=desc or "sample ddpm", unit="step")
    for t in range(t_start, t_stop - 1, -1):
        tt = torch.full((x.shape[0],), t, device=x.device, dtype=torch.long)
        eps = eps_fn(x, tt)
        x = scheduler.step(eps, t, x, generator=generator).prev_sample
        bar.update(1)
    bar.close()
    return x


def ddim_timesteps(t_start: int, t_stop: int, n_steps: int) -> list[int]:
    n_steps = max(1, min(n_steps, t_start - t_stop + 1))
    ts = np.unique(np.round(np.linspace(t_stop, t_start, n_steps)).astype(int))[::-1]
    return [int(t) for t in ts]


@torch.no_grad()
def ddim_chain(eps_fn: EpsFn, x: torch.Tensor, t_start: int, t_stop: int, alphas_cumprod: torch.Tensor,
               n_steps: int, clip_x0: bool = True, desc: str | None = None) -> torch.Tensor:
    """Deterministic DDIM from level t_start to level t_stop − 1 over ``n_steps`` network calls."""
    ts = ddim_timesteps(t_start, t_stop, n_steps)
    ac = alphas_cumprod.to(x.device)
    one = torch.ones((), device=x.device, dtype=ac.dtype)
    bar = progress.bar(total=len(ts), desc=desc or "sample ddim", unit="step")
    for i, t in enumerate(ts):
        nxt = ts[i + 1] if i + 1 < len(ts) else t_stop - 1
        tt = torch.full((x.shape[0],), t, device=x.device, dtype=torch.long)
        eps = eps_fn(x, tt)
        x = ddim_step(x, eps, ac[t], ac[nxt] if nxt >= 0 else one, clip_x0=clip_x0)
        bar.update(1)
    bar.close()
    return x
