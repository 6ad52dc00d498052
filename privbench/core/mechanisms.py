"""The privacy mechanisms, one copy each (methods apply them, attacks simulate them, audits test them): PFDM's
upload (docs/accountants.md §1), DP-SGD's Gaussian mechanism (docs/methods.md §5) and DP-SAD paper mode's
per-record output sanitization (docs/methods.md §6), with their noise drawn from a seeded generator or from
OS entropy (:data:`SECURE`; ``dp.noise_source``, docs/methods.md §0).
"""
from __future__ import annotations

import math
import os
import secrets
from typing import Callable, Sequence, Union

import numpy as np
import torch

from .constants import SEEDED_NOISE_LABEL
from .errors import BadInput

NOISE_SOURCES = ("seeded", "secure")


# ------------------------------------------------------------------ noise source

class SecureNoise:
    """Passed where a ``torch.Generator`` is expected: the draw comes from OS entropy (``os.urandom``), never seeded
    or stored."""

    def __repr__(self) -> str:
        return "SECURE"


SECURE = SecureNoise()
Source = Union[torch.Generator, SecureNoise, None]


def check_noise_source(source: str) -> str:
    if source not in NOISE_SOURCES:
        raise BadInput(f"dp.noise_source={source!r}: choose seeded or secure")
    return source


def noise_generator(source: str, seeded: torch.Generator | None) -> Source:
    """What the privacy noise is drawn from: the caller's seeded generator, or :data:`SECURE`."""
    return seeded if check_noise_source(source) == "seeded" else SECURE


def noise_source_basis(source: str) -> str:
    """The clause every ε basis ends with: where the privacy randomness came from."""
    if check_noise_source(source) == "seeded":
        return (f"noise source: seeded from the run's seed ({SEEDED_NOISE_LABEL}: anyone who knows the seed can "
                "regenerate and subtract the noise, and the epsilon assumes it secret)")
    return "noise source: secure (OS entropy, never stored)"


def secure_generator(device) -> torch.Generator:
    """A torch generator seeded with 63 bits from ``secrets``, never stored: for a private step's other draws
    (DP-SGD's timesteps and diffusion noise), which with a public seed would reveal who was sampled."""
    g = torch.Generator(device=device)
    g.manual_seed(secrets.randbits(63))
    return g


