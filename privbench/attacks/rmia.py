"""RMIA, the relative membership inference attack (Zarifzadeh, Liu, Shokri, "Low-cost high-power membership
inference attacks", ICML 2024; official code ``privacytrustlab/ml_privacy_meter``).

LR(x) = Pr(x | θ) / Pr(x) with the likelihood proxy Pr(x | θ) = exp(−s(x)), s the ``attack.statistic`` (default
the fixed-noise loss), and Pr(x) from the reference models (online: their mean; offline: ½((1 + a)·mean_OUT +
(1 − a))). Score (higher = member): the fraction of population records z with LR(x)/LR(z) > γ.
Details and conventions: docs/attacks.md §7, docs/attacks-threat-models.md ("RMIA").
"""
from __future__ import annotations

import numpy as np

from ..core.config import setting
from ..core.errors import BadInput
from ..core.registry import ATTACKS
from ..metrics.roc import auc
from .base import AttackEnv, AttackOutput, Records, check_timestep
from .references import REFERENCE_TEST_PRESET, ReferenceAttack, require_references
from .statistics import StatisticAttack

A_GRID = tuple(round(0.1 * i, 1) for i in range(11))


def pr_reference(p_refs: np.ndarray, in_mask: np.ndarray | None, *, online: bool, a: float) -> np.ndarray:
    """Pr(x) per record from the references' likelihoods (refs × records) and their membership."""
    p_refs = np.asarray(p_refs, dtype=np.float64)
    if online:
        return p_refs.mean(axis=0)
    out = np.ones_like(p_refs, dtype=bool) if in_mask is None else ~np.asarray(in_mask, dtype=bool)
    n_out = out.sum(axis=0)
    if (n_out == 0).any():
        raise BadInput(f"rmia offline: {int((n_out == 0).sum())} records have no OUT reference model")
    mean_out = (p_refs * out).sum(axis=0) / n_out
    return 0.5 * ((1.0 + a) * mean_out + (1.0 - a))


def rmia_scores(p_x: np.ndarray, p_refs_x: np.ndarray, in_masks: np.ndarray, p_z: np.ndarray,
                p_refs_z: np.ndarray, *, online: bool, a: float, gamma: float) -> np.ndarray:
    """score(x) = mean_z 1[(p(x|θ)/Pr(x)) / (p(z|θ)/Pr(z)) > γ]."""
    lr_x = np.asarray(p_x, dtype=np.float64) / pr_reference(p_refs_x, in_masks, online=online, a=a)
    lr_z = np.asarray(p_z, dtype=np.float64) / pr_reference(p_refs_z, None, online=online, a=a)
    return (lr_x[:, None] > gamma * lr_z[None, :]).mean(axis=1)


def tune_a(p_pool: np.ndarray, pool_in: np.ndarray, p_z: np.ndarray, gamma: float) -> tuple[float, dict]:
    """The official ``tune_offline_a``: reference 0 is attacked with references 1.. on the pool records that
    have at least one OUT reference among them; the a of the best AUC (first on ties)."""
    p_pool, pool_in = np.asarray(p_pool), np.asarray(pool_in, dtype=bool)
    usable = (~pool_in[1:]).any(axis=0)
    labels = pool_in[0, usable].astype(int)
    if labels.min() == labels.max():
        raise BadInput("rmia: cannot tune attack.rmia_a (the pool has no member/non-member pair for the paired "
                       "reference model); set attack.rmia_a in [0, 1]")
    aucs = {}
    for a in A_GRID:
        sc = rmia_scores(p_pool[0, usable], p_pool[1:, usable], pool_in[1:, usable], p_z[0], p_z[1:],
                         online=False, a=a, gamma=gamma)
        aucs[a] = auc(sc, labels)
    best = max(A_GRID, key=lambda a: (aucs[a], -a))
    return best, {"tuning_auc": {f"{a:.1f}": round(v, 4) for a, v in aucs.items()}, "tuning_records": int(usable.sum())}


