"""Seeded random streams: every random draw of privbench comes from a generator seeded by integers, so the same
config and seed give the same numbers on CPU, and a resumed run follows the uninterrupted trajectory."""
from __future__ import annotations

import numpy as np
import torch


def sub_seed(seed: int, *tags: int) -> int:
    """A deterministic child seed for (seed, tags…): distinct streams per client / role / round."""
    return int(np.random.SeedSequence([int(seed), *[int(t) for t in tags]]).generate_state(1)[0])


def seeded_generator(device, *parts: int) -> torch.Generator:
    """A generator on ``device`` seeded by a tuple of integers (FNV-style hash; reproducible per batch size)."""
    h = 1469598103934665603
    for p in parts:
        h = ((h ^ (int(p) & 0xFFFFFFFFFFFF)) * 1099511628211) % (2 ** 63 - 1)
    g = torch.Generator(device=device)
    g.manual_seed(h)
    return g


def step_generator(seed: int, step: int, device) -> torch.Generator:
    """The generator of one training step: (seed, step) → the batch, timesteps, noise (and DP noise)."""
    g = torch.Generator(device=device)
    g.manual_seed((seed * 1_000_003 + step * 7919 + 12345) % (2 ** 63))
    return g
