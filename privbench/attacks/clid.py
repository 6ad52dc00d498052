"""CLiD — conditional likelihood discrepancy (Zhai et al., "Membership Inference on Text-to-image Diffusion Models
via Conditional Likelihood Discrepancy", NeurIPS 2024, arXiv 2405.14800).

Per record and timestep t, with noise draws shared by all conditions: L(t, c) = (1/M) Σ_d ‖ε_d − ε_θ(x_t, t, c)‖²
with the record's caption c, and D(t, c*) = L(t, c*) − L(t, c) for each weakened caption c* (``null``, ``drop``).
``th``: α·robust(mean D) − (1 − α)·robust(mean L); ``vec``: an out-of-fold classifier on every D and L.
No official code was released; our reading of the paper and its differences: docs/attacks.md §14.
"""
from __future__ import annotations

import numpy as np
import torch

from ..core.config import setting
from ..core.errors import BadInput
from ..core.registry import ATTACKS, METHODS
from .base import Attack, AttackEnv, AttackOutput, Records, check_timestep, tvec
from .references import record_noise
from .secmi_nn import stratified_folds

_CLID_STREAM = 0xC11D
PERTURBATIONS = ("null", "drop")


def drop_words(caption: str) -> str:
    """Every second word removed (words 0, 2, 4, ... kept)."""
    return " ".join(caption.split()[::2])


def robust_scale(v: np.ndarray) -> np.ndarray:
    """(v − median) / IQR over the records (IQR 0 → 1), as sklearn's RobustScaler."""
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    return (v - med) / ((q3 - q1) or 1.0)


