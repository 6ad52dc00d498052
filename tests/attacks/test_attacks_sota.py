"""lira, rmia, secmi-nn, sima, gsa and the reference models, each checked against a closed form or a direct
computation on analytic fake targets; one small end-to-end run with 2 reference models on ``--preset test``."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from attack_fakes import SCHEDULE, CallLog, fake_target, memorizing_eps
from click.testing import CliRunner
from helpers import train_cfg
from scipy import stats

from privbench.attacks.base import AttackEnv, Records
from privbench.attacks.gsa import GSA, gradient_features, standardize
from privbench.attacks.lira import LiRA, lira_scores
from privbench.attacks.references import ReferenceModels, fixed_noise_losses, record_noise
from privbench.attacks.rmia import RMIA, rmia_scores, tune_a
from privbench.attacks.secmi_nn import SecMINN, cifar_resnet18, stratified_folds
from privbench.attacks.sima import SimA
from privbench.core.errors import BadInput
from privbench.metrics.roc import auc
from privbench.models.target import Target

pytestmark = pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")


def _ac():
    return SCHEDULE.alphas_cumprod()


def _records(n_mem=10, n_non=10, seed=0, first_index=100):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand((n_mem + n_non, 1, 8, 8), generator=g) * 2 - 1
    y = torch.randint(0, 10, (n_mem + n_non,), generator=g)
    labels = torch.cat([torch.ones(n_mem), torch.zeros(n_non)]).long()
    return Records(x, y, labels, torch.arange(first_index, first_index + n_mem + n_non))


def _scaled_eps(c: float, log: list | None = None):
    """ε̂(x_t, t) = c·x_t: the loss of a record is then a closed form of its noise."""
    def fn(x_t, _t, _y=None):
        if log is not None:
            log.append(x_t.clone())
        return c * x_t
    return fn


def _direct_loss(rec: Records, c: float, t: int, draws: int, seed: int) -> np.ndarray:
    """mean over pixels of (ε − c·x_t)², ε the record's own fixed noise — computed record by record."""
    a = _ac()[t]
    out = np.zeros((len(rec), draws))
    for j in range(len(rec)):
        for d in range(draws):
            eps = record_noise(rec.index[j:j + 1], (1, 8, 8), seed, t, d)[0]
            x_t = a.sqrt() * rec.x[j] + (1 - a).sqrt() * eps
            out[j, d] = float(((eps - c * x_t) ** 2).mean())
    return out


# ------------------------------------------------------------------------------------------------ statistic

def test_fixed_noise_is_per_record_not_per_batch_and_shared_by_all_models():
    rec = _records(6, 6)
    seen_a, seen_b = [], []
    ta, tb = fake_target(_scaled_eps(0.3, seen_a)), fake_target(_scaled_eps(0.7, seen_b))
    la = fixed_noise_losses(ta, rec, 200, 2, seed=5, batch_size=5)
    lb = fixed_noise_losses(tb, rec, 200, 2, seed=5, batch_size=12)   # other batching, other model
    xa, xb = torch.cat(seen_a), torch.cat(seen_b)
    # the same x_t for the same (record, draw), whatever the batch: draw-major within each batch
    order_a = [(j, d) for lo in range(0, 12, 5) for d in range(2) for j in range(lo, min(12, lo + 5))]
    order_b = [(j, d) for d in range(2) for j in range(12)]
    for (j, d), row in zip(order_a, xa):
        torch.testing.assert_close(row, xb[order_b.index((j, d))])
    np.testing.assert_allclose(la, _direct_loss(rec, 0.3, 200, 2, 5), rtol=1e-5)
    np.testing.assert_allclose(lb, _direct_loss(rec, 0.7, 200, 2, 5), rtol=1e-5)
    # another seed → other noise
    assert not np.allclose(fixed_noise_losses(ta, rec, 200, 2, seed=6, batch_size=5), la)


# ------------------------------------------------------------------------------------------------ lira

