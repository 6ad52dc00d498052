"""LiRA, the likelihood-ratio attack (Carlini et al., "Membership inference attacks from first principles",
S&P 2022), on a diffusion statistic (Carlini et al., USENIX Security 2023).

Per record, Gaussians are fitted to the reference models' statistic s (``attack.statistic``, default the log of the
fixed-noise loss; lower = member), split by whether the reference trained on the record (IN) or not (OUT). Score
(higher = member), averaged over draws: online, log N(s; μ_in, σ_in²) − log N(s; μ_out, σ_out²); offline, the
one-sided log Pr[Z ≥ s], Z ~ N(μ_out, σ_out²). ``lira_convention=official`` follows the official ``plot.py``.
Formulas and conventions: docs/attacks.md §7, docs/attacks-threat-models.md ("LiRA").
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from ..core.config import setting
from ..core.errors import BadInput
from ..core.registry import ATTACKS
from .base import AttackEnv, AttackOutput, Records, check_timestep
from .references import REFERENCE_TEST_PRESET, ReferenceAttack, require_references
from .statistics import StatisticAttack

#: below this many references ``lira_variance=auto`` uses one global width (Carlini et al. 2022, §VI)
GLOBAL_VARIANCE_BELOW = 64


def _centre(values: np.ndarray, mask: np.ndarray, convention: str) -> tuple[np.ndarray, np.ndarray]:
    """Per (record, draw) centre (mean, or median for the official convention) of the reference statistics
    selected by ``mask`` (refs × records), and the count per record. values: (refs, records, draws)."""
    n = mask.sum(0)
    out = np.full(values.shape[1:], np.nan)
    for j in np.flatnonzero(n > 0):
        v = values[mask[:, j], j, :]
        out[j] = np.median(v, axis=0) if convention == "official" else v.mean(axis=0)
    return out, n


def _widths(values, mask, centre, count, mode: str, convention: str) -> np.ndarray:
    """(records, draws) Gaussian widths of one side."""
    sel = values[mask]  # (k, draws) values of this side over all (ref, record) pairs
    if sel.size == 0:
        return np.full(centre.shape, np.nan)
    if convention == "official":
        glob = float(np.std(sel))  # over all values of the side, not centred per record (official code)
    else:
        dev = (values - np.nan_to_num(centre)[None]) ** 2
        glob = float(np.sqrt(dev[mask].mean()))
    if mode == "global":
        return np.full(centre.shape, glob)
    per = np.full(centre.shape, glob)
    for j in np.flatnonzero(count >= 2):
        per[j] = values[mask[:, j], j, :].std(axis=0)
    return per


def lira_scores(target_stat: np.ndarray, ref_stat: np.ndarray, in_masks: np.ndarray, *, online: bool,
                variance: str, convention: str = "paper") -> tuple[np.ndarray, dict]:
    """LiRA scores (higher = member) from the target's statistic (records × draws), the references' statistics
    (refs × records × draws) and their membership (refs × records). Lower statistic = member (a loss)."""
    s = np.asarray(target_stat, dtype=np.float64)
    r = np.asarray(ref_stat, dtype=np.float64)
    inm = np.asarray(in_masks, dtype=bool)
    if s.ndim == 1:
        s, r = s[:, None], r[..., None]
    info: dict = {}
    out_mask = ~inm
    mu_out, n_out = _centre(r, out_mask, convention)
    if online:
        mu_in, n_in = _centre(r, inm, convention)
        both = (n_in > 0) & (n_out > 0)
        if not both.any():
            raise BadInput("lira online: no record has both IN and OUT reference models; use more "
                           "attack.n_reference")
        shift = (mu_in[both] - mu_out[both]).mean(axis=0)
        mu_in[n_in == 0] = mu_out[n_in == 0] + shift
        mu_out[n_out == 0] = mu_in[n_out == 0] - shift
        sd_in = _widths(r, inm, mu_in, n_in, variance, convention)
        sd_out = _widths(r, out_mask, mu_out, n_out, variance, convention)
        if convention == "official" and variance == "global":
            sd_out = sd_in  # the official online fixed variance uses the IN width for both sides
        sd_in = np.where(np.isfinite(sd_in), sd_in, sd_out)
        sd_in, sd_out = np.maximum(sd_in, 1e-30), np.maximum(sd_out, 1e-30)
        score = (stats.norm.logpdf(s, mu_in, sd_in) - stats.norm.logpdf(s, mu_out, sd_out)).mean(axis=1)
        info["records_without_in"] = int((n_in == 0).sum())
        info["records_without_out"] = int((n_out == 0).sum())
        info["mean_in_out_shift"] = [float(v) for v in np.atleast_1d(shift)]
    else:
        if (n_out == 0).any():
            raise BadInput(f"lira offline: {int((n_out == 0).sum())} records have no OUT reference model")
        sd_out = np.maximum(_widths(r, out_mask, mu_out, n_out, variance, convention), 1e-30)
        if convention == "official":
            score = -stats.norm.logpdf(s, mu_out, sd_out).mean(axis=1)
        else:
            score = stats.norm.logcdf((mu_out - s) / sd_out).mean(axis=1)  # log Pr[Z >= s], Z ~ OUT
    return score, info


@ATTACKS.register_class
class LiRA(ReferenceAttack, StatisticAttack):
    name = "lira"
    description = ("LiRA (online/offline): per-record Gaussians of reference models' statistic (default: fixed-noise "
                   "loss at t=200; lira@sima: SimA's distance)")
    report_order = 70
    needs_references = True
    min_references = 2
    text_conditioning = False  # its reference models retrain the target's own recipe
    variant_settings = ("reference_pool", "lira_convention", "statistic")
    settings_presets = {"test": REFERENCE_TEST_PRESET}
    threat_model = {"queries": "eps-prediction at x_t with fixed per-record noise (target and references)",
                    "reference_models": "attack.n_reference",
                    "reference_training": "the target's own method and config, each on a random half of the "
                                          "pool (offline: records outside the evaluation split; online: the "
                                          "evaluation records)",
                    "auxiliary_data": "the reference pool (offline) or knowledge of which references trained on "
                                      "which evaluation record (online)",
                    "queries_per_record": "attack.lira_draws on the target (+ as many on each reference)",
                    "source": "Carlini et al., S&P 2022 and USENIX Security 2023; `tensorflow/privacy` "
                              "`research/mi_lira_2021`"}

    lira_transform: str = setting("log", choices=["log", "none"],
                                  help="LiRA: fit the Gaussians to log(loss) (variance-stabilized, as the paper's "
                                       "logit scaling of confidences) or to the loss itself")
    lira_convention: str = setting("paper", choices=["paper", "official"],
                                   help="paper: means, one-sided offline test; official code: medians, two-sided "
                                        "offline log-pdf, global std over all values")
    lira_variance: str = setting("auto", choices=["auto", "per_record", "global"],
                                 help="Gaussian widths: per record, or one global width (auto: global below 64 "
                                      "references, as the LiRA paper advises)")

    def variance_mode(self, n_ref: int) -> str:
        if self.lira_variance == "auto":
            return "global" if n_ref < GLOBAL_VARIANCE_BELOW else "per_record"
        return self.lira_variance

    def run(self, target, records: Records, env: AttackEnv | None = None) -> AttackOutput:
        env = env or AttackEnv()
        refs = require_references(env, "lira")
        t = check_timestep(self.t, target.num_timesteps, "attack.t")
        s = self.statistic_values(target, records, env.seed)
        r = np.stack([self.statistic_values(m, records, env.seed) for m in refs.targets])
        k = int(s.shape[1])
        q = self.statistic_queries()
        if self.lira_transform == "log":
            s, r = np.log(np.maximum(s, 1e-300)), np.log(np.maximum(r, 1e-300))
        online = refs.mode == "online"
        variance = self.variance_mode(len(refs))
        scores, info = lira_scores(s, r, refs.in_masks, online=online, variance=variance,
                                   convention=self.lira_convention)
        res = AttackOutput(scores=scores, nfe_per_record=q)
        res.arrays = {"lira_statistic": s.mean(axis=1)}
        stat = self.statistic_figures()
        res.figures = {"t": t, "draws": k, "variant": "online" if online else "offline",
                       "variance": variance, "convention": self.lira_convention, "transform": self.lira_transform,
                       "queries_per_record": q,
                       "reference_queries_per_record": q * len(refs), "references": refs.describe(), **info,
                       "statistic_name": stat["name"], "statistic_settings": stat.get("settings"),
                       "statistic": ("log " if self.lira_transform == "log" else "") + stat["definition"],
                       "score": ("mean_d log N(s; mu_in, sd_in) - log N(s; mu_out, sd_out)" if online else
                                 ("-mean_d log N(s; mu_out, sd_out) (two-sided, official code)"
                                  if self.lira_convention == "official" else
                                  "mean_d log Pr[Z >= s], Z ~ N(mu_out, sd_out) (one-sided)"))
                       + " (higher = member)"}
        res.notes.append(f"LiRA {'online' if online else 'offline'} with {len(refs)} reference models, "
                         f"{variance} variance, {self.lira_convention} convention, statistic {self.statistic}")
        return res