def _urandom_unit(n: int) -> np.ndarray:
    """n uniform doubles in [0, 1) with 53 random bits each, from os.urandom."""
    raw = np.frombuffer(os.urandom(8 * n), dtype=np.uint64)
    return (raw >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def secure_uniform(n: int, device=None) -> torch.Tensor:
    """n uniforms in [0, 1) (float64) from OS entropy."""
    return torch.from_numpy(_urandom_unit(n)).to(device)


def secure_normal(shape, *, device=None, dtype=torch.float32) -> torch.Tensor:
    """N(0, I) of ``shape`` from OS entropy: Box–Muller on os.urandom uniforms, in float64, then cast."""
    n = math.prod(shape)
    half = (n + 1) // 2
    u1 = 1.0 - _urandom_unit(half)  # (0, 1]: log is finite
    u2 = _urandom_unit(half)
    r = np.sqrt(-2.0 * np.log(u1))
    z = np.concatenate([r * np.cos(2.0 * np.pi * u2), r * np.sin(2.0 * np.pi * u2)])[:n]
    return torch.from_numpy(z.reshape(tuple(shape))).to(device=device, dtype=dtype)


def poisson_sample(n: int, rate: float, generator: Source, device=None) -> torch.Tensor:
    """Indices of the records that join a Poisson sample: each of ``n`` independently with probability ``rate``,
    from ``generator`` (seeded) or from OS entropy (:data:`SECURE`: amplification by subsampling assumes nobody
    knows who was sampled)."""
    if isinstance(generator, SecureNoise):
        u = secure_uniform(n, device)
    else:
        u = torch.rand(n, generator=generator, device=device)
    return (u < rate).nonzero().squeeze(1)


def gaussian(shape, generator: Source, *, device=None, dtype=torch.float32) -> torch.Tensor:
    """N(0, I) privacy noise from ``generator`` (seeded) or from OS entropy (:data:`SECURE`)."""
    if isinstance(generator, SecureNoise):
        return secure_normal(shape, device=device, dtype=dtype)
    return torch.randn(shape, generator=generator, device=device, dtype=dtype)


# ------------------------------------------------------------------ clipping

def clip_l2(x: torch.Tensor, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """CLIP(x, C) = x·min(1, C/‖x‖₂) per record, L2 over the whole image (all channels and pixels); returns
    (clipped records, bool mask of the records whose norm exceeded C)."""
    if not clip > 0:
        raise BadInput(f"clip={clip}: must be > 0")
    norms = x.flatten(1).norm(dim=1)
    scale = torch.clamp(clip / norms.clamp_min(1e-12), max=1.0)
    return x * scale.view(-1, *([1] * (x.dim() - 1))), norms > clip


# ------------------------------------------------------------------ PFDM's upload

def ldp_upload(x: torch.Tensor, clip: float, alpha_bar, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x̃ = √ᾱ·CLIP(x, C) + √(1−ᾱ)·noise, computed in the dtype of ``x`` (``alpha_bar``: a float or a 0-d tensor);
    returns (uploads, mask of the records that were clipped)."""
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


def add_noise(summed: Sequence[torch.Tensor], noise_std: float, generator: Source) -> list[torch.Tensor]:
    """summed + N(0, noise_std² I) (noise_std = σ·C for DP-SGD), drawn from ``generator``."""
    out = []
    for s in summed:
        if noise_std > 0:
            z = gaussian(s.shape, generator, device=s.device, dtype=s.dtype)
            s = s + noise_std * z
        out.append(s)
    return out


def noisy_mean(summed: Sequence[torch.Tensor], noise_std: float, expected_batch: float, generator: Source,
               combine: Callable[[list[torch.Tensor]], list[torch.Tensor]] | None = None) -> list[torch.Tensor]:
    """(Σᵢ clip_C(gᵢ) + N(0, noise_std² I)) / E[B]: the released DP-SGD gradient from the clipped sum.

    ``combine`` runs on the noised sums before the division (torchrun: the all-reduce; ranks other than 0 pass
    ``noise_std=0``). ``_foreach_div`` divides on every device (CUDA's ``tensor / float`` multiplies by the
    reciprocal, up to one bit off)."""
    noised = add_noise(summed, noise_std, generator)
    if combine is not None:
        noised = combine(noised)
    return list(torch._foreach_div(list(noised), expected_batch))


def privatize(per_sample: Sequence[torch.Tensor], max_norm: float, noise_multiplier: float, expected_batch: float,
              generator: torch.Generator | None) -> tuple[list[torch.Tensor], torch.Tensor]:
    """DP-SGD's gradient: (Σᵢ clip_C(gᵢ) + N(0, σ²C² I)) / E[B]. Returns (gradients, unclipped norms)."""
    summed, norms = clipped_sum(per_sample, max_norm)
    return noisy_mean(summed, noise_multiplier * max_norm, expected_batch, generator), norms


# ------------------------------------------------------------------ per-record output sanitization

def sanitize_per_record(g: torch.Tensor, max_norm: float, noise_std: float, generator: Source
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per record: clip_C(g_i) + N(0, noise_std² I) (noise_std = σ·C). Returns (noisy rows, unclipped norms)."""
    norms = g.flatten(1).norm(dim=1)
    f = clip_factors(norms, max_norm)
    clipped = g * f.view(-1, *([1] * (g.dim() - 1)))
    if noise_std > 0:
        z = gaussian(clipped.shape, generator, device=clipped.device, dtype=clipped.dtype)
        clipped = clipped + noise_std * z
    return clipped, norms