def test_lira_online_per_record_is_the_gaussian_likelihood_ratio():
    # record 0: IN losses {1, 3} (mean 2, sd 1), OUT {5, 7} (mean 6, sd 1); target loss 2
    # record 1: IN {4, 6}, OUT {0, 2} (inverted); target loss 5
    ref = np.array([[1.0, 4.0], [3.0, 6.0], [5.0, 0.0], [7.0, 2.0]])
    inm = np.array([[1, 1], [1, 1], [0, 0], [0, 0]], dtype=bool)
    s = np.array([2.0, 5.0])
    score, _ = lira_scores(s, ref, inm, online=True, variance="per_record")
    want0 = stats.norm.logpdf(2, 2, 1) - stats.norm.logpdf(2, 6, 1)   # = 8
    want1 = stats.norm.logpdf(5, 5, 1) - stats.norm.logpdf(5, 1, 1)
    np.testing.assert_allclose(score, [want0, want1], rtol=1e-12)
    assert abs(want0 - 8.0) < 1e-12


def test_lira_offline_is_one_sided_against_out_and_official_is_two_sided():
    ref = np.array([[5.0, 5.0], [7.0, 9.0]])       # OUT only: means (6, 7), per-record sd (1, 2)
    inm = np.zeros((2, 2), dtype=bool)
    s = np.array([4.0, 11.0])
    paper, _ = lira_scores(s, ref, inm, online=False, variance="per_record")
    np.testing.assert_allclose(paper, [stats.norm.logcdf((6 - 4) / 1), stats.norm.logcdf((7 - 11) / 2)])
    # a HIGH loss is evidence of non-membership under the one-sided test ...
    assert paper[0] > paper[1]
    # ... but any deviation counts under the official two-sided log-pdf (record 1 deviates by 2 sd, record 0 by 2)
    official, _ = lira_scores(s, ref, inm, online=False, variance="per_record", convention="official")
    np.testing.assert_allclose(official, [-stats.norm.logpdf(4, 6, 1), -stats.norm.logpdf(11, 7, 2)])


def test_lira_global_variance_is_the_pooled_within_record_spread():
    ref = np.array([[5.0, 10.0], [7.0, 14.0]])     # deviations ±1 and ±2 → pooled sd √((1+1+4+4)/4)
    inm = np.zeros((2, 2), dtype=bool)
    s = np.array([6.0, 12.0])
    glob = math.sqrt(2.5)
    score, _ = lira_scores(s, ref, inm, online=False, variance="global")
    np.testing.assert_allclose(score, [stats.norm.logcdf(0 / glob)] * 2)
    s2 = np.array([4.0, 12.0])
    score2, _ = lira_scores(s2, ref, inm, online=False, variance="global")
    np.testing.assert_allclose(score2[0], stats.norm.logcdf(2 / glob))
    # official: np.std over all values of the side (not centred per record)
    off, _ = lira_scores(s2, ref, inm, online=False, variance="global", convention="official")
    np.testing.assert_allclose(off[0], -stats.norm.logpdf(4, 6, np.std(ref)))


def test_lira_online_record_without_in_uses_the_mean_shift():
    # record 0 has IN {1, 3} / OUT {5, 7}: shift −4; record 1 has only OUT {9, 11} → μ_in = 10 − 4 = 6
    ref = np.array([[1.0, 9.0], [3.0, 11.0], [5.0, 9.0], [7.0, 11.0]])
    inm = np.array([[1, 0], [1, 0], [0, 0], [0, 0]], dtype=bool)
    score, info = lira_scores(np.array([2.0, 6.0]), ref, inm, online=True, variance="global")
    sd_in = 1.0                                   # pooled IN deviations of record 0
    sd_out = math.sqrt((1 + 1 + 1 + 1) / 4)       # record 0: ±1, record 1: 9, 11, 9, 11 around 10 → ±1
    np.testing.assert_allclose(score[1], stats.norm.logpdf(6, 6, sd_in) - stats.norm.logpdf(6, 10, sd_out))
    assert info["records_without_in"] == 1 and info["mean_in_out_shift"] == [-4.0]


def _refs(models, in_masks, mode, pool=None, pool_in=None, population=None):
    return ReferenceModels(targets=models, in_masks=np.asarray(in_masks, dtype=bool), mode=mode, pool=pool,
                           pool_in=pool_in, population=population)


