"""qmia: quantile regression on public non-members only; its alpha-threshold's realised FPR is calibrated."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from attack_fakes import fake_target
from scipy import stats

from privbench.attacks.base import AttackEnv, Records
from privbench.attacks.qmia import QMIA, fit_qmia, record_features
from privbench.attacks.references import ReferenceModels
from privbench.core.errors import BadInput


def _clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    a = 1 - level
    lo = 0.0 if k == 0 else stats.beta.ppf(a / 2, k, n - k + 1)
    hi = 1.0 if k == n else stats.beta.ppf(1 - a / 2, k + 1, n - k)
    return lo, hi


def _synthetic(rng, n, d=6):
    """Features and a heteroscedastic, skewed (non-Gaussian) log-statistic of non-members."""
    x = rng.standard_normal((n, d))
    loc = x @ np.linspace(0.5, -0.5, d)
    scale = np.exp(0.3 * x[:, 0])
    return x, loc + scale * (rng.gamma(2.0, 1.0, n) - 2.0)


def test_realised_fpr_at_the_alpha_threshold_is_calibrated():
    """On held-out non-members the share below q_alpha lies in its Clopper-Pearson 95% interval around 1% in
    >= 95 of 100 seeds (measured: 96; a threshold at the exact quantile would do no better: the CP interval's own
    coverage at n = 1000 is ~96-97%)."""
    hits = 0
    for seed in range(100):
        rng = np.random.default_rng(seed)
        xp, sp = _synthetic(rng, 4000)
        xh, sh = _synthetic(rng, 1000)
        model = fit_qmia(xp, sp, alpha=0.01, kind="gaussian", conformal=True, seed=seed)
        k = int((sh < model.predict(xh)).sum())
        lo, hi = _clopper_pearson(k, len(sh))
        hits += lo <= 0.01 <= hi
    assert hits >= 95, f"{hits}/100"


def test_gbdt_pinball_quantile_is_calibrated_too():
    fprs = []
    for seed in range(2):
        rng = np.random.default_rng(seed)
        xp, sp = _synthetic(rng, 4000)
        xh, sh = _synthetic(rng, 2000)
        model = fit_qmia(xp, sp, alpha=0.01, kind="gbdt", conformal=True, seed=seed)
        fprs.append(float((sh < model.predict(xh)).mean()))
    assert 0.005 <= np.mean(fprs) <= 0.02, fprs


def test_without_the_conformal_step_a_misspecified_gaussian_is_miscalibrated():
    """Why the conformal step is the default: the official parametric Gaussian quantile of a skewed statistic
    (a gamma's short left tail) puts the threshold far below the 1% quantile."""
    rng = np.random.default_rng(0)
    xp, sp = _synthetic(rng, 4000)
    xh, sh = _synthetic(rng, 4000)
    off = fit_qmia(xp, sp, alpha=0.01, kind="gaussian", conformal=False, seed=0)
    on = fit_qmia(xp, sp, alpha=0.01, kind="gaussian", conformal=True, seed=0)
    assert float((sh < off.predict(xh)).mean()) < 0.002 < float((sh < on.predict(xh)).mean())


def test_qmia_attack_fits_on_the_pool_only_and_scores_the_margin():
    """End to end on an analytic target: scores are log q(x) - log s(x) with the regressor fitted on the pool
    (public non-members); the evaluation labels are never used (shuffling them changes nothing)."""
    g = torch.Generator().manual_seed(0)
    pool = Records(torch.rand((200, 1, 8, 8), generator=g) * 2 - 1, torch.zeros(200, dtype=torch.long),
                   torch.zeros(200, dtype=torch.long), torch.arange(1000, 1200))
    rec = Records(torch.rand((20, 1, 8, 8), generator=g) * 2 - 1, torch.zeros(20, dtype=torch.long),
                  torch.cat([torch.ones(10), torch.zeros(10)]).long(), torch.arange(20))
    target = fake_target(lambda x_t, *_args: 0.5 * x_t)
    env = AttackEnv(seed=3, references=ReferenceModels([], np.zeros((0, 20), bool), mode="offline", pool=pool))
    q = QMIA(statistic="sima", batch_size=64)
    out = q.run(target, rec, env)
    s = lambda r: np.log((0.5 * r.x.double()).abs().pow(4).flatten(1).mean(1).numpy())  # noqa: E731
    model = fit_qmia(record_features(pool.x), s(pool), alpha=0.01, kind="gaussian", conformal=True, seed=3)
    np.testing.assert_allclose(out.scores, model.predict(record_features(rec.x)) - s(rec), rtol=0, atol=1e-4)
    shuffled = Records(rec.x, rec.y, rec.labels.flip(0), rec.index)
    np.testing.assert_allclose(q.run(target, shuffled, env).scores, out.scores)
    assert q.label == "qmia@sima" and QMIA().label == "qmia" and out.figures["public_records"] == 200
    with pytest.raises(BadInput, match="public non-member"):
        q.run(target, rec, AttackEnv(seed=3, references=ReferenceModels([], np.zeros((0, 20), bool))))


def test_qmia_runs_through_the_runner_without_training_a_reference(tmp_path):
    import json

    from click.testing import CliRunner

    from privbench.cli import main

    r = CliRunner().invoke(main, ["attack", "--method", "centralized", "--attack", "qmia@pia", "--preset", "test",
                                  "--runs-dir", str(tmp_path), "--device", "cpu", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output.strip().splitlines()[-1])
    assert res["label"] == "qmia@pia" and res["threat_model"]["reference_models"] == 0
    assert res["figures"]["public_records"] == res["n_members"] + res["n_nonmembers"]
    refs = list(tmp_path.glob("*/references/offline-*"))
    assert refs and not list(refs[0].glob("ref-*"))  # the pool was planned, no model trained
