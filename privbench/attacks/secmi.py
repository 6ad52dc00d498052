"""SecMI_stat (Duan et al., ICML 2023; official code ``jinhaoduan/SecMI``, ``mia_evals/secmia.py``).

DDIM inversion of the record to level c with stride k, one DDIM step up to c + k and back; the stored score is
−‖ψ(ϕ(x̃_c)) − x̃_c‖² (the t-error, summed over pixels). c is t_sec − k (``official``, default) or t_sec
(``paper``), t_sec = ``attack.secmi_t`` (latent targets: ``attack.secmi_t_latent``). docs/attacks.md §2.
"""
from __future__ import annotations

import torch

from ..core.config import setting
from ..core.errors import BadInput
from ..core.registry import ATTACKS
from ..core.schedule import ddim_step
from .base import Attack, AttackEnv, AttackOutput, Records, cond, swept_output, timestep_plan, tvec


def compare_level(t_sec: int, k: int, offset: str) -> int:
    """The level c at which the t-error is measured (c ↔ c + k)."""
    return t_sec if offset == "paper" else t_sec - k


def secmi_nfe(t_sec: int, k: int, offset: str) -> int:
    """Network evaluations per record: c/k inversion steps + 1 up + 1 down."""
    return compare_level(t_sec, k, offset) // k + 2


@torch.no_grad()
def t_error_pairs(target, xb: torch.Tensor, yb: torch.Tensor, levels, k: int) -> dict[int, tuple]:
    """For each level c in ``levels``: (x̃_c, ψ(ϕ(x̃_c))) — the DDIM inversion of the batch to level c and its
    one-step-up-and-back reconstruction (shared by SecMI_stat and SecMI-NN). Queries: max(levels)/k + 2 per level."""
    device = target.device
    ac = target.alphas_cumprod.to(device)
    c = cond(target, yb)
    n = xb.shape[0]
    wanted = set(levels)
    x = xb
    inverted = {0: xb} if 0 in wanted else {}
    for s in range(0, max(wanted), k):  # DDIM inversion s → s + k, query at s
        eps = target.predict_noise(x, tvec(s, n, device), c)
        x = ddim_step(x, eps, ac[s], ac[s + k])
        if s + k in wanted:
            inverted[s + k] = x
    out = {}
    for lvl in sorted(wanted):
        x_c = inverted[lvl]
        eps = target.predict_noise(x_c, tvec(lvl, n, device), c)
        x_up = ddim_step(x_c, eps, ac[lvl], ac[lvl + k])          # ϕ: c → c + k
        eps = target.predict_noise(x_up, tvec(lvl + k, n, device), c)
        out[lvl] = (x_c, ddim_step(x_up, eps, ac[lvl + k], ac[lvl]))  # ψ: c + k → c
    return out


@ATTACKS.register_class
class SecMI(Attack):
    name = "secmi"
    description = ("SecMI_stat: DDIM inversion to t_sec=100 (latent targets: 150), k=10, t-error of one step up and "
                   "back (official offset)")
    report_order = 20
    variant_settings = ("secmi_offset",)
    threat_model = {"queries": "eps-prediction (DDIM inversion and one step up and back)", "reference_models": 0,
                    "reference_training": "none", "auxiliary_data": "none",
                    "queries_per_record": "t_sec/k + 1 (official offset) or t_sec/k + 2 (paper)",
                    "source": "Duan et al., ICML 2023; `jinhaoduan/SecMI` `mia_evals/secmia.py`"}

    secmi_t: int = setting(100, lo=1, help="SecMI's t_sec on a pixel-space target (a multiple of secmi_k)")
    secmi_t_latent: int = setting(150, lo=1, help="SecMI's t_sec on a latent (VAE) target: SecMI-LDM's level "
                                                  "(a multiple of secmi_k)")
    secmi_k: int = setting(10, lo=1, help="SecMI's DDIM stride k")
    secmi_offset: str = setting("official", choices=["paper", "official"],
                                help="official code (default): error at t_sec-k vs t_sec (t_sec/k+1 NFEs); paper: "
                                     "t_sec vs t_sec+k (t_sec/k+2 NFEs)")
    sweep: list = setting([], help="timesteps to sweep (loss/pia/pian: t; secmi: t_sec), reported apart as an "
                                   "oracle choice")

    def _tsecs(self, num_timesteps: int, latent: bool = False) -> tuple[int, list[int], list[int]]:
        """(t_sec, the sweep's t_sec values, every distinct t_sec) for a latent or a pixel-space target, each
        checked."""
        k = int(self.secmi_k)
        key = "secmi_t_latent" if latent else "secmi_t"
        fixed, sweep, tsecs = timestep_plan(getattr(self, key), self.sweep, num_timesteps, f"attack.{key}")
        for what, t in [(f"attack.{key}", fixed)] + [("attack.sweep (secmi: values of t_sec)", s) for s in sweep]:
            if t % k != 0 or t < k:
                raise BadInput(f"{what}={t}: SecMI's t_sec must be a positive multiple of attack.secmi_k={k}")
            c = compare_level(t, k, self.secmi_offset)
            if c + k >= num_timesteps:
                raise BadInput(f"{what}={t}: the {self.secmi_offset} offset compares levels {c} and {c + k}; "
                               f"both must be < T={num_timesteps}")
        return fixed, sweep, tsecs

    def validate(self, num_timesteps: int, cfg=None) -> None:
        super().validate(num_timesteps, cfg)
        self._tsecs(num_timesteps, latent=False)
        # the latent level is checked here when set, else when a latent target is attacked (a pixel-space run
        # with another secmi_k must not be refused for a level it never uses)
        if "attack.secmi_t_latent" in getattr(cfg, "explicit", ()):
            self._tsecs(num_timesteps, latent=True)

    @torch.no_grad()
    def run(self, target, records: Records, env: AttackEnv | None = None) -> AttackOutput:
        del env  # part of the Attack.run interface; this attack queries the target on the records alone
        k = int(self.secmi_k)
        offset = self.secmi_offset
        latent = bool(target.capabilities.latent)
        fixed, sweep, tsecs = self._tsecs(target.num_timesteps, latent)
        levels = {ts: compare_level(ts, k, offset) for ts in tsecs}
        wanted = set(levels.values())
        top = max(wanted)
        out: dict[int, list[torch.Tensor]] = {ts: [] for ts in tsecs}
        for _, xb, yb in records.batches(self.batch_size, target.device):
            pairs = t_error_pairs(target, xb, yb, wanted, k)
            errs = {lvl: -(x_back - x_c).pow(2).flatten(1).sum(1) for lvl, (x_c, x_back) in pairs.items()}
            for ts in tsecs:
                out[ts].append(errs[levels[ts]])
        c = levels[fixed]
        nfe = secmi_nfe(fixed, k, offset)
        res = swept_output(out, fixed, sweep, top // k + 2 * len(wanted))
        res.figures = {
            "t_sec": fixed, "t_sec_setting": "secmi_t_latent" if latent else "secmi_t", "k": k, "offset": offset,
            "compared_levels": [c, c + k],
            "queries_per_record": nfe,
            "score": "-||psi(phi(x_c)) - x_c||^2 after DDIM inversion to level c (higher = member)",
        }
        res.notes.append(
            f"SecMI offset '{offset}': t-error at level {c} using level {c + k} "
            + ("(the paper's definition)" if offset == "paper" else "(as the official code: the level below t_sec)")
            + f"; {nfe} queries per record")
        return res