@pytest.mark.parametrize("transform", ["log", "none"])
def test_lira_attack_end_to_end_equals_the_closed_form_on_analytic_models(transform):
    rec = _records(6, 6)
    cs = [0.2, 0.5, 0.3, 0.6]
    models = [fake_target(_scaled_eps(c)) for c in cs]
    inm = np.array([[1] * 6 + [0] * 6, [1] * 6 + [0] * 6, [0] * 12, [0] * 12], dtype=bool)
    target = fake_target(_scaled_eps(0.25))
    env = AttackEnv(seed=3, references=_refs(models, inm, "online"))
    out = LiRA(statistic="loss", t=100, lira_draws=2, lira_transform=transform, lira_variance="per_record", batch_size=5).run(
        target, rec, env)
    s = _direct_loss(rec, 0.25, 100, 2, 3)
    r = np.stack([_direct_loss(rec, c, 100, 2, 3) for c in cs])
    if transform == "log":
        s, r = np.log(s), np.log(r)
    want = []
    for j in range(12):
        i_in, i_out = inm[:, j], ~inm[:, j]
        if not i_in.any():  # records 6..11: no IN reference → μ_in = μ_out + mean shift of records 0..5
            shift = np.mean([r[inm[:, k], k].mean(0) - r[~inm[:, k], k].mean(0) for k in range(6)], axis=0)
            mu_in, mu_out = r[i_out, j].mean(0) + shift, r[i_out, j].mean(0)
            rows, cols = np.nonzero(inm)
            ins = r[rows, cols] - np.stack([r[inm[:, k], k].mean(0) for k in cols])
            sd_in = np.sqrt((ins ** 2).mean())  # the pooled within-record IN width
        else:
            mu_in, mu_out, sd_in = r[i_in, j].mean(0), r[i_out, j].mean(0), r[i_in, j].std(0)
        sd_out = r[i_out, j].std(0)
        want.append((stats.norm.logpdf(s[j], mu_in, sd_in) - stats.norm.logpdf(s[j], mu_out, sd_out)).mean())
    np.testing.assert_allclose(out.scores, want, rtol=1e-6)
    assert out.figures["variant"] == "online" and out.figures["queries_per_record"] == 2


def test_lira_needs_references_with_one_clear_line():
    with pytest.raises(BadInput, match="reference models"):
        LiRA().run(fake_target(_scaled_eps(0.1)), _records(2, 2), AttackEnv())


# ------------------------------------------------------------------------------------------------ rmia

def test_rmia_offline_pairwise_ratio_closed_form():
    p_x = np.array([0.9, 0.6])
    p_refs_x = np.array([[0.5, 0.6], [0.7, 0.6]])          # mean OUT 0.6 → Pr(x) = ((1.5)(0.6) + 0.5)/2 = 0.7
    p_z = np.array([0.7, 0.8, 0.5])
    p_refs_z = np.full((2, 3), 0.6)                         # Pr(z) = 0.7 too
    inm = np.zeros((2, 2), dtype=bool)
    sc = rmia_scores(p_x, p_refs_x, inm, p_z, p_refs_z, online=False, a=0.5, gamma=1.0)
    # LR_x = (9/7, 6/7); LR_z = (1, 8/7, 5/7)
    np.testing.assert_allclose(sc, [1.0, 1 / 3])
    sc = rmia_scores(p_x, p_refs_x, inm, p_z, p_refs_z, online=False, a=0.5, gamma=1.25)
    np.testing.assert_allclose(sc, [2 / 3, 0.0])            # (9/7)/(8/7) = 1.125 < 1.25; (6/7)/(5/7) = 1.2 < 1.25
    # a = 0: Pr(x) = (mean OUT + 1)/2 = 0.8, Pr(z) = 0.8 → LR_x = (9/8, 6/8), LR_z = (7/8, 1, 5/8)
    sc = rmia_scores(p_x, p_refs_x, inm, p_z, p_refs_z, online=False, a=0.0, gamma=1.0)
    np.testing.assert_allclose(sc, [1.0, 1 / 3])