@ATTACKS.register_class
class RMIA(ReferenceAttack, StatisticAttack):
    name = "rmia"
    description = ("RMIA: share of population z with LR(x)/LR(z) > gamma, LR from reference models (default: "
                   "the fixed-noise loss; rmia@sima: SimA's statistic)")
    report_order = 80
    needs_references = True
    min_references = 2
    text_conditioning = False  # its reference models retrain the target's own recipe
    variant_settings = ("reference_pool", "statistic")
    settings_presets = {"test": {**REFERENCE_TEST_PRESET, "rmia_population": 64}}
    threat_model = {"queries": "eps-prediction at x_t with fixed per-record noise (target and references)",
                    "reference_models": "attack.n_reference",
                    "reference_training": "the target's own method and config, each on a random half of the "
                                          "pool (offline: records outside the evaluation split; online: the "
                                          "evaluation records)",
                    "auxiliary_data": "attack.rmia_population population records z (in no training set) and "
                                      "the reference pool",
                    "queries_per_record": "attack.lira_draws on the target (+ the population's, + as many on each "
                                          "reference)",
                    "source": "Zarifzadeh, Liu, Shokri, ICML 2024; `privacytrustlab/ml_privacy_meter`"}

    rmia_a: float = setting(-1.0, lo=-1.0, hi=1.0,
                            help="RMIA offline a in [0,1] (Pr(x) = ((1+a)Pr_out(x) + 1-a)/2); -1 = tune on a "
                                 "reference model as the official code")
    rmia_gamma: float = setting(1.0, lo=0.0, lo_open=True,
                                help="RMIA's gamma: score = share of z with LR_x/LR_z > gamma")
    rmia_population: int = setting(256, lo=1, help="RMIA population records z (outside the evaluation split and pool)")

    def validate(self, num_timesteps: int, cfg=None) -> None:
        super().validate(num_timesteps, cfg)
        if not (self.rmia_a == -1 or 0.0 <= self.rmia_a <= 1.0):
            raise BadInput(f"attack.rmia_a={self.rmia_a}: a value in [0, 1], or -1 to tune it on a reference model")

    def population_size(self) -> int:
        return int(self.rmia_population)

    def run(self, target, records: Records, env: AttackEnv | None = None) -> AttackOutput:
        env = env or AttackEnv()
        refs = require_references(env, "rmia")
        if refs.population is None or len(refs.population) == 0:
            raise BadInput("rmia needs population records z (records in no training set)")
        t = check_timestep(self.t, target.num_timesteps, "attack.t")
        k = self.statistic_queries()

        def lik(model, recs):  # Pr(x | θ) proxy: exp(−mean over draws of the per-pixel statistic)
            return np.exp(-self.statistic_values(model, recs, env.seed).mean(axis=1))

        online = refs.mode == "online"
        p_x, p_z = lik(target, records), lik(target, refs.population)
        p_refs_x = np.stack([lik(m, records) for m in refs.targets])
        p_refs_z = np.stack([lik(m, refs.population) for m in refs.targets])
        figures: dict = {}
        ref_q = len(records) + len(refs.population)
        if online:
            a = None
        elif self.rmia_a == -1:
            if refs.pool is None or refs.pool_in is None:
                raise BadInput("rmia: tuning attack.rmia_a needs the reference pool; set attack.rmia_a in [0, 1]")
            p_pool = np.stack([lik(m, refs.pool) for m in refs.targets])
            ref_q += len(refs.pool)
            a, tuning = tune_a(p_pool, refs.pool_in, p_refs_z, float(self.rmia_gamma))
            figures.update(a_tuned=True, **tuning)
        else:
            a = float(self.rmia_a)
        scores = rmia_scores(p_x, p_refs_x, refs.in_masks, p_z, p_refs_z, online=online,
                             a=0.0 if a is None else a, gamma=float(self.rmia_gamma))
        res = AttackOutput(scores=scores, nfe_per_record=k * (1 + len(refs.population) / max(len(records), 1)))
        res.arrays = {"rmia_likelihood": p_x}
        figures.update({
            "t": t, "draws": k, "variant": "online" if online else "offline", "a": a,
            "gamma": float(self.rmia_gamma), "n_population": len(refs.population),
            "queries_per_record": k, "population_queries": k * len(refs.population),
            "reference_queries": k * ref_q * len(refs), "references": refs.describe(),
            "statistic_name": self.statistic, "statistic_settings": self.statistic_figures().get("settings"),
            "likelihood": f"Pr(x|theta) = exp(-s), s = {self.statistic_figures()['definition']}",
            "score": "share of population z with LR(x)/LR(z) > gamma, LR = Pr(x|theta)/Pr(x) (higher = member)"})
        res.figures = figures
        res.notes.append(f"RMIA {'online' if online else f'offline (a={a})'} with {len(refs)} reference models and "
                         f"{len(refs.population)} population records; likelihood proxy exp(-{self.statistic} statistic)")
        return res
