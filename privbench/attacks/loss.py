"""Naive loss-threshold attack (Matsumoto et al. 2023; PIA's "NA"; docs/attacks.md §1): score
−‖ε − ε_θ(√ᾱ_t·x₀ + √(1−ᾱ_t)·ε, t)‖², averaged over ``attack.n_draws`` draws seeded by (seed, t, draw, batch).
"""
from __future__ import annotations

import torch

from ..core.config import setting
from ..core.registry import ATTACKS
from ..core.seeding import seeded_generator
from .base import AttackEnv, AttackOutput, Records, TimestepAttack, cond, swept_output, tvec

_LOSS_STREAM = 0x10552


def loss_noise(shape, device, seed: int, t: int, draw: int, batch: int) -> torch.Tensor:
    """The noise draw the loss attack uses for one batch (exposed so tests can recompute the score)."""
    g = seeded_generator(device, _LOSS_STREAM, seed, t, draw, batch)
    return torch.randn(shape, generator=g, device=device)


@ATTACKS.register_class
class LossAttack(TimestepAttack):
    name = "loss"
    description = "loss threshold: -||eps - eps_theta(x_t, t)||^2 at t=200 (n_draws seeded draws)"
    report_order = 10
    threat_model = {"queries": "eps-prediction at x_t = sqrt(ab) x0 + sqrt(1-ab) eps", "reference_models": 0,
                    "reference_training": "none", "auxiliary_data": "none", "queries_per_record": "attack.n_draws",
                    "source": "Matsumoto et al. 2023; PIA's `NaiveAttacker`"}

    n_draws: int = setting(1, lo=1, help="noise draws averaged by the loss attack")

    @torch.no_grad()
    def run(self, target, records: Records, env: AttackEnv | None = None) -> AttackOutput:
        env = env or AttackEnv()
        t_fixed, t_sweep, ts = self.timesteps(target.num_timesteps)
        device = target.device
        ac = target.alphas_cumprod.to(device)
        k = int(self.n_draws)
        out: dict[int, list[torch.Tensor]] = {t: [] for t in ts}
        for b, xb, yb in records.batches(self.batch_size, device):
            c = cond(target, yb)
            n = xb.shape[0]
            for t in ts:
                a = ac[t]
                total = torch.zeros(n, device=device)
                for d in range(k):
                    eps = loss_noise(xb.shape, device, env.seed, t, d, b)
                    x_t = a.sqrt() * xb + (1 - a).sqrt() * eps
                    total += (eps - target.predict_noise(x_t, tvec(t, n, device), c)).pow(2).flatten(1).sum(1)
                out[t].append(-(total / k))
        res = swept_output(out, t_fixed, t_sweep, k * len(ts))
        res.figures = {"t": t_fixed, "n_draws": k, "queries_per_record": k,
                       "score": "-mean over draws of ||eps - eps_theta(x_t, t)||^2 (higher = member)"}
        return res
