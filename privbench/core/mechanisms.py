"""The privacy mechanisms, one copy each: used by the methods that apply them, the attacks that simulate them
and the audits that test them.

* **PFDM's upload** (local DP per record): x̃ = √ᾱ_{t0}·CLIP(x, C) + √(1−ᾱ_{t0})·z, z ~ N(0, I), with
  CLIP(x, C) = x·min(1, C/‖x‖₂) over the whole image — a Gaussian mechanism with sensitivity 2C (replace-one) and
  noise σ = √((1−ᾱ)/ᾱ) on the scale of CLIP(x, C) (docs/accountants.md §1).
* **DP-SGD's Gaussian mechanism**: per-record gradients clipped to C as one flat vector, summed, N(0, σ²C²I)
  added, divided by the expected batch size q·N (docs/methods.md §5).
* **Per-record output sanitization** of DP-SAD's paper mode: each record's output gradient clipped to C plus its
  own N(0, σ²C²I) (not a sound DP guarantee for the parameters; docs/methods.md §6).

The noise is drawn from the generator the caller passes (seeded: reproducible benchmark noise).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from .errors import BadInput


# ------------------------------------------------------------------ clipping

def clip_l2(x: torch.Tensor, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """CLIP(x, C) = x·min(1, C/‖x‖₂) per record, L2 over the whole image (all channels and pixels).

    Returns (clipped records, bool mask of the records whose norm exceeded C)."""
    if not clip > 0:
        raise BadInput(f"clip={clip}: must be > 0")
    norms = x.flatten(1).norm(dim=1)
    scale = torch.clamp(clip / norms.clamp_min(1e-12), max=1.0)
    return x * scale.view(-1, *([1] * (x.dim() - 1))), norms > clip


# ------------------------------------------------------------------ PFDM's upload

def ldp_upload(x: torch.Tensor, clip: float, alpha_bar, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x̃ = √ᾱ·CLIP(x, C) + √(1−ᾱ)·noise, computed in the dtype of ``x`` (``alpha_bar``: a float or a 0-d tensor).

    Returns (uploads, mask of the records that were clipped)."""
    xc, was_clipped = clip_l2(x, clip)
    if torch.is_tensor(alpha_bar):
        a = alpha_bar.to(x.device)
        return a.sqrt() * xc + (1 - a).sqrt() * noise, was_clipped
    a = float(alpha_bar)
    return math.sqrt(a) * xc + math.sqrt(1.0 - a) * noise, was_clipped


def upload_sigma(alpha_bar: float) -> float:
    """Noise std of an upload on the scale of CLIP(x, C): σ = √((1−ᾱ)/ᾱ)."""
    return math.sqrt((1.0 - alpha_bar) / alpha_bar)


# ------------------------------------------------------------------ DP-SGD's Gaussian mechanism

def flat_norms(per_sample: Sequence[torch.Tensor]) -> torch.Tensor:
    """L2 norm of each record's whole gradient (all parameters together), shape (n,)."""
    per_param = torch.stack([torch.linalg.vector_norm(gs.reshape(gs.shape[0], -1), dim=1) for gs in per_sample])
    return torch.linalg.vector_norm(per_param, dim=0)


def clip_factors(norms: torch.Tensor, max_norm: float) -> torch.Tensor:
    """min(1, C/‖g‖): the factor that clips a record's gradient to norm ≤ C (flat clipping)."""
    return (max_norm / (norms + 1e-6)).clamp(max=1.0)


def clipped_sum(per_sample: Sequence[torch.Tensor], max_norm: float) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Σᵢ clip_C(gᵢ) per parameter, and the unclipped norms (n,)."""
    norms = flat_norms(per_sample)
    f = clip_factors(norms, max_norm)
    return [torch.tensordot(f, gs, dims=([0], [0])) for gs in per_sample], norms


def add_noise(summed: Sequence[torch.Tensor], noise_std: float, generator: torch.Generator | None) -> list[torch.Tensor]:
    """summed + N(0, noise_std² I) (noise_std = σ·C for DP-SGD), drawn from ``generator``."""
    out = []
    for s in summed:
        if noise_std > 0:
            z = torch.randn(s.shape, generator=generator, device=s.device, dtype=s.dtype)
            s = s + noise_std * z
        out.append(s)
    return out


def noisy_mean(summed: Sequence[torch.Tensor], noise_std: float, expected_batch: float,
               generator: torch.Generator | None) -> list[torch.Tensor]:
    """(Σᵢ clip_C(gᵢ) + N(0, noise_std² I)) / E[B]: the released DP-SGD gradient from the clipped sum."""
    return [g / expected_batch for g in add_noise(summed, noise_std, generator)]


def privatize(per_sample: Sequence[torch.Tensor], max_norm: float, noise_multiplier: float, expected_batch: float,
              generator: torch.Generator | None) -> tuple[list[torch.Tensor], torch.Tensor]:
    """DP-SGD's gradient: (Σᵢ clip_C(gᵢ) + N(0, σ²C² I)) / E[B]. Returns (gradients, unclipped norms)."""
    summed, norms = clipped_sum(per_sample, max_norm)
    return noisy_mean(summed, noise_multiplier * max_norm, expected_batch, generator), norms


# ------------------------------------------------------------------ per-record output sanitization

def sanitize_per_record(g: torch.Tensor, max_norm: float, noise_std: float, generator: torch.Generator | None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per record: clip_C(g_i) + N(0, noise_std² I) (noise_std = σ·C). Returns (noisy rows, unclipped norms)."""
    norms = g.flatten(1).norm(dim=1)
    f = clip_factors(norms, max_norm)
    clipped = g * f.view(-1, *([1] * (g.dim() - 1)))
    if noise_std > 0:
        z = torch.randn(clipped.shape, generator=generator, device=clipped.device, dtype=clipped.dtype)
        clipped = clipped + noise_std * z
    return clipped, norms
