"""GSA, the white-box gradient attack (Pang et al., "White-box membership inference attacks against diffusion
models", 2023; official code ``py85252876/GSA``).

Features: the ℓ2 norm of the diffusion loss's gradient for every parameter tensor, from K timesteps
(``attack.gsa_timesteps``) with noise fixed per record — GSA1: of the loss averaged over the timesteps (one
backward); GSA2: per-timestep norms averaged. A classifier trained on the references' features of the pool
records, labelled by each reference's membership, scores the target's records (P(member)).
Classifiers and differences from the official code: docs/attacks.md §7, docs/attacks-threat-models.md ("GSA").
"""
from __future__ import annotations

import numpy as np
import torch

from ..core.config import setting
from ..core.errors import BadInput
from ..core.extras import require
from ..core.registry import ATTACKS
from ..models.grad_sample import PerSampleGrads, requires_grad
from .base import AttackEnv, AttackOutput, Records, check_timestep
from .references import REFERENCE_TEST_PRESET, ReferenceAttack, record_noise, require_references

#: per-record gradient floats materialised at once (memory bound of one chunk)
_GRAD_BUDGET = 50_000_000


def gradient_features(target, records: Records, timesteps: list[int], *, variant: int, seed: int,
                      batch_size: int) -> np.ndarray:
    """(n_records, n_parameter_tensors) GSA features of ``records`` under ``target``'s network."""
    reason = GSA.refusal(target.capabilities)  # the runners ask it of the target; reference models come here only
    if reason:
        raise BadInput(f"gsa {reason} (target {target.name!r})")
    model = target.model
    device = target.device
    ac = target.alphas_cumprod.to(device)
    ts = torch.as_tensor(timesteps, dtype=torch.long, device=device)
    K = len(timesteps)
    a = ac[ts].view(K, 1, 1, 1)
    shape = tuple(records.x.shape[1:])
    extra = target.extra
    n_params = sum(p.numel() for p in model.parameters())
    rows_per_record = K if variant == 2 else 1
    chunk = max(1, min(batch_size, _GRAD_BUDGET // max(n_params * rows_per_record, 1)))

    def rows(model_, x, y, noise):
        """Every record repeated over the K timesteps (record-major) → (n·K,) per-row losses."""
        n = x.shape[0]
        x_t = (a.sqrt()[None] * x[:, None] + (1 - a).sqrt()[None] * noise).reshape(n * K, *shape)
        tt = ts.repeat(n)
        yy = y.repeat_interleave(K) if y is not None else None
        ee = None if extra is None else torch.full((n * K,), int(extra), dtype=torch.long, device=device)
        pred = target.network_eps(model_, x_t, tt, yy, ee)
        return (pred - noise.reshape(n * K, *shape)).pow(2).flatten(1).mean(1)

    cond_on = bool(target.num_classes)

    def gsa1_loss(model_, x, y, noise):  # one loss per record: the mean over its K rows (F.mse_loss)
        return rows(model_, x, y if cond_on else None, noise).view(x.shape[0], K).mean(1)

    def gsa2_loss(model_, x, y, noise, t):  # one loss per (record, timestep) row, each row with its own t
        ab = ac[t].view(-1, 1, 1, 1)
        ee = None if extra is None else torch.full((x.shape[0],), int(extra), dtype=torch.long, device=device)
        pred = target.network_eps(model_, ab.sqrt() * x + (1 - ab).sqrt() * noise, t, y if cond_on else None, ee)
        return (pred - noise).pow(2).flatten(1).mean(1)

    out = []
    with requires_grad(model, value=True):
        try:
            psg = PerSampleGrads(model, "hooks")
        except ValueError:  # a layer the hooks backend does not cover
            psg = PerSampleGrads(model, "vmap")
        for lo in range(0, len(records), chunk):
            hi = min(len(records), lo + chunk)
            n = hi - lo
            x = records.x[lo:hi].to(device)
            y = records.y[lo:hi].to(device)  # ignored by unconditional targets
            noise = torch.stack([record_noise(records.index[lo:hi], shape, seed, int(t), 0) for t in timesteps],
                                dim=1).to(device)  # (n, K, C, H, W)
            if variant == 1:
                grads, _ = psg.grads(gsa1_loss, x, y, noise)
                norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads], dim=1)
            else:
                grads, _ = psg.grads(gsa2_loss, x.repeat_interleave(K, dim=0), y.repeat_interleave(K),
                                     noise.reshape(n * K, *shape), ts.repeat(n))
                norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads], dim=1).view(n, K, -1).mean(1)
            out.append(norms.detach().double().cpu())
    return torch.cat(out).numpy()


def standardize(f: np.ndarray) -> np.ndarray:
    """``sklearn.preprocessing.scale``: zero mean, unit variance per feature (constant features → 0)."""
    mu, sd = f.mean(0), f.std(0)
    return (f - mu) / np.where(sd > 0, sd, 1.0)


def make_classifier(kind: str, seed: int):
    """The GSA classifier ``kind`` (``attack.gsa_classifier``; docs/attacks.md §7)."""
    if kind == "xgboost":
        xgb = require("xgboost", "attack.gsa_classifier=xgboost")
        return xgb.XGBClassifier(n_estimators=200, random_state=seed, n_jobs=1)
    if kind == "logistic":
        from sklearn.linear_model import LogisticRegression  # lazy: scikit-learn only when GSA fits

        return LogisticRegression(max_iter=2000)
    # lazy: scikit-learn only when GSA fits; every attack module loads with the registry
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(max_iter=200, learning_rate=0.3, max_depth=6, early_stopping=False,
                                          random_state=seed)