@ATTACKS.register_class
class CLiD(Attack):
    name = "clid"
    description = "CLiD: loss with a weakened caption (null, dropped words) minus loss with the record's caption"
    report_order = 35
    variant_settings = ("clid_variant",)
    #: only text-to-image targets have captions to weaken (refused elsewhere with one line)
    requires_text = True
    threat_model = {"queries": "eps-prediction with the record's caption and with weakened captions, same noise",
                    "reference_models": 0, "reference_training": "none",
                    "auxiliary_data": "th: none; vec: membership labels of the other folds' records (cross-fitting)",
                    "queries_per_record": "clid_draws * len(clid_t) * (1 + len(clid_perturbations))",
                    "source": "Zhai et al., NeurIPS 2024 (arXiv 2405.14800); `zhaisf/CLiD` (no code released)"}

    clid_variant: str = setting("th", choices=["th", "vec"],
                                help="clid: th (threshold on the combined score) or vec (classifier on the vector)")
    clid_t: list = setting([100, 200, 300], help="clid: model timesteps (0-indexed) the discrepancy is averaged over")
    clid_perturbations: list = setting(["null", "drop"], help="clid: weakened captions: null (empty) and/or drop "
                                                             "(every second word removed)")
    clid_draws: int = setting(4, lo=1, help="clid: Monte-Carlo noise draws per record and timestep (fixed per "
                                            "record), averaged")
    clid_alpha: float = setting(0.8, lo=0.0, hi=1.0, help="clid (th): weight of the discrepancy against the "
                                                           "conditional loss")
    clid_folds: int = setting(2, lo=2, help="clid (vec): cross-fitting folds: every record is scored out of fold")

    def validate(self, num_timesteps: int, cfg=None) -> None:
        super().validate(num_timesteps, cfg)
        method = getattr(cfg, "method", None)  # an outside model's pseudo-method is no registered method
        if method in METHODS and not METHODS.get(method).factory.text_conditional:
            raise BadInput(f"attack clid needs a text-to-image target (captions to weaken); method {cfg.method} "
                           f"trains none — attack a Stable-Diffusion-layout pipeline with --model")
        if not isinstance(self.clid_t, (list, tuple)) or not self.clid_t:
            raise BadInput(f"attack.clid_t={self.clid_t!r}: expected a non-empty list of timesteps")
        for t in self.clid_t:
            check_timestep(t, num_timesteps, "attack.clid_t")
        bad = [p for p in (self.clid_perturbations or []) if p not in PERTURBATIONS]
        if not self.clid_perturbations or bad:
            raise BadInput(f"attack.clid_perturbations={self.clid_perturbations!r}: choose from "
                           f"{', '.join(PERTURBATIONS)}")

    def _weakened_rows(self, target, records: Records) -> dict[str, torch.Tensor]:
        if not target.capabilities.text_conditioned:
            raise BadInput("clid needs a text-to-image target (records conditioned on captions)")
        text = target.text
        caps = [text.captions[int(r)] for r in records.y]
        out = {}
        for p in self.clid_perturbations:
            out[p] = (torch.zeros(len(caps), dtype=torch.long) if p == "null"
                      else text.ids([drop_words(c) for c in caps]))
        return out

    @torch.no_grad()
    def _features(self, target, records: Records, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(L: records × timesteps, D: records × perturbations × timesteps), each averaged over the draws."""
        weak = self._weakened_rows(target, records)
        ts = [int(t) for t in self.clid_t]
        n_draws = int(self.clid_draws)
        ac = target.alphas_cumprod.to(target.device)
        shape = tuple(records.x.shape[1:])
        L, D = [], []
        for lo in range(0, len(records), self.batch_size):
            hi = min(len(records), lo + self.batch_size)
            x0, y = records.x[lo:hi].to(target.device), records.y[lo:hi].to(target.device)
            rows = [y] + [weak[p][lo:hi].to(target.device) for p in self.clid_perturbations]
            lb, db = [], []
            for t in ts:
                tt = tvec(t, len(x0), target.device)
                losses = torch.zeros(len(rows), len(x0), dtype=torch.float64, device=target.device)
                for d in range(n_draws):
                    eps = record_noise(records.index[lo:hi], shape, seed, t, d, stream=_CLID_STREAM).to(target.device)
                    x_t = ac[t].sqrt() * x0 + (1 - ac[t]).sqrt() * eps
                    for k, r in enumerate(rows):  # the same noise under the caption and each weakened caption
                        losses[k] += (eps - target.predict_noise(x_t, tt, r)).pow(2).flatten(1).sum(1).double()
                losses /= n_draws
                lb.append(losses[0])
                db.append((losses[1:] - losses[0]).T)
            L.append(torch.stack(lb, 1))
            D.append(torch.stack(db, 2))
        return torch.cat(L).cpu().numpy(), torch.cat(D).cpu().numpy()

    def run(self, target, records: Records, env: AttackEnv | None = None) -> AttackOutput:
        env = env or AttackEnv()
        L, D = self._features(target, records, env.seed)
        n_q = int(self.clid_draws) * len(self.clid_t) * (1 + len(self.clid_perturbations))
        if self.clid_variant == "th":
            a = float(self.clid_alpha)
            scores = a * robust_scale(D.mean(axis=(1, 2))) - (1 - a) * robust_scale(L.mean(axis=1))
            how = "alpha * robust(mean discrepancy) - (1 - alpha) * robust(mean conditional loss)"
        else:
            scores = self._vec_scores(np.concatenate([D.reshape(len(D), -1), L], 1), records, env.seed)
            how = f"out-of-fold classifier output on the discrepancy/loss vector ({self.clid_folds} folds)"
        res = AttackOutput(scores=scores, nfe_per_record=n_q)
        res.arrays = {"clid_discrepancy": D.mean(axis=(1, 2)), "clid_cond_loss": L.mean(axis=1)}
        res.figures = {"variant": self.clid_variant, "t": [int(t) for t in self.clid_t], "draws": int(self.clid_draws),
                       "perturbations": list(self.clid_perturbations), "queries_per_record": n_q, "score": how}
        if self.clid_variant == "th":
            res.figures["alpha"] = float(self.clid_alpha)
        return res

    def _vec_scores(self, feats: np.ndarray, records: Records, seed: int) -> np.ndarray:
        # lazy: scikit-learn only for clid@vec; every attack module loads with the registry
        from sklearn.ensemble import HistGradientBoostingClassifier

        labels = records.labels.numpy()
        k = int(self.clid_folds)
        if min(records.n_members, records.n_nonmembers) < k:
            raise BadInput(f"clid@vec: {k} folds need at least {k} members and {k} non-members")
        fold = stratified_folds(labels, k, seed)
        scores = np.empty(len(labels))
        for f in range(k):
            # leaves of 5 (sklearn's default 20 leaves no split to make on a few dozen training records)
            clf = HistGradientBoostingClassifier(max_iter=100, min_samples_leaf=5, random_state=seed * 1000 + f)
            clf.fit(feats[fold != f], labels[fold != f])
            scores[fold == f] = clf.predict_proba(feats[fold == f])[:, 1]
        return scores
