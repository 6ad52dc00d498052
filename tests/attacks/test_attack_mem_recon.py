"""Memorization (NN ratio) on constructed sets; reconstruction re-identification measured on digits."""
from __future__ import annotations

from types import SimpleNamespace

import torch
from attack_fakes import SCHEDULE, fake_target, gaussian_eps, memorizing_eps

from privbench.attacks.base import AttackEnv, Records
from privbench.attacks.memorization import NNRatioMemorization, nn_ratio
from privbench.attacks.reconstruction import Reconstruction, simulate_uploads
from privbench.core.mechanisms import clip_l2 as clip_with_mask
from privbench.data.base import load_dataset


def clip_l2(x, c):
    return clip_with_mask(x, c)[0]


def _digits():
    return load_dataset("digits")


def test_nn_ratio_exact_duplicates_memorized_random_not():
    x, _ = _digits()
    train = x[:200]
    g = torch.Generator().manual_seed(0)
    copies = train[[3, 50, 120]]
    noise = torch.rand((20, 1, 8, 8), generator=g) * 2 - 1
    out = NNRatioMemorization(batch_size=16).evaluate(torch.cat([copies, noise]), None, train)
    mem = out.arrays["memorized"].astype(bool)
    assert mem[:3].all() and not mem[3:].any()
    assert out.metrics == {"memorized_fraction": 3 / 23, "n_generated": 23}
    assert out.figures["memorized_training_records"] == [3, 50, 120]
    # a sample halfway between two training records: ratio 1, not memorized
    mid = (train[0:1] + train[1:2]) / 2
    r = nn_ratio(mid, train[:2])
    assert abs(float(r["ratio"][0]) - 1.0) < 1e-5


def test_nn_ratio_threshold_is_one_third():
    ref = torch.zeros(2, 1, 1, 4)
    ref[1] = 1.0  # distance between the two references: 2
    s = torch.zeros(2, 1, 1, 4)
    s[0] = 0.24  # d1 = 0.48, d2 = 1.52 → 0.316 < 1/3
    s[1] = 0.26  # d1 = 0.52, d2 = 1.48 → 0.351 ≥ 1/3
    out = NNRatioMemorization().evaluate(s, None, ref)
    assert out.arrays["memorized"].tolist() == [1, 0]


def test_duplicated_training_records_still_count_as_memorized():
    x, _ = _digits()
    train = torch.cat([x[:50], x[7:8].repeat(20, 1, 1, 1)])  # record 7 duplicated 21 times
    out = NNRatioMemorization().evaluate(x[7:8].clone(), None, train)
    assert out.metrics["memorized_fraction"] == 1.0
    assert out.figures["n_unique_training_records"] == 50
    assert any("duplicate" in n for n in out.notes)


def test_memorization_run_samples_the_target_and_writes_a_grid():
    x, y = _digits()
    train = x[:40]
    tgt = fake_target(memorizing_eps(train, SCHEDULE.alphas_cumprod()))
    cfg = SimpleNamespace(sample=SimpleNamespace(sampler="ddim", ddim_steps=20, batch_size=64))
    out = NNRatioMemorization(n_samples=16).run(tgt, None, AttackEnv(cfg=cfg, train_data=(train, y[:40]), seed=1))
    # the ideal denoiser of 40 points reproduces training points: (nearly) every sample is memorized
    assert out.metrics["n_generated"] == 16
    assert out.metrics["memorized_fraction"] >= 0.9
    (name, (images, labels, nrow)), = out.images.items()
    assert name == "memorization-memorized" and images.shape[0] == len(labels) == 2 * 16 and nrow == 8


def _recon_records(n=400, seed=0):
    """n members and n non-members from digits; the rest of the data is 'public' (for the attacker's prior)."""
    x, y = _digits()
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    mem, non, pub = perm[:n], perm[n:2 * n], perm[2 * n:]
    idx = torch.cat([mem, non])
    rec = Records(x[idx], y[idx], torch.cat([torch.ones(n), torch.zeros(n)]).long(), idx)
    return rec, x[pub]


def test_simulated_upload_formula():
    x, _ = _digits()
    x = x[:64] * 3  # norms ≈ 20 > C = 10: clipped
    ac = SCHEDULE.alphas_cumprod()
    u = simulate_uploads(x, 690, 10.0, ac, seed=3)
    a = ac[689]
    z = (u - a.sqrt() * clip_l2(x, 10.0)) / (1 - a).sqrt()
    assert abs(z.mean().item()) < 0.05 and abs(z.std().item() - 1) < 0.05
    assert torch.allclose(clip_l2(x, 10.0).flatten(1).norm(dim=1), torch.full((64,), 10.0), atol=1e-4)
    assert torch.equal(u, simulate_uploads(x, 690, 10.0, ac, seed=3))


def test_reidentification_far_above_chance_at_small_t0_near_chance_at_690():
    """Measured on 400 simulated uploads of digits (pool: 400 members + 400 non-member distractors, chance
    1/800). The attacker's denoiser is the exact posterior mean under a Gaussian prior fitted to public
    records (neither members nor non-members)."""
    rec, public = _recon_records()
    tgt = fake_target(gaussian_eps(public, SCHEDULE.alphas_cumprod()))
    cfg = SimpleNamespace(sample=SimpleNamespace(ddim_steps=20), pfdm=SimpleNamespace(t0=690, clip=10.0))
    res = {}
    for t0 in (100, 690):
        out = Reconstruction(recon_t0=t0, recon_n=0, batch_size=256).run(tgt, rec, AttackEnv(cfg=cfg, seed=0))
        res[t0] = out
        m = out.metrics
        assert m["reid_chance"] == 1 / 800
        assert out.figures["n_uploads_attacked"] == 400 and out.figures["pool_size"] == 800
        assert set(out.figures["attackers"]) == {"naive", "tweedie", "chain-ddim"}
        assert m["reid_rate"] == max(a["reid_rate"] for a in out.figures["attackers"].values())
    small, default = res[100].metrics, res[690].metrics
    print("re-id at t0=100:", small, "\nre-id at t0=690:", default)
    assert small["reid_rate"] >= 0.95                       # > 700 × chance
    assert small["psnr"] > 15
    # at PFDM's default t0 (sigma ≈ 11 per pixel in data scale) the best of the three attackers re-identifies
    # at most a few of the 400 uploads: within 10 × chance (measured ≈ 2-4 ×), and label-aware re-id stays
    # within 3 × its own chance level (1 / #same-label candidates ≈ 1/80)
    assert default["reid_rate"] <= 10 * default["reid_chance"]
    assert default["reid_rate_label"] <= 3 * default["reid_chance_label"]
    assert default["psnr"] < small["psnr"]
