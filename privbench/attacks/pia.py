"""PIA and PIAN (Kong et al., ICLR 2024; official code ``kong13661/PIA``, ``DDPM/components.py``).

PIA: ε₀ = ε_θ(x₀, 0), x_t = √ᾱ_t·x₀ + √(1−ᾱ_t)·ε₀ (no fresh noise), score −Σ|ε₀ − ε_θ(x_t, t)|^p (2 queries;
a sweep reuses ε₀). PIAN rescales ε₀ to mean|ε₀| = √(2/π) first. docs/attacks.md §3.
"""
from __future__ import annotations

import torch

from ..core.config import setting
from ..core.registry import ATTACKS
from .base import AttackEnv, AttackOutput, Records, TimestepAttack, cond, sqrt2_over_pi, swept_output, tvec


def pian_normalize(eps0: torch.Tensor) -> torch.Tensor:
    """ε₀ · √(2/π) / mean|ε₀| per record (mean over all non-batch dimensions), as the official PIAN."""
    dims = tuple(range(1, eps0.dim()))
    return eps0 / eps0.abs().mean(dim=dims, keepdim=True) * sqrt2_over_pi()


@ATTACKS.register_class
class PIA(TimestepAttack):
    name = "pia"
    description = "PIA: eps0 = eps_theta(x0, 0), -sum|eps0 - eps_theta(x_t, t)|^4 at t=200 (2 queries)"
    report_order = 30
    normalize = False
    threat_model = {"queries": "eps-prediction at x0 (t=0) and at x_t built from it", "reference_models": 0,
                    "reference_training": "none", "auxiliary_data": "none", "queries_per_record": 2,
                    "source": "Kong et al., ICLR 2024; `kong13661/PIA`"}

    p: float = setting(4.0, lo=0.0, lo_open=True, help="norm of PIA/PIAN")

    @torch.no_grad()
    def run(self, target, records: Records, env: AttackEnv | None = None) -> AttackOutput:
        del env  # part of the Attack.run interface; this attack queries the target on the records alone
        t_fixed, t_sweep, ts = self.timesteps(target.num_timesteps)  # ε₀ is computed once and reused for all
        device = target.device
        ac = target.alphas_cumprod.to(device)
        p = float(self.p)
        out: dict[int, list[torch.Tensor]] = {t: [] for t in ts}
        for _, xb, yb in records.batches(self.batch_size, device):
            c = cond(target, yb)
            n = xb.shape[0]
            eps0 = target.predict_noise(xb, tvec(0, n, device), c)
            if self.normalize:
                eps0 = pian_normalize(eps0)
            for t in ts:
                a = ac[t]
                x_t = a.sqrt() * xb + (1 - a).sqrt() * eps0
                eps_t = target.predict_noise(x_t, tvec(t, n, device), c)
                out[t].append(-(eps0 - eps_t).abs().pow(p).flatten(1).sum(1))
        res = swept_output(out, t_fixed, t_sweep, 1 + len(ts))
        res.figures = {"t": t_fixed, "p": p, "queries_per_record": 2, "queries_per_record_with_sweep": 1 + len(ts),
                       "score": f"-sum|eps0 - eps_theta(x_t, t)|^{p:g} (higher = member)"}
        if self.normalize:
            res.figures["pian_scale"] = "eps0 * sqrt(2/pi) / mean|eps0| (official PIA code)"
            res.notes.append("PIAN rescales eps0 to mean |eps0| = sqrt(2/pi) = E|N(0,1)| as the official PIA code; "
                             "the CDI re-implementation's sqrt(pi/2) (a factor pi/2 larger) is not followed")
        return res