def test_rmia_offline_uses_only_out_references_and_online_uses_all():
    p_x = np.array([0.5])
    p_refs_x = np.array([[0.9], [0.3]])
    p_z, p_refs_z = np.array([0.5, 0.4]), np.full((2, 2), 0.5)
    inm = np.array([[True], [False]])
    # offline, a = 1: Pr(x) = mean OUT = 0.3 → LR_x = 5/3; LR_z = (1, 0.8)
    np.testing.assert_allclose(rmia_scores(p_x, p_refs_x, inm, p_z, p_refs_z, online=False, a=1.0, gamma=1.0), [1.0])
    # online: Pr(x) = (0.9 + 0.3)/2 = 0.6 → LR_x = 5/6 < 1, > 0.8
    np.testing.assert_allclose(rmia_scores(p_x, p_refs_x, inm, p_z, p_refs_z, online=True, a=0.0, gamma=1.0), [0.5])


def test_rmia_tune_a_is_the_best_auc_on_the_paired_reference():
    from privbench.attacks.rmia import A_GRID

    rng = np.random.default_rng(0)
    pool_in = rng.random((4, 40)) < 0.5
    p_pool = np.clip(0.5 + 0.3 * pool_in + 0.1 * rng.standard_normal((4, 40)), 0.01, 1.0)
    p_z = np.clip(0.5 + 0.1 * rng.standard_normal((4, 15)), 0.01, 1.0)
    a, info = tune_a(p_pool, pool_in, p_z, 1.0)
    usable = (~pool_in[1:]).any(0)
    aucs = {b: auc(rmia_scores(p_pool[0, usable], p_pool[1:, usable], pool_in[1:, usable], p_z[0], p_z[1:],
                               online=False, a=b, gamma=1.0), pool_in[0, usable].astype(int)) for b in A_GRID}
    assert aucs[a] == max(aucs.values()) and info["tuning_records"] == int(usable.sum())


def test_rmia_attack_likelihood_is_exp_minus_the_loss():
    rec, pop = _records(5, 5), _records(4, 4, seed=1, first_index=500)
    cs = [0.2, 0.4]
    models = [fake_target(_scaled_eps(c)) for c in cs]
    target = fake_target(_scaled_eps(0.3))
    env = AttackEnv(seed=2, references=_refs(models, np.zeros((2, 10)), "offline", population=pop))
    out = RMIA(statistic="loss", t=150, lira_draws=1, rmia_a=0.3, batch_size=4).run(target, rec, env)

    def lik(c, r):
        return np.exp(-_direct_loss(r, c, 150, 1, 2).mean(1))

    want = rmia_scores(lik(0.3, rec), np.stack([lik(c, rec) for c in cs]), np.zeros((2, 10), bool), lik(0.3, pop),
                       np.stack([lik(c, pop) for c in cs]), online=False, a=0.3, gamma=1.0)
    np.testing.assert_allclose(out.scores, want)
    assert out.figures["a"] == 0.3 and out.figures["n_population"] == 8


# ------------------------------------------------------------------------------------------------ sima

def test_sima_is_minus_the_p_norm_of_eps_at_the_unnoised_record():
    rec = _records(5, 5)
    log = CallLog()

    def fn(x, t, _y=None):  # a fake ε-predictor whose value is known in closed form
        return x * (t.view(-1, 1, 1, 1).double() + 1).to(x.dtype) / 100 + 0.1

    tgt = fake_target(fn, log=log)
    out = SimA(sima_t=40, p=4.0, sweep=[10], batch_size=4).run(tgt, rec)
    want = -((rec.x * 41 / 100 + 0.1).abs() ** 4).flatten(1).sum(1)
    np.testing.assert_allclose(out.scores, want.double().numpy(), rtol=1e-5)
    np.testing.assert_allclose(out.sweep[10], (-((rec.x * 11 / 100 + 0.1).abs() ** 4).flatten(1).sum(1)).numpy(),
                               rtol=1e-5)
    assert log.timesteps[:2] == [40, 10] and out.figures["queries_per_record"] == 1
    # members of a memorizing model have the smaller predicted noise at the record → higher score
    mem = memorizing_eps(rec.x[rec.labels == 1], _ac())
    assert auc(SimA(sima_t=100).run(fake_target(mem), rec).scores, rec.labels.numpy()) > 0.9


