"""What reference-model attacks (lira, rmia, gsa) receive and declare, and the loss statistic they share.

:class:`ReferenceModels` is filled by :mod:`privbench.runs.references` (or by hand in tests); the attack never sees
the target's membership labels through it. The loss statistic uses **fixed noise per record** (seeded by the
record's dataset index), so the target and every reference see the same x_t whatever the batch or device.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from ..core.config import setting
from ..core.errors import BadInput
from ..core.seeding import seeded_generator
from .base import Attack, Records, cond, tvec


class ReferenceAttack(Attack):
    """An attack that uses reference models (lira, rmia, gsa): how many, and on which pool they train."""
    #: the fewest reference models the attack can calibrate with
    min_references: ClassVar[int] = 1

    # each reference model is a training and a checkpoint on disk: 1024 is four times the largest count in LiRA's paper
    n_reference: int = setting(8, lo=1, hi=1024,
                               help="reference models of the target's method and config (lira, rmia, gsa)")
    reference_pool: str = setting("offline", choices=["offline", "online"],
                                  help="offline: references train on halves of records outside the evaluation "
                                       "split; online: on halves of the evaluation records (LiRA-online)")

    def validate(self, num_timesteps: int, cfg=None) -> None:
        super().validate(num_timesteps, cfg)
        if self.n_reference < self.min_references:
            raise BadInput(f"attack.n_reference={self.n_reference}: {self.name} needs at least "
                           f"{self.min_references} reference models")


#: the test preset's reference settings (seconds, not meaningful)
REFERENCE_TEST_PRESET = {"n_reference": 2}

_RECORD_NOISE_STREAM = 0x2EC02D


@dataclass
class ReferenceModels:
    """N reference targets and their training-set memberships.

    * ``targets``: N :class:`~privbench.models.target.Target` (same method, config and target name as the
      attacked target; their own seeds; trained on random halves of the pool).
    * ``in_masks``: (N, n_records) bool — evaluation record j was in reference r's training set (all False in the
      offline pool, where the pool is disjoint from the evaluation records).
    * ``pool`` and ``pool_in``: the pool records and (N, n_pool) membership, e.g. to train a classifier on
      reference-model data (GSA) or to tune RMIA's offline ``a`` on a reference model.
    * ``population``: records in no training set (neither the target's nor any reference's): RMIA's z.
    * ``mode``: ``offline`` or ``online``; ``seeds``: each reference's training seed.
    """
    targets: list
    in_masks: np.ndarray
    mode: str = "offline"
    pool: Records | None = None
    pool_in: np.ndarray | None = None
    population: Records | None = None
    seeds: list[int] = field(default_factory=list)
    store: str | None = None

    def __post_init__(self):
        self.in_masks = np.asarray(self.in_masks, dtype=bool)
        if self.in_masks.ndim != 2 or self.in_masks.shape[0] != len(self.targets):
            raise ValueError(f"in_masks must be (n_reference={len(self.targets)}, n_records); "
                             f"got {self.in_masks.shape}")
        if self.pool_in is not None:
            self.pool_in = np.asarray(self.pool_in, dtype=bool)

    def __len__(self) -> int:
        return len(self.targets)

    def describe(self) -> dict:
        d = {"n_reference": len(self), "pool": self.mode,
             "in_per_record_mean": float(self.in_masks.sum(0).mean()) if self.in_masks.size else 0.0,
             "seeds": list(self.seeds)}
        if self.pool is not None:
            d["pool_records"] = len(self.pool)
        if self.population is not None:
            d["population_records"] = len(self.population)
        if self.store:
            d["store"] = self.store
        return d


def require_references(env, what: str, minimum: int = 2) -> ReferenceModels:
    refs = getattr(env, "references", None) if env is not None else None
    if refs is None:
        raise BadInput(f"{what} needs reference models (env.references); run it through privbench's runner "
                       f"(privbench attack), which trains attack.n_reference of them")
    if len(refs) < minimum:
        raise BadInput(f"{what} needs at least {minimum} reference models; got {len(refs)} "
                       f"(attack.n_reference)")
    return refs


def record_noise(index: torch.Tensor, shape, seed: int, t: int, draw: int,
                 stream: int = _RECORD_NOISE_STREAM) -> torch.Tensor:
    """Noise of each record (rows of ``index``, dataset indices) for draw ``draw`` at timestep ``t``: one
    CPU generator per record seeded by (stream, seed, index, t, draw) — independent of batching and device.
    ``stream`` keeps one attack's draws apart from another's."""
    out = torch.empty((len(index), *shape))
    for row, i in enumerate(index.tolist()):
        g = seeded_generator("cpu", stream, seed, int(i), int(t), int(draw))
        out[row] = torch.randn(tuple(shape), generator=g)
    return out


@torch.no_grad()
def fixed_noise_losses(target, records: Records, t: int, n_draws: int, seed: int, batch_size: int) -> np.ndarray:
    """(n_records, n_draws) per-record diffusion losses mean((ε − ε_θ(√ᾱ_t x₀ + √(1−ᾱ_t) ε, t))²) — the mean
    over pixels (the training loss), with the record's fixed noise ε of each draw. n_draws queries per record."""
    device = target.device
    ac = target.alphas_cumprod.to(device)
    a = ac[t]
    shape = tuple(records.x.shape[1:])
    out = torch.empty((len(records), n_draws), dtype=torch.float64)
    for lo in range(0, len(records), batch_size):
        hi = min(len(records), lo + batch_size)
        xb = records.x[lo:hi].to(device)
        yb = records.y[lo:hi].to(device)
        c = cond(target, yb)
        for d in range(n_draws):
            eps = record_noise(records.index[lo:hi], shape, seed, t, d).to(device)
            x_t = a.sqrt() * xb + (1 - a).sqrt() * eps
            pred = target.predict_noise(x_t, tvec(t, hi - lo, device), c)
            out[lo:hi, d] = (eps - pred).pow(2).flatten(1).mean(1).double().cpu()
    return out.numpy()