def _check_same_architecture(target, references) -> None:
    """BadInput, before any gradient, unless every reference has the target's parameter tensors (shapes, in order):
    the classifier reads one gradient norm per tensor. Native references always do; an outside recipe may not."""
    def shapes(t):
        return [tuple(p.shape) for p in t.model.parameters()] if getattr(t, "model", None) is not None else None

    want = shapes(target)
    for ref in references:
        have = shapes(ref)
        if have != want:
            n = "?" if have is None else len(have)
            raise BadInput(f"gsa: reference {ref.name!r} has another architecture than the target ({n} parameter "
                           f"tensors vs {len(want or [])}, or other shapes): its classifier reads one gradient norm "
                           f"per parameter tensor, so the references must be the target's network (a YAML recipe "
                           f"with architecture: target, or a Python recipe that builds it)")


@ATTACKS.register_class
class GSA(ReferenceAttack):
    name = "gsa"
    description = "GSA: classifier on per-layer gradient norms, trained on reference-model data (white-box)"
    report_order = 90
    needs_references = True
    text_conditioning = False  # its reference models retrain the target's own recipe
    requires_white_box = True
    variant_settings = ("reference_pool", "gsa_classifier")
    settings_presets = {"test": REFERENCE_TEST_PRESET}
    applies_to = ("model", "global", "shared", "client:*", "student", "teacher")
    threat_model = {"queries": "white-box: per-record gradients of the diffusion loss (K forward + 1 backward "
                               "per record for GSA1, K backward for GSA2)",
                    "reference_models": "attack.n_reference",
                    "reference_training": "the target's own method and config, each on a random half of the pool",
                    "auxiliary_data": "the reference pool and each reference's membership on it (classifier "
                                      "training data)",
                    "queries_per_record": "len(attack.gsa_timesteps) forward + 1 (GSA1) or K (GSA2) backward",
                    "source": "Pang et al. 2023; `py85252876/GSA`"}

    gsa_timesteps: list = setting([100, 200, 300, 400, 500, 600, 700, 800, 900, 999],
                                  help="GSA's timesteps (one noise draw each)")
    gsa_variant: int = setting(1, lo=1, hi=2, help="GSA1: per-layer norms of the gradient of the loss averaged over "
                                                   "timesteps (official code); GSA2: averaged per-timestep norms")
    gsa_classifier: str = setting("gbdt", choices=["gbdt", "logistic", "xgboost"],
                                  help="GSA's classifier: gbdt = scikit-learn HistGradientBoosting (200 rounds, "
                                       "depth 6, lr 0.3); xgboost = the official XGBClassifier(n_estimators=200) "
                                       "([official] extra); logistic")

    def timesteps(self, num_timesteps: int) -> list[int]:
        ts = self.gsa_timesteps
        if not isinstance(ts, (list, tuple)) or not ts:
            raise BadInput(f"attack.gsa_timesteps={ts!r}: expected a non-empty list of timesteps")
        return [check_timestep(t, num_timesteps, "attack.gsa_timesteps") for t in ts]

    def validate(self, num_timesteps: int, cfg=None) -> None:
        super().validate(num_timesteps, cfg)
        self.timesteps(num_timesteps)
        if self.gsa_classifier == "xgboost":  # before any reference model is trained
            require("xgboost", "attack.gsa_classifier=xgboost")

    def run(self, target, records: Records, env: AttackEnv | None = None) -> AttackOutput:
        env = env or AttackEnv()
        refs = require_references(env, "gsa", minimum=1)
        if refs.pool is None or refs.pool_in is None:
            raise BadInput("gsa needs the reference pool and its memberships (classifier training data)")
        _check_same_architecture(target, refs.targets)
        ts = self.timesteps(target.num_timesteps)
        kw = {"variant": int(self.gsa_variant), "seed": env.seed, "batch_size": self.batch_size}
        feats = [gradient_features(m, refs.pool, ts, **kw) for m in refs.targets]
        train_x = standardize(np.concatenate(feats))
        train_y = np.concatenate([refs.pool_in[r].astype(int) for r in range(len(refs))])
        if train_y.min() == train_y.max():
            raise BadInput("gsa: the reference data has only one class (no IN or no OUT records)")
        clf = make_classifier(self.gsa_classifier, env.seed)
        clf.fit(train_x, train_y)
        target_x = standardize(gradient_features(target, records, ts, **kw))
        scores = clf.predict_proba(target_x)[:, list(clf.classes_).index(1)]
        res = AttackOutput(scores=np.asarray(scores, dtype=np.float64), nfe_per_record=len(ts))
        res.figures = {"timesteps": ts, "variant": int(self.gsa_variant), "classifier": self.gsa_classifier,
                       "n_features": int(target_x.shape[1]), "training_rows": len(train_y),
                       "training_members": int(train_y.sum()), "queries_per_record": len(ts),
                       "backward_per_record": 1 if self.gsa_variant == 1 else len(ts),
                       "references": refs.describe(),
                       "score": "classifier P(member) on per-parameter-tensor gradient norms (higher = member)"}
        res.notes.append(f"GSA{self.gsa_variant}: {self.gsa_classifier} classifier trained on {len(refs)} reference "
                         f"models' features of {len(refs.pool)} pool records; applied to the target's features")
        return res