# ------------------------------------------------------------------------------------------------ secmi-nn

def test_secmi_nn_folds_are_stratified_and_seeded():
    labels = np.array([1] * 11 + [0] * 9)
    f = stratified_folds(labels, 2, seed=0)
    assert set(f) == {0, 1}
    for k in (0, 1):
        assert abs((labels[f == k] == 1).sum() - 5.5) <= 0.5 and abs((labels[f == k] == 0).sum() - 4.5) <= 0.5
    np.testing.assert_array_equal(f, stratified_folds(labels, 2, seed=0))


def test_secmi_nn_reports_only_out_of_fold_scores(monkeypatch):
    """A 'classifier' that memorizes its training maps (1/0 for the maps it saw, 0.5 for any other): every
    reported score must be 0.5, i.e. no record is scored by a classifier that saw its label."""
    import privbench.attacks.secmi_nn as mod

    seen_folds = []

    class Lookup(torch.nn.Module):
        def __init__(self, maps, labels):
            super().__init__()
            self.maps, self.labels = maps.flatten(1), labels.float()

        def forward(self, m):
            d = torch.cdist(m.flatten(1), self.maps)
            hit = d.min(1).values < 1e-9
            return torch.where(hit, self.labels[d.argmin(1)], torch.full_like(hit, 0.5, dtype=torch.float)).view(-1, 1)

    def fake_train(maps, labels, **kw):
        seen_folds.append(len(maps))
        return Lookup(maps, labels)

    monkeypatch.setattr(mod, "train_classifier", fake_train)
    rec = _records(8, 8)
    tgt = fake_target(memorizing_eps(rec.x[:8], _ac()))
    out = SecMINN(secmi_t=20, secmi_k=10, secmi_nn_folds=4, batch_size=5).run(tgt, rec, AttackEnv(seed=1))
    np.testing.assert_array_equal(out.scores, np.full(16, 0.5))
    assert seen_folds == [12, 12, 12, 12]          # each classifier trained on the other 3 folds


def test_secmi_nn_classifier_learns_maps_at_the_tiny_scale_of_real_t_errors():
    """Real t-error maps are ~1e-2 per pixel; the classifier must still learn a separable pattern out of fold."""
    from privbench.attacks.secmi_nn import train_classifier

    g = torch.Generator().manual_seed(0)
    labels = torch.arange(64) % 2
    pattern = torch.zeros(1, 8, 8)
    pattern[:, :4] = 1.0                                   # members' errors concentrate in the top half
    maps = 1e-3 * (torch.rand((64, 1, 8, 8), generator=g) + labels.view(-1, 1, 1, 1) * pattern)
    net = train_classifier(maps[:32], labels[:32], arch="small", steps=200, seed=0)
    with torch.no_grad():
        held_out = net(maps[32:]).view(-1).numpy()
    assert auc(held_out, labels[32:].numpy()) > 0.9


def test_secmi_nn_trains_and_runs_both_architectures():
    rec = _records(8, 8)
    tgt = fake_target(memorizing_eps(rec.x[:8], _ac()))
    out = SecMINN(secmi_t=20, secmi_k=10, secmi_nn_steps=30, batch_size=16).run(tgt, rec, AttackEnv(seed=0))
    assert out.scores.shape == (16,) and np.isfinite(out.scores).all()
    assert out.figures["offset"] == "official" and out.figures["compared_levels"] == [10, 20]
    assert cifar_resnet18(3)(torch.zeros(2, 3, 8, 8)).shape == (2, 1)


# ------------------------------------------------------------------------------------------------ gsa

def _white_box_target(seed=0, num_classes=10):
    from privbench.core.config import ModelConfig
    from privbench.models.unet import build_denoiser

    torch.manual_seed(seed)
    net = build_denoiser(ModelConfig(block_out_channels=[8, 16], norm_num_groups=4), 1, 8, num_classes)
    return Target(f"model{seed}", "test", net, SCHEDULE, "cpu", num_classes, clip_sample=False)


