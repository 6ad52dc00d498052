"""QMIA, quantile-regression membership inference (Bertran et al., NeurIPS 2023; Tang et al., "Membership inference
attacks on diffusion models via quantile regression", ICML 2024).

No reference model: a regressor fitted on public records known to be non-members predicts the α-quantile q̂_α(x)
of the target's statistic s (``attack.statistic``; lower = member) from the record's features, so thresholding
each record at its own quantile gives FPR α. Score (higher = member): log q̂_α(x) − log s(x).
Regressors, conformal step and differences from ``amazon-science/quantile-mia``: docs/attacks.md §9.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats

from ..core.config import setting
from ..core.errors import BadInput
from ..core.registry import ATTACKS
from .base import AttackEnv, AttackOutput, Records
from .references import require_references
from .statistics import StatisticAttack


def record_features(x: torch.Tensor) -> np.ndarray:
    """(n, f) features of images (n×C×H×W): pixels average-pooled to ≤ 4×4 per channel, pixel mean and std (few
    features: the regressor is fitted on as few as a hundred public records)."""
    side = (min(4, x.shape[-2]), min(4, x.shape[-1]))
    pooled = F.adaptive_avg_pool2d(x.double(), side).flatten(1)
    flat = x.double().flatten(1)
    return torch.cat([pooled, flat.mean(1, keepdim=True), flat.std(1, keepdim=True)], 1).numpy()


#: −E log|Z| for Z ~ N(0, 1), (γ + ln 2)/2: log|residual| + this estimates log σ
_E_LOG_ABS_NORMAL_NEG = (0.5772156649015329 + np.log(2.0)) / 2


def _design(feat: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    return np.hstack([np.ones((feat.shape[0], 1)), (feat - mean) / sd])


def _ridge(a: np.ndarray, b: np.ndarray, lam: float = 1.0) -> np.ndarray:
    reg = lam * np.eye(a.shape[1])
    reg[0, 0] = 0.0  # the intercept is not shrunk
    return np.linalg.solve(a.T @ a + reg, a.T @ b)


class QuantileModel:
    """q̂_α(x) of a (log-)statistic from features, fitted on non-members only."""

    def __init__(self, alpha: float, kind: str = "gaussian", seed: int = 0):
        self.alpha, self.kind, self.seed = float(alpha), kind, int(seed)
        self.shift = 0.0

    def fit(self, feat: np.ndarray, stat: np.ndarray) -> "QuantileModel":
        self.mean, self.sd = feat.mean(0), np.where(feat.std(0) > 0, feat.std(0), 1.0)
        a = _design(feat, self.mean, self.sd)
        if self.kind == "gaussian":
            self.w_mu = _ridge(a, stat)
            resid = stat - a @ self.w_mu
            self.w_sd = _ridge(a, np.log(np.abs(resid) + 1e-12) + _E_LOG_ABS_NORMAL_NEG)
            self.z = float(stats.norm.ppf(self.alpha))
        elif self.kind == "gbdt":
            from sklearn.ensemble import HistGradientBoostingRegressor  # lazy: sklearn only for qmia_model=gbdt

            self.gb = HistGradientBoostingRegressor(loss="quantile", quantile=self.alpha, max_iter=100,
                                                    random_state=self.seed).fit(feat, stat)
        else:
            raise BadInput(f"attack.qmia_model={self.kind!r}: choose gaussian or gbdt")
        return self

    def predict(self, feat: np.ndarray) -> np.ndarray:
        if self.kind == "gbdt":
            return self.gb.predict(feat) + self.shift
        a = _design(feat, self.mean, self.sd)
        return a @ self.w_mu + np.exp(a @ self.w_sd) * self.z + self.shift

    def conformalize(self, feat: np.ndarray, stat: np.ndarray) -> "QuantileModel":
        """Shift the threshold so that a share α of these held-out non-members falls below it: the
        ⌊α(n+1)⌋-th smallest conformity score s − q̂(x) (split-conformal, finite-sample valid)."""
        r = np.sort(stat - self.predict(feat))
        k = int(np.floor(self.alpha * (len(r) + 1)))
        self.shift += float(r[k - 1]) if k >= 1 else float(r[0]) - 1e-9
        return self


def _public_records(refs) -> Records | None:
    """Records known to be non-members of the target: the offline pool (outside the evaluation split) and the
    population; an online pool is the evaluation split itself (members included), so it is never used."""
    parts = [r for r in ((refs.pool if refs.mode == "offline" else None), refs.population)
             if r is not None and len(r)]
    if not parts:
        return None
    return Records(torch.cat([r.x for r in parts]), torch.cat([r.y for r in parts]),
                   torch.zeros(sum(len(r) for r in parts), dtype=torch.long), torch.cat([r.index for r in parts]))


def fit_qmia(feat: np.ndarray, stat: np.ndarray, *, alpha: float, kind: str, conformal: bool,
             seed: int) -> QuantileModel:
    """The quantile model of log-statistic ``stat`` on public non-members (``feat``: their features)."""
    n = len(stat)
    if n < (4 if conformal else 2):
        raise BadInput(f"qmia needs public non-member records to fit its regressor; got {n}")
    if not conformal:
        return QuantileModel(alpha, kind, seed).fit(feat, stat)
    perm = np.random.default_rng([seed, 0x9A1A]).permutation(n)
    fit_i, cal_i = perm[: n // 2], perm[n // 2:]
    return QuantileModel(alpha, kind, seed).fit(feat[fit_i], stat[fit_i]).conformalize(feat[cal_i], stat[cal_i])


@ATTACKS.register_class
class QMIA(StatisticAttack):
    name = "qmia"
    description = "QMIA: per-record alpha-quantile of the statistic regressed on public non-members (no reference model)"
    report_order = 85
    needs_references = True  # the runner's reference pool supplies the public non-members; no model is trained
    n_reference = 0
    reference_pool = "offline"
    variant_settings = ("statistic",)
    threat_model = {"queries": "the statistic's queries on the target, for the evaluation and public records",
                    "reference_models": 0, "reference_training": "none (a regressor on public records)",
                    "auxiliary_data": "public records known to be non-members (the offline pool: outside the "
                                      "evaluation split)",
                    "queries_per_record": "the statistic's (attack.statistic)",
                    "source": "Bertran et al., NeurIPS 2023; Tang et al., ICML 2024; `amazon-science/quantile-mia`"}

    qmia_alpha: float = setting(0.01, lo=0.0, hi=0.5, lo_open=True, hi_open=True,
                                help="QMIA: the quantile (target FPR) the regressor predicts")
    qmia_model: str = setting("gaussian", choices=["gaussian", "gbdt"],
                              help="QMIA regressor: gaussian location-scale (ridge) or gbdt pinball-loss quantile")
    qmia_conformal: bool = setting(True, help="QMIA: split-conformal correction of the threshold on half the public "
                                              "records (false: fit on all, as the papers)")

    def run(self, target, records: Records, env: AttackEnv | None = None) -> AttackOutput:
        env = env or AttackEnv()
        refs = require_references(env, "qmia", minimum=0)
        public = _public_records(refs)
        if public is None:
            raise BadInput("qmia needs public non-member records (the offline pool or population records)")
        log_s = lambda recs: np.log(np.maximum(self.statistic_values(target, recs, env.seed).mean(1), 1e-300))  # noqa: E731
        s_pub, s_eval = log_s(public), log_s(records)
        model = fit_qmia(record_features(public.x), s_pub, alpha=float(self.qmia_alpha), kind=self.qmia_model,
                         conformal=bool(self.qmia_conformal), seed=env.seed)
        q_eval = model.predict(record_features(records.x))
        scores = q_eval - s_eval
        flagged = scores > 0
        lab = records.labels.numpy() == 1
        stat = self.statistic_figures()
        res = AttackOutput(scores=scores, nfe_per_record=self.statistic_queries() * (1 + len(public) / len(records)))
        res.arrays = {"qmia_log_statistic": s_eval, "qmia_log_quantile": q_eval}
        res.figures = {
            "alpha": float(self.qmia_alpha), "model": self.qmia_model, "conformal": bool(self.qmia_conformal),
            "public_records": len(public), "statistic_name": stat["name"], "statistic": stat["definition"],
            "statistic_settings": stat.get("settings"),
            "at_alpha": {"fpr": float(flagged[~lab].mean()) if (~lab).any() else None,
                         "tpr": float(flagged[lab].mean()) if lab.any() else None,
                         "note": "the regressor's own alpha-threshold (no evaluation label used to set it)"},
            "score": "log q_alpha(x) - log s(x), q from a regressor fitted on public non-members (higher = member)"}
        res.notes.append(f"QMIA: {self.qmia_model} quantile regressor of log {self.statistic} at alpha="
                         f"{self.qmia_alpha:g} on {len(public)} public non-members"
                         + (" with a split-conformal correction" if self.qmia_conformal else ""))
        return res
