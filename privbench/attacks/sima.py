"""SimA, the score-norm attack (Rao, Qu, Moyer, "Score-based membership inference on diffusion models",
arXiv 2509.25003, 2025; official code ``mx-ethan-rao/SimA``).

One query: the clean record x₀ fed to the ε-predictor at timestep t, no noise added; score −Σ|ε_θ(x₀, t)|^p
(higher = member; at a training record the posterior mean is the record itself, so the predicted noise is small).
SimA-MC (``sima@mc``): −(1/n) Σ_d Σ|ε_θ(√ᾱ_t x₀ + √(1−ᾱ_t) ε_d, t)|^p over n noise draws fixed per record — not
the clean-input score at n = 1. Conventions and why privbench's TPR differs from the paper's: docs/attacks.md §7.
"""
from __future__ import annotations

import torch

from ..core.config import setting
from ..core.registry import ATTACKS
from .base import Attack, AttackEnv, AttackOutput, Records, cond, swept_output, timestep_plan, tvec
from .references import record_noise


@ATTACKS.register_class
class SimA(Attack):
    name = "sima"
    description = "SimA: -sum|eps_theta(x0, t)|^4 of the unnoised record at t=100 (1 query)"
    report_order = 45
    variant_settings = ("sima_estimator",)
    threat_model = {"queries": "eps-prediction at the clean record x0 with timestep t (no noise added)",
                    "reference_models": 0, "reference_training": "none", "auxiliary_data": "none",
                    "queries_per_record": "1 (sima@mc: attack.sima_draws)",
                    "source": "Rao, Qu, Moyer, arXiv 2509.25003 (2025); `mx-ethan-rao/SimA`"}

    sima_t: int = setting(100, lo=0, help="SimA's model timestep: -sum|eps_theta(x0, t)|^p with x0 fed unnoised")
    p: float = setting(4.0, lo=0.0, lo_open=True, help="norm of PIA/PIAN")
    sweep: list = setting([], help="timesteps to sweep (loss/pia/pian: t; secmi: t_sec), reported apart as an "
                                   "oracle choice")
    sima_estimator: str = setting("clean", choices=["clean", "mc"], hashed_at_default=False,
                                  help="SimA: clean = eps_theta(x0, t) on the unnoised record (1 query); mc = "
                                       "SimA-MC, mean over attack.sima_draws noised x_t (fixed per record)")
    sima_draws: int = setting(10, lo=1, hashed_at_default=False,
                              help="SimA-MC: noise draws per record (queries per record)")

    def validate(self, num_timesteps: int, cfg=None) -> None:
        super().validate(num_timesteps, cfg)
        timestep_plan(self.sima_t, self.sweep, num_timesteps, "attack.sima_t")

    def threat(self) -> dict | None:
        d = super().threat()
        d["queries_per_record"] = int(self.sima_draws) if self.sima_estimator == "mc" else 1
        return d

    @torch.no_grad()
    def run(self, target, records: Records, env: AttackEnv | None = None) -> AttackOutput:
        t_fixed, t_sweep, ts = timestep_plan(self.sima_t, self.sweep, target.num_timesteps, "attack.sima_t")
        device = target.device
        p = float(self.p)
        mc = self.sima_estimator == "mc"
        n = int(self.sima_draws) if mc else 1
        seed = int(env.seed) if env is not None else 0
        ac = target.alphas_cumprod.to(device)
        shape = tuple(records.x.shape[1:])
        out: dict[int, list[torch.Tensor]] = {t: [] for t in ts}
        for lo in range(0, len(records), self.batch_size):
            hi = min(len(records), lo + self.batch_size)
            xb = records.x[lo:hi].to(device)
            c = cond(target, records.y[lo:hi].to(device))
            for t in ts:
                total = torch.zeros(hi - lo, device=device)
                for d in range(n):
                    x_in = xb
                    if mc:
                        eps = record_noise(records.index[lo:hi], shape, seed, t, d).to(device)
                        x_in = ac[t].sqrt() * xb + (1 - ac[t]).sqrt() * eps
                    total += target.predict_noise(x_in, tvec(t, hi - lo, device), c).abs().pow(p).flatten(1).sum(1)
                out[t].append(-total / n)
        res = swept_output(out, t_fixed, t_sweep, n * len(ts))
        res.figures = {"t": t_fixed, "p": p, "estimator": self.sima_estimator, "draws": n, "queries_per_record": n,
                       "queries_per_record_with_sweep": n * len(ts),
                       "score": (f"-mean_d sum|eps_theta(sqrt(ab) x0 + sqrt(1-ab) eps_d, t)|^{p:g}, {n} fixed noise "
                                 f"draws per record (SimA-MC)" if mc else
                                 f"-sum|eps_theta(x0, t)|^{p:g}, x0 unnoised") + " (higher = member)"}
        return res