@pytest.mark.parametrize("variant", [1, 2])
def test_gsa_features_equal_per_record_autograd_norms(variant):
    tgt = _white_box_target()
    rec = _records(3, 2)
    ts = [10, 300, 900]
    feats = gradient_features(tgt, rec, ts, variant=variant, seed=4, batch_size=2)
    ac = _ac()
    params = list(tgt.model.parameters())
    for j in range(len(rec)):
        x = rec.x[j:j + 1].repeat(len(ts), 1, 1, 1)
        noise = torch.stack([record_noise(rec.index[j:j + 1], (1, 8, 8), 4, t, 0)[0] for t in ts])
        tt = torch.tensor(ts)
        a = ac[tt].view(-1, 1, 1, 1)
        y = rec.y[j:j + 1].repeat(len(ts))
        pred = tgt.model(a.sqrt() * x + (1 - a).sqrt() * noise, tt, y, None)
        if variant == 1:  # official: F.mse_loss over the K copies, one backward
            g = torch.autograd.grad(F.mse_loss(pred, noise), params)
            want = torch.stack([gi.norm() for gi in g])
        else:
            want = torch.stack([torch.stack([gi.norm() for gi in torch.autograd.grad(
                F.mse_loss(pred[k], noise[k]), params, retain_graph=True)]) for k in range(len(ts))]).mean(0)
        np.testing.assert_allclose(feats[j], want.double().numpy(), rtol=1e-4, atol=1e-7)
    assert feats.shape == (5, len(params))
    assert all(p.requires_grad for p in tgt.model.parameters())  # restored


def test_gsa_refuses_a_composite_target_and_trains_on_reference_data():
    rec = _records(4, 4)
    with pytest.raises(BadInput, match="white-box"):
        gradient_features(fake_target(_scaled_eps(0.1)), rec, [10], variant=1, seed=0, batch_size=4)
    pool = _records(6, 6, seed=3, first_index=300)
    refs = _refs([_white_box_target(1), _white_box_target(2)], np.zeros((2, 8)), "offline", pool=pool,
                 pool_in=np.array([[1, 0] * 6, [0, 1] * 6], dtype=bool))
    out = GSA(gsa_timesteps=[50, 500], gsa_classifier="logistic").run(_white_box_target(0), rec,
                                                                       AttackEnv(references=refs))
    assert out.scores.shape == (8,) and ((out.scores >= 0) & (out.scores <= 1)).all()
    assert out.figures["training_rows"] == 24 and out.figures["training_members"] == 12
    s = standardize(np.array([[1.0, 5.0], [3.0, 5.0]]))
    np.testing.assert_allclose(s, [[-1, 0], [1, 0]])


# ------------------------------------------------------------------------------------------------ references

def test_reference_pool_offline_is_disjoint_and_online_is_the_evaluation_split():
    from privbench.data.splits import member_split
    from privbench.runs.references import inclusion, plan_pool

    split = member_split(300, 40, 40, seed=0)
    ev = set(split.members) | set(split.nonmembers)
    pool, pop = plan_pool(split, 300, "offline", 0, n_population=30)
    assert len(pool) == 80 and not (set(pool) & ev) and not (set(pop) & (ev | set(pool))) and len(pop) == 30
    pool_on, pop_on = plan_pool(split, 300, "online", 0, n_population=30)
    assert set(pool_on) == ev and not (set(pop_on) & ev)
    with pytest.raises(BadInput, match="outside the evaluation split"):
        plan_pool(member_split(150, 40, 40, 0), 150, "offline", 0)
    # each reference's coins do not depend on how many references there are, and differ between references
    np.testing.assert_array_equal(inclusion(0, 3, 80), inclusion(0, 3, 80))
    assert not np.array_equal(inclusion(0, 0, 80), inclusion(0, 1, 80))
    assert 20 < inclusion(0, 0, 80).sum() < 60


