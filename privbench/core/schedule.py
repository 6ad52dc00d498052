"""Noise schedule (via diffusers) and the one t0 indexing convention: model timesteps are 0-indexed; PFDM's ``t0``
is 1-indexed as in the paper, ᾱ_{t0} = ``alphas_cumprod[t0 - 1]`` (docs/conventions.md §4); ``t0_to_model_t`` is
the only place this shift happens.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import BadInput


def make_scheduler(num_timesteps: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02,
                   beta_schedule: str = "linear", variance_type: str = "fixed_small", clip_sample: bool = True):
    from diffusers import DDPMScheduler  # lazy: diffusers (seconds to import) only where a scheduler object is built

    return DDPMScheduler(num_train_timesteps=num_timesteps, beta_start=beta_start, beta_end=beta_end,
                         beta_schedule=beta_schedule, variance_type=variance_type, clip_sample=clip_sample,
                         prediction_type="epsilon")


def alphas_cumprod(num_timesteps: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02,
                   beta_schedule: str = "linear") -> torch.Tensor:
    """ᾱ as a float64 tensor, entry t for 0-indexed model timestep t (computed in float64, unlike
    diffusers' float32, so that accountants agree to many digits)."""
    if beta_schedule == "linear":
        betas = torch.linspace(beta_start, beta_end, num_timesteps, dtype=torch.float64)
    elif beta_schedule == "scaled_linear":
        betas = torch.linspace(beta_start ** 0.5, beta_end ** 0.5, num_timesteps, dtype=torch.float64) ** 2
    else:
        sched = make_scheduler(num_timesteps, beta_start, beta_end, beta_schedule)
        return sched.alphas_cumprod.to(torch.float64)
    return torch.cumprod(1.0 - betas, dim=0)


def t0_to_model_t(t0: int, num_timesteps: int = 1000) -> int:
    """Paper's 1-indexed t0 → 0-indexed model timestep (t0 − 1). Validates the range [1, T]."""
    if not isinstance(t0, int) or isinstance(t0, bool) or t0 < 1 or t0 > num_timesteps:
        raise BadInput(f"t0={t0!r}: must be an integer in [1, {num_timesteps}] (1-indexed as in the paper)")
    return t0 - 1


@dataclass
class Schedule:
    """The schedule a model was trained with; ``alphas_cumprod`` is float32 on the model's device."""
    num_timesteps: int
    beta_start: float
    beta_end: float
    beta_schedule: str
    variance_type: str

    @classmethod
    def from_config(cls, d) -> "Schedule":
        return cls(d.num_timesteps, d.beta_start, d.beta_end, d.beta_schedule, d.variance_type)

    def alphas_cumprod(self, device=None) -> torch.Tensor:
        return alphas_cumprod(self.num_timesteps, self.beta_start, self.beta_end, self.beta_schedule).float().to(device)

    def scheduler(self, clip_sample: bool = True):
        return make_scheduler(self.num_timesteps, self.beta_start, self.beta_end, self.beta_schedule,
                              self.variance_type, clip_sample)


def ddim_step(x: torch.Tensor, eps: torch.Tensor, a_t: torch.Tensor, a_next: torch.Tensor,
              clip_x0: bool = False) -> torch.Tensor:
    """Deterministic DDIM move from level ᾱ_t to level ᾱ_next (either direction: also DDIM inversion)."""
    x0 = (x - (1 - a_t).sqrt() * eps) / a_t.sqrt()
    if clip_x0:
        x0 = x0.clamp(-1, 1)
    return a_next.sqrt() * x0 + (1 - a_next).sqrt() * eps
