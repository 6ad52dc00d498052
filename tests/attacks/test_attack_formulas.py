"""Attack formulas and the score convention, checked against direct computation on analytic Targets."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from attack_fakes import CallLog, fake_target, memorizing_eps

from privbench.attacks.base import AttackEnv, Records
from privbench.attacks.loss import LossAttack, loss_noise
from privbench.attacks.pia import PIA, pian_normalize
from privbench.attacks.pian import PIAN
from privbench.attacks.secmi import SecMI, secmi_nfe
from privbench.core.registry import ATTACKS
from privbench.metrics.roc import auc


def _records(n_mem=12, n_non=12, seed=0, num_classes=10):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand((n_mem + n_non, 1, 8, 8), generator=g) * 2 - 1
    y = torch.randint(0, num_classes, (n_mem + n_non,), generator=g)
    labels = torch.cat([torch.ones(n_mem), torch.zeros(n_non)]).long()
    return Records(x, y, labels, torch.arange(100, 100 + n_mem + n_non))


@pytest.fixture(scope="module")
def setup():
    rec = _records()
    members = rec.x[rec.labels == 1]
    log = CallLog()
    tgt = fake_target(memorizing_eps(members, _ac()), log=log)
    return rec, tgt, log


def _ac():
    from attack_fakes import SCHEDULE

    return SCHEDULE.alphas_cumprod()


def test_registry_has_every_attack_with_a_description():
    for name in ("loss", "secmi", "pia", "pian", "memorization", "reconstruction"):
        e = ATTACKS.get(name)
        assert e.description and "\n" not in e.description


def _direct_pia(fn, x, t, p=4.0, normalize=False):
    ac = _ac()
    e0 = fn(x, torch.zeros(x.shape[0], dtype=torch.long))
    if normalize:
        e0 = e0 * math.sqrt(2 / math.pi) / e0.abs().mean(dim=(1, 2, 3), keepdim=True)
    a = ac[t]
    xt = a.sqrt() * x + (1 - a).sqrt() * e0
    et = fn(xt, torch.full((x.shape[0],), t, dtype=torch.long))
    return -((e0 - et).abs() ** p).flatten(1).sum(1)


def test_pia_matches_direct_computation_and_members_score_higher(setup):
    rec, tgt, log = setup
    fn = memorizing_eps(rec.x[rec.labels == 1], _ac())
    out = PIA(t=200, p=4.0, batch_size=7).run(tgt, rec)
    ref = _direct_pia(fn, rec.x, 200).double().numpy()
    np.testing.assert_allclose(out.scores, ref, rtol=1e-4, atol=1e-6)
    # the memorising model: members have (near) zero PIA distance → highest scores; AUC 1 with members positive
    assert out.scores[rec.labels.numpy() == 1].min() > out.scores[rec.labels.numpy() == 0].max()
    assert auc(out.scores, rec.labels.numpy()) == 1.0
    assert np.all(out.scores <= 0)  # a negated distance


def test_pia_queries_two_per_record_in_batches():
    rec = _records(10, 10)
    log = CallLog()
    tgt = fake_target(memorizing_eps(rec.x[:10], _ac()), log=log)
    PIA(t=200, batch_size=8).run(tgt, rec)
    assert log.records_evaluated() == 2 * len(rec)
    assert len(log.calls) == 2 * math.ceil(len(rec) / 8)  # batched: two calls per batch
    assert log.timesteps == [0, 200] * 3


def test_pia_sweep_reuses_eps0():
    rec = _records(6, 6)
    log = CallLog()
    tgt = fake_target(memorizing_eps(rec.x[:6], _ac()), log=log)
    out = PIA(t=200, sweep=[50, 100, 200], batch_size=64).run(tgt, rec)
    assert log.timesteps == [0, 200, 50, 100]  # ε₀ once, each distinct t once
    assert set(out.sweep) == {50, 100, 200}
    np.testing.assert_allclose(out.sweep[200], out.scores)
    fn = memorizing_eps(rec.x[:6], _ac())
    np.testing.assert_allclose(out.sweep[50], _direct_pia(fn, rec.x, 50).double().numpy(), rtol=1e-4, atol=1e-6)


def test_pian_constant_is_sqrt_2_over_pi():
    e = torch.randn(5, 3, 8, 8) * torch.tensor([0.1, 1, 3, 10, 0.01]).view(-1, 1, 1, 1)
    m = pian_normalize(e).abs().mean(dim=(1, 2, 3))
    np.testing.assert_allclose(m.numpy(), math.sqrt(2 / math.pi), rtol=1e-5)
    assert abs(math.sqrt(2 / math.pi) - 0.7979) < 1e-4
    # not CDI's sqrt(pi/2) ≈ 1.2533 (a factor pi/2 larger)
    assert abs(m.mean().item() - math.sqrt(math.pi / 2)) > 0.4


def test_pian_matches_direct_computation(setup):
    rec, tgt, _ = setup
    fn = memorizing_eps(rec.x[rec.labels == 1], _ac())
    out = PIAN(t=100, p=4.0, batch_size=5).run(tgt, rec)
    ref = _direct_pia(fn, rec.x, 100, normalize=True).double().numpy()
    np.testing.assert_allclose(out.scores, ref, rtol=1e-4, atol=1e-6)
    assert any("sqrt(2/pi)" in n for n in out.notes)


def test_pia_p_is_used():
    rec = _records(4, 4)
    fn = memorizing_eps(rec.x[:4], _ac())
    tgt = fake_target(fn)
    out = PIA(t=150, p=2.0).run(tgt, rec)
    np.testing.assert_allclose(out.scores, _direct_pia(fn, rec.x, 150, p=2.0).double().numpy(), rtol=1e-4, atol=1e-6)


def test_loss_matches_direct_computation_with_seeded_noise(setup):
    rec, tgt, _ = setup
    fn = memorizing_eps(rec.x[rec.labels == 1], _ac())
    bs = 10
    out = LossAttack(t=200, n_draws=3, batch_size=bs).run(tgt, rec, AttackEnv(seed=5))
    ac = _ac()
    a = ac[200]
    ref = []
    for b, lo in enumerate(range(0, len(rec), bs)):
        x = rec.x[lo:lo + bs]
        tot = torch.zeros(x.shape[0])
        for d in range(3):
            eps = loss_noise(x.shape, "cpu", 5, 200, d, b)
            xt = a.sqrt() * x + (1 - a).sqrt() * eps
            tot += ((eps - fn(xt, torch.full((x.shape[0],), 200))) ** 2).flatten(1).sum(1)
        ref.append(-tot / 3)
    np.testing.assert_allclose(out.scores, torch.cat(ref).double().numpy(), rtol=1e-4, atol=1e-5)
    assert out.nfe_per_record == 3
    # reproducible for the same seed, different for another
    again = LossAttack(t=200, n_draws=3, batch_size=bs).run(tgt, rec, AttackEnv(seed=5))
    np.testing.assert_array_equal(again.scores, out.scores)
    other = LossAttack(t=200, n_draws=3, batch_size=bs).run(tgt, rec, AttackEnv(seed=6))
    assert not np.allclose(other.scores, out.scores)
    # members (memorised) have a lower loss → higher score
    assert auc(out.scores, rec.labels.numpy()) > 0.9


def _direct_secmi(fn, x, t_sec, k, offset):
    ac = _ac()

    def move(x, s, s2):
        e = fn(x, torch.full((x.shape[0],), s, dtype=torch.long))
        x0 = (x - (1 - ac[s]).sqrt() * e) / ac[s].sqrt()
        return ac[s2].sqrt() * x0 + (1 - ac[s2]).sqrt() * e

    c = t_sec if offset == "paper" else t_sec - k
    for s in range(0, c, k):
        x = move(x, s, s + k)
    back = move(move(x, c, c + k), c + k, c)
    return -((back - x) ** 2).flatten(1).sum(1)


@pytest.mark.parametrize("offset,expected", [
    ("paper", list(range(0, 100, 10)) + [100, 110]),     # 10 inversion + 1 up + 1 down = t_sec/k + 2 = 12
    ("official", list(range(0, 90, 10)) + [90, 100]),    # 9 inversion + 1 + 1 = t_sec/k + 1 = 11 (90 ↔ 100)
])
def test_secmi_offsets_query_the_right_timesteps(offset, expected):
    rec = _records(5, 5)
    log = CallLog()
    fn = memorizing_eps(rec.x[:5], _ac())
    tgt = fake_target(fn, log=log)
    out = SecMI(secmi_t=100, secmi_k=10, secmi_offset=offset, batch_size=64).run(tgt, rec)
    assert log.timesteps == expected
    assert len(expected) == secmi_nfe(100, 10, offset) == out.figures["queries_per_record"]
    assert secmi_nfe(100, 10, "paper") == 12 and secmi_nfe(100, 10, "official") == 11
    assert out.figures["offset"] == offset
    assert out.figures["compared_levels"] == ([100, 110] if offset == "paper" else [90, 100])
    np.testing.assert_allclose(out.scores, _direct_secmi(fn, rec.x, 100, 10, offset).double().numpy(),
                               rtol=1e-3, atol=1e-6)


def test_secmi_members_score_higher_and_sweep_shares_inversion(setup):
    rec, _, _ = setup
    log = CallLog()
    fn = memorizing_eps(rec.x[rec.labels == 1], _ac())
    tgt = fake_target(fn, log=log)
    out = SecMI(secmi_t=100, secmi_k=10, secmi_offset="paper", sweep=[50, 100], batch_size=64).run(tgt, rec)
    assert auc(out.scores, rec.labels.numpy()) > 0.9
    # paper offset: inversion to 100 shared (10 calls) + 2 per compared level (50 and 100)
    assert len(log.calls) == 10 + 4
    np.testing.assert_allclose(out.sweep[50], _direct_secmi(fn, rec.x, 50, 10, "paper").double().numpy(),
                               rtol=1e-3, atol=1e-6)


def test_class_conditional_targets_get_the_record_label():
    rec = _records(6, 6)
    log = CallLog()
    tgt = fake_target(memorizing_eps(rec.x[:6], _ac()), num_classes=10, log=log)
    for attack in (PIA(batch_size=5), LossAttack(batch_size=5), SecMI(batch_size=5)):
        log.labels.clear()
        attack.run(tgt, rec)
        seen = log.labels
        assert all(s is not None for s in seen)
        # every call of batch b carries the labels of batch b's records
        n_b = math.ceil(len(rec) / 5)
        per_batch = len(seen) // n_b
        for i, s in enumerate(seen):
            b = i // per_batch
            assert torch.equal(s, rec.y[b * 5:(b + 1) * 5])
    unconditional = fake_target(memorizing_eps(rec.x[:6], _ac()), num_classes=None, log=log)
    log.labels.clear()
    PIA().run(unconditional, rec)
    assert all(s is None for s in log.labels)


def test_secmi_default_level_is_100_on_pixel_targets_and_another_k_is_not_refused():
    """The pixel-space default stays t_sec = 100 (the latent level attack.secmi_t_latent is not used here, so a
    stride it is no multiple of is not refused on a pixel target)."""
    from privbench.core.config import build_config
    from privbench.runs.attack import make_attack

    rec = _records(5, 5)
    out = SecMI(batch_size=64).run(fake_target(memorizing_eps(rec.x[:5], _ac())), rec)
    assert out.figures["t_sec"] == 100 and out.figures["t_sec_setting"] == "secmi_t"
    cfg = build_config("centralized", "digits", "test", 0, [("attack.secmi_k", "20"), ("attack.secmi_t", "100")])
    assert make_attack(cfg, "secmi").secmi_k == 20