def test_end_to_end_two_reference_models_shared_between_attacks(tmp_path, privbench_log, monkeypatch):
    from privbench.runs.attack import run_attack

    cfg = train_cfg(attack__n_reference=2, attack__reference_pool="online")
    res = run_attack(cfg, "lira", None, runs_dir=tmp_path, device="cpu").to_json()
    assert res["threat_model"]["reference_models"] == 2 and res["figures"]["variant"] == "online"
    assert 0.0 <= res["metrics"]["auc"] <= 1.0
    store = sorted((tmp_path).glob("centralized-digits-*/references/online-*"))
    assert len(store) == 1
    inc = json.loads((store[0] / "inclusion.json").read_text())
    split0 = json.loads((store[0] / "ref-0" / "split.json").read_text())
    members0 = {p for p, k in zip(inc["pool_index"], inc["references"]["0"]) if k}
    assert set(split0["members"]) == members0                       # the reference trained on its half
    cfg0 = (store[0] / "ref-0" / "config.yaml").read_text()
    assert f"n_members: {len(members0)}" in cfg0
    stamp = (store[0] / "ref-1" / "train_done.json").stat().st_mtime_ns
    assert "training reference model" in privbench_log.text                 # the first attack trained them
    privbench_log.lines.clear()
    res2 = run_attack(cfg, "rmia", None, runs_dir=tmp_path, device="cpu").to_json()
    assert "training reference model" not in privbench_log.text             # reused, not retrained
    assert (store[0] / "ref-1" / "train_done.json").stat().st_mtime_ns == stamp
    assert res2["figures"]["variant"] == "online" and res2["timing"]["references_s"] is not None
    z = np.load(res2["scores_path"])
    assert z["scores"].shape == (128,) and ((z["scores"] >= 0) & (z["scores"] <= 1)).all()

    # --attack lira,rmia: the target and the two references are loaded once for both, and score as loaded anew
    from privbench.attacks import statistics
    from privbench.models.methods.centralized import Centralized
    from privbench.runs.attack import run_attacks

    loads = []
    real = Centralized.load_target
    monkeypatch.setattr(Centralized, "load_target", lambda self, name=None: loads.append(name) or real(self, name))
    for d in tmp_path.glob("centralized-digits-*/attacks"):
        shutil.rmtree(d)
    statistics.clear_values()
    both = run_attacks(cfg, ["lira", "rmia"], runs_dir=tmp_path, device="cpu")
    assert len(loads) == 3
    assert [np.load(r.scores_path)["scores"].tobytes() for r in both] == [
        np.load(r["scores_path"])["scores"].tobytes() for r in (res, res2)]
    for d in tmp_path.glob("centralized-digits-*/attacks"):
        shutil.rmtree(d)
    run_attack(cfg, "lira", None, runs_dir=tmp_path, device="cpu")  # outside run_attacks: every model loaded anew
    assert len(loads) == 6


def test_offline_pool_too_large_is_refused_before_training(tmp_path):
    from privbench.cli import main

    res = CliRunner().invoke(main, ["attack", "--method", "centralized", "--attack", "lira", "--preset", "test",
                                    "--runs-dir", str(tmp_path), "--device", "cpu", "--set", "data.n_members=800",
                                    "--set", "data.n_nonmembers=800"])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in (res.stderr if hasattr(res, "stderr") else res.output).splitlines() if ln.strip()]
    assert len(lines) == 1 and "reference_pool=offline" in lines[0]
    assert not any(tmp_path.iterdir())
    res = CliRunner().invoke(main, ["attack", "--method", "centralized", "--attack", "rmia", "--preset", "test",
                                    "--runs-dir", str(tmp_path), "--device", "cpu", "--set", "attack.rmia_a=-0.5"])
    assert res.exit_code == 2 and "rmia_a" in res.output and not any(tmp_path.iterdir())


def test_an_attack_is_refused_on_a_target_it_does_not_apply_to(tmp_path):
    from privbench.cli import main

    res = CliRunner().invoke(main, ["attack", "--method", "pfdm", "--attack", "gsa", "--target", "pipeline:0",
                                    "--preset", "test", "--runs-dir", str(tmp_path), "--device", "cpu"])
    assert res.exit_code == 2 and "does not apply to target 'pipeline:0'" in res.output
    assert not any(tmp_path.iterdir())


