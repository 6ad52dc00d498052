"""The registry contract as checks a plug-in author runs on their own class (as scikit-learn's
``check_estimator``; docs/api.md §9). privbench's own contract test (tests/architecture/test_registry_contract.py)
calls the same functions on every registered entry."""
from __future__ import annotations

import math
import tempfile

import numpy as np
import torch

from ..attacks.base import MEMBERSHIP, Attack, AttackEnv, Records
from ..attacks.references import ReferenceModels
from ..core.config import build_config
from ..core.registry import ATTACKS, METHODS
from ..data.base import load_dataset
from ..metrics.roc import auc
from ..models.method import Method
from ..runs.attack import make_attack
from ..runs.train import train
from .fakes import fake_target, memorizing_eps

#: a model that reproduces its members exactly: every sound membership score separates them at least this well
MIN_AUC_ON_A_MEMORISER = 0.75


class CheckSkipped(Exception):
    """The check cannot run this class in process (the message says why and where it is tested instead)."""


def _registered(registry, cls, what: str) -> str:
    name = getattr(cls, "name", None)
    assert isinstance(name, str) and name in registry, (
        f"{what} {cls.__name__}: not registered (decorate it with @{what.upper()}S.register_class, or declare it "
        f"under the privbench.{what}s entry point) — registered {what}s: {', '.join(registry.names())}")
    assert registry.get(name).factory is cls, (f"{what} {name!r} is registered to "
                                              f"{registry.get(name).factory.__qualname__}, not {cls.__qualname__}")
    return name


def _records(n: int = 16) -> Records:
    x, y = load_dataset("digits")
    idx = torch.arange(2 * n)
    labels = torch.cat([torch.ones(n), torch.zeros(n)]).long()
    return Records(x[idx], y[idx], labels, idx)


def _fake_references(recs: Records, ac: torch.Tensor, n: int = 4) -> ReferenceModels:
    """Online reference models, each memorising a seeded random half of the evaluation records (and a population)."""
    g = np.random.default_rng(0)
    masks = np.zeros((n, len(recs)), dtype=bool)
    targets = []
    for r in range(n):
        masks[r, g.permutation(len(recs))[: len(recs) // 2]] = True
        targets.append(fake_target(memorizing_eps(recs.x[torch.as_tensor(masks[r])], ac)))
    x, y = load_dataset("digits")
    pop_idx = torch.arange(100, 164)
    population = Records(x[pop_idx], y[pop_idx], torch.zeros(len(pop_idx), dtype=torch.long), pop_idx)
    return ReferenceModels(targets=targets, in_masks=masks, mode="online", pool=recs, pool_in=masks,
                           population=population, seeds=list(range(n)))


def check_attack(cls: type[Attack]) -> None:
    """The attack contract (docs/api.md §9): registered, and AUC > 0.75 on a target that memorised its members."""
    name = _registered(ATTACKS, cls, "attack")
    if getattr(cls, "requires_text", False):
        raise CheckSkipped(f"{name} needs captions (a text-to-image target): run it on privbench.testing's "
                           f"tiny_sd_pipeline instead")
    cfg = build_config("centralized", "digits", "test", 0, [("sample.sampler", "ddim"), ("sample.ddim_steps", "5"),
                                                            ("attack.batch_size", "16")])
    recs = _records()
    members = recs.x[recs.labels == 1]
    ac = torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64).neg().add(1).cumprod(0).float()
    target = fake_target(memorizing_eps(members, ac))
    attack = make_attack(cfg, name, strict=False)
    env = AttackEnv(cfg=cfg, seed=0, train_data=(members, recs.y[recs.labels == 1]),
                    train_index=recs.index[recs.labels == 1].tolist())
    if attack.needs_references:
        if not target.white_box and attack.threat_model.get("queries", "").startswith("white-box"):
            raise CheckSkipped(f"{name} is white-box (gradients of a network) and the memorising target is "
                               f"analytic: run it on trained reference models")
        env.references = _fake_references(recs, ac)
    out = attack.run(target, recs, env)
    if attack.kind == MEMBERSHIP:
        s = np.asarray(out.scores, dtype=np.float64)
        assert s.shape == (len(recs),), f"attack {name}: {s.shape} scores for {len(recs)} records"
        assert np.isfinite(s).all(), f"attack {name}: non-finite scores"
        a = auc(s, recs.labels.numpy())
        assert a > MIN_AUC_ON_A_MEMORISER, (f"attack {name}: AUC {a:.3f} on a model that memorised its members "
                                            f"(higher score = member?)")
    else:
        bad = {k: v for k, v in (out.metrics or {}).items() if isinstance(v, float) and not math.isfinite(v)}
        assert out.metrics and not bad, f"attack {name}: metrics {out.metrics!r}"


def _check_target(method: Method, t: str) -> None:
    x = torch.randn(3, *method.ctx.image_shape)
    y = torch.tensor([0, 1, 2])
    tgt = method.load_target(t)
    xq, yq = tgt.query_inputs(x, y)  # what the network takes (a latent target: latents and caption rows)
    eps = tgt.predict_noise(xq, torch.tensor([0, 10, 100]), yq)
    assert eps.shape == xq.shape and torch.isfinite(eps).all(), f"target {t}: ε of shape {tuple(eps.shape)}"
    p = method.privacy(t)
    # a formal ε > 0, or no formal ε (null) with a conditional or claimed one (dpsad) — or ε = 0 with δ = 0 for a
    # target that never reads a member (public-only), which then says so
    assert p is None or (p["basis"] and (p["epsilon"] > 0 if p["epsilon"] is not None
                                         else (p.get("conditional_epsilon") or p.get("claimed_epsilon")) > 0)
                         or (p["epsilon"] == 0 and p["delta"] == 0 and "by construction" in p["accountant"]
                             and not method.private)), f"target {t}: privacy {p!r}"


def check_method(cls: type[Method], runs_dir=None) -> None:
    """The method contract (docs/api.md §9), trained in ``runs_dir`` (default a temporary folder)."""
    name = _registered(METHODS, cls, "method")
    cfg = build_config(name, "digits", "test", 0, [])
    with tempfile.TemporaryDirectory(prefix="privbench-check-") as tmp:
        method = train(cfg, runs_dir or tmp, "cpu")
        assert method.default_target in method.target_names(), (
            f"method {name}: default target {method.default_target!r} not in {method.target_names()}")
        for t in method.target_names():
            _check_target(method, t)
        claims = [method.privacy(t) for t in method.target_names()]
        assert method.private == any(c is not None and c.get("epsilon") != 0 for c in claims), (
            f"method {name}: private={method.private} but its targets claim {claims!r}")