def test_attack_variants_are_labelled_and_reported_side_by_side(tmp_path):
    """`lira@online` / `secmi@paper` name non-default variants: a suite asks for both variants of an attack, each
    is its own cell and result (label in result.json) and its own column of the side-by-side table; a variant an
    attack does not have is one line, exit 2, nothing written."""
    from privbench.cli import main

    suite = tmp_path / "v.yaml"
    suite.write_text("name: v\npreset: test\ndevice: cpu\nfid: false\nsamples: false\n"
                     "methods:\n  centralized:\n    targets: [model]\n"
                     "    attacks: [secmi, secmi@paper, secmi@official, lira, lira@online]\n"
                     "    set: {attack.n_reference: 2}\n")
    out, runs = tmp_path / "bench", tmp_path / "runs"
    r = CliRunner().invoke(main, ["bench", "--suite", str(suite), "--out", str(out), "--runs-dir", str(runs)])
    assert r.exit_code == 0, r.output
    cells = [c for c in json.loads((out / "bench.json").read_text())["cells"] if c["kind"] == "attack"]
    assert sorted(c["attack"] for c in cells) == ["lira", "lira@online", "secmi", "secmi@paper"]  # @official: default
    results = {c["attack"]: json.loads(Path(c["result_path"]).read_text()) for c in cells}
    assert results["lira@online"]["attack"] == "lira" and results["lira@online"]["label"] == "lira@online"
    assert results["lira@online"]["threat_model"]["reference_pool"] == "online"
    assert results["lira"]["threat_model"]["reference_pool"] == "offline"
    assert results["secmi@paper"]["attack_config"]["secmi_offset"] == "paper"
    assert results["secmi"]["attack_config"]["secmi_offset"] == "official"
    a = np.load(results["secmi"]["scores_path"])["scores"]
    b = np.load(results["secmi@paper"]["scores_path"])["scores"]
    assert not np.allclose(a, b)                                    # two comparisons, two score vectors
    head = (out / "side_by_side.csv").read_text().splitlines()[0].split(",")
    for col in ("secmi_auc", "secmi@paper_auc", "lira_auc", "lira@online_auc"):
        assert col in head, col
    before = sorted(p.name for p in runs.iterdir())
    r = CliRunner().invoke(main, ["attack", "--method", "centralized", "--attack", "pia@paper", "--preset", "test",
                                  "--runs-dir", str(runs), "--device", "cpu"])
    assert r.exit_code == 2 and "not a variant of pia" in r.output
    assert sorted(p.name for p in runs.iterdir()) == before


def test_gsa_official_xgboost_classifier_and_label(monkeypatch):
    """The official GSA classifier, xgboost.XGBClassifier(n_estimators=200), is reachable
    (attack.gsa_classifier=xgboost, label gsa@xgboost); without xgboost it is exit 2 naming the extra."""
    import sys

    from privbench.attacks.gsa import make_classifier
    from privbench.runs.attack import make_attack

    xgboost = pytest.importorskip("xgboost")
    clf = make_classifier("xgboost", 0)
    assert isinstance(clf, xgboost.XGBClassifier) and clf.get_params()["n_estimators"] == 200
    rec = _records(4, 4)
    pool = _records(6, 6, seed=3, first_index=300)
    refs = _refs([_white_box_target(1), _white_box_target(2)], np.zeros((2, 8)), "offline", pool=pool,
                 pool_in=np.array([[1, 0] * 6, [0, 1] * 6], dtype=bool))
    out = GSA(gsa_timesteps=[50, 500], gsa_classifier="xgboost").run(_white_box_target(0), rec,
                                                                      AttackEnv(references=refs))
    assert out.figures["classifier"] == "xgboost" and ((out.scores >= 0) & (out.scores <= 1)).all()
    cfg = train_cfg(attack__gsa_classifier="xgboost")
    assert make_attack(cfg, "gsa").label == "gsa@xgboost" and make_attack(train_cfg(), "gsa").label == "gsa"
    monkeypatch.setitem(sys.modules, "xgboost", None)
    with pytest.raises(BadInput, match=r"pip install 'privbench\[official\]'"):
        make_attack(cfg, "gsa").validate(1000, cfg)
