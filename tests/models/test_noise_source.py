"""dp.noise_source: seeded privacy noise can be regenerated from the public seed — an attack recovers CLIP(x) from
an uploads file — while secure noise (OS entropy, never stored) cannot; the seeded path draws from the step
generator; every basis names the source; seeded results carry the label."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import train_cfg

from privbench.core.mechanisms import (
    SECURE,
    SEEDED_NOISE_LABEL,
    clip_l2,
    noise_generator,
    poisson_sample,
    secure_normal,
)
from privbench.core.seeding import step_generator, sub_seed
from privbench.models.dp_sgd import DPPlan, dp_sgd_gradient
from privbench.models.grad_sample import PerSampleGrads
from privbench.models.methods import pfdm as pfdm_mod
from privbench.runs import train as api


def _uploads(tmp_path, name, **sets):
    m = api.make_method(train_cfg("pfdm", "test", **sets), tmp_path / name, "cpu")
    m.ctx.run_dir.mkdir(parents=True)
    m._make_all_uploads()
    return m


def _recover_clipped_records(m, up) -> torch.Tensor:
    """The attack: from the uploads file and the run's public seed, regenerate each client's upload noise
    z (the generator's seeding is in the public source) and invert x̃ = √ᾱ·CLIP(x, C) + √(1−ᾱ)·z."""
    a = float(m.ctx.schedule.alphas_cumprod().double()[m.t0 - 1])
    out = torch.empty(up.x.shape, dtype=torch.float64)
    for k in up.client.unique().tolist():
        sel = up.client == k
        g = torch.Generator().manual_seed(sub_seed(m.cfg.seed, pfdm_mod._TAG_UPLOAD, k))
        z = torch.randn(up.x[sel].shape, generator=g, dtype=torch.float64)
        out[sel] = (up.x[sel].double() - math.sqrt(1 - a) * z) / math.sqrt(a)
    return out


@pytest.mark.parametrize("source", ["seeded", "secure"])
def test_recovering_clipped_records_from_uploads_and_seed(tmp_path, source):
    m = _uploads(tmp_path, source, dp__noise_source=source)
    up = m.uploads()
    x, _ = m.ctx.records(up.index)
    truth, _ = clip_l2(x.double(), m.cfg.pfdm.clip)
    err = (_recover_clipped_records(m, up) - truth).abs()
    if source == "seeded":
        assert err.max().item() < 1e-4  # every upload's CLIP(x) recovered (float32 round-off / √ᾱ)
    else:
        # the regenerated noise is unrelated to the noise used: the residual is the upload noise itself,
        # std σ = √((1−ᾱ)/ᾱ) ≈ 11.1 on the scale of CLIP(x) — nothing is recovered
        sigma = math.sqrt((1 - m.ctx.schedule.alphas_cumprod().double()[m.t0 - 1].item())
                          / m.ctx.schedule.alphas_cumprod().double()[m.t0 - 1].item())
        assert err.median().item() > 0.5 * sigma  # the median of |N(0, 2σ²)| is 0.95σ
    p = m.privacy("shared")
    assert p["noise_source"] == source and source in p["basis"]
    if source == "seeded":
        assert p["noise_label"] == SEEDED_NOISE_LABEL and SEEDED_NOISE_LABEL in p["basis"]
    else:
        assert "noise_label" not in p and "OS entropy" in p["basis"]


def test_secure_uploads_differ_between_runs_of_the_same_seed(tmp_path):
    a, b = (_uploads(tmp_path, n, dp__noise_source="secure").uploads() for n in ("a", "b"))
    s1, s2 = (_uploads(tmp_path, n).uploads() for n in ("s1", "s2"))
    assert torch.equal(s1.x, s2.x)  # seeded: same seed, same uploads (the benchmark's reproducibility)
    assert (a.x != b.x).all()  # secure: fresh noise in every coordinate
    assert torch.equal(a.index, b.index) and torch.equal(a.y, b.y)
    # ... with the upload mechanism's distribution: x̃ − √ᾱ·CLIP(x) ~ N(0, (1 − ᾱ) I)
    m = api.make_method(train_cfg("pfdm", "test"), tmp_path / "a", "cpu")
    alpha = float(m.ctx.schedule.alphas_cumprod().double()[m.t0 - 1])
    xc, _ = clip_l2(m.ctx.records(a.index)[0].double(), m.cfg.pfdm.clip)
    z = (a.x.double() - math.sqrt(alpha) * xc) / math.sqrt(1 - alpha)
    # 4096 draws: thresholds at about 6 standard errors (the noise is truly random: no seed makes this pass)
    assert abs(z.mean().item()) < 0.1 and z.std().item() == pytest.approx(1.0, abs=0.07)


def test_noise_source_is_in_the_hash_of_every_method_that_adds_privacy_noise():
    for method in ("pfdm", "dpdm", "dpsad"):
        a, b = (train_cfg(method, "test", dp__noise_source=v) for v in ("seeded", "secure"))
        assert a.training_hash() != b.training_hash(), method
    a, b = (train_cfg("centralized", "test", dp__noise_source=v) for v in ("seeded", "secure"))
    assert a.training_hash() == b.training_hash()  # no privacy noise: no new run
    assert train_cfg("pfdm", "test").dp.noise_source == "seeded"  # the benchmark default


# ------------------------------------------------------------------ DP-SGD

def _gradient(source: str, generator):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    ps = PerSampleGrads(model, "hooks")
    x = torch.randn(5, 6)

    def loss(mod, xb):
        return (mod(xb) ** 2).squeeze(1) * 10.0

    plan = DPPlan(20, 0.25, 1, 10.0, 1e-5, 2.0, False, "rdp", 0.5, 1, source)
    grads, _ = dp_sgd_gradient(ps, loss, (x,), plan, generator)
    clean, _ = dp_sgd_gradient(ps, loss, (x,), DPPlan(20, 0.25, 1, 10.0, 1e-5, 0.0, False, "rdp", 0.5, 1), None)
    return plan, grads, clean


def test_seeded_dp_sgd_noise_is_the_step_generator_and_recoverable():
    """On the seeded path the noise is N(0, σ²C²) drawn from the step's generator, parameter by
    parameter — so anyone with the seed regenerates it and recovers the clipped sum exactly."""
    plan, grads, clean = _gradient("seeded", step_generator(0, 3, "cpu"))
    attacker = step_generator(0, 3, "cpu")
    for g, c in zip(grads, clean):
        z = torch.randn(g.shape, generator=attacker)
        assert torch.allclose(g, c + plan.noise_std * z / plan.expected_batch, atol=1e-6)  # the formula, bit for bit
        assert torch.allclose(g * plan.expected_batch - plan.noise_std * z, c * plan.expected_batch, atol=1e-5)


def test_secure_dp_sgd_noise_is_fresh_and_not_recoverable():
    plan, g1, clean = _gradient("secure", step_generator(0, 3, "cpu"))
    _, g2, _ = _gradient("secure", step_generator(0, 3, "cpu"))  # same seed, same step
    attacker = step_generator(0, 3, "cpu")
    residual = []
    for a, b, c in zip(g1, g2, clean):
        assert (a != b).all()
        z = torch.randn(a.shape, generator=attacker)
        residual.append((a * plan.expected_batch - plan.noise_std * z - c * plan.expected_batch).flatten())
    # the regenerated noise explains nothing: the residual is N(0, 2σ²C²) in each of the 33 coordinates
    assert torch.cat(residual).abs().max().item() > 0.1 * plan.noise_std
    # the secure draw is N(0, 1): mean, variance and a tail probability on 400k draws (thresholds ≥ 6 standard
    # errors: the draws are truly random)
    z = secure_normal((400_000,), dtype=torch.float64)
    assert abs(z.mean().item()) < 0.01 and z.var().item() == pytest.approx(1.0, abs=0.015)
    assert (z.abs() > 1.96).double().mean().item() == pytest.approx(0.05, abs=0.0025)
    assert noise_generator("secure", step_generator(0, 3, "cpu")) is SECURE


def test_poisson_sample_seeded_path_and_secure_rate():
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert torch.equal(poisson_sample(1000, 0.3, g1), (torch.rand(1000, generator=g2) < 0.3).nonzero().squeeze(1))
    draws = [poisson_sample(1000, 0.3, SECURE) for _ in range(20)]
    assert np.mean([len(d) for d in draws]) == pytest.approx(300, abs=25)  # standard error 3.2
    assert not all(torch.equal(draws[0], d) for d in draws[1:])


def test_secure_training_end_to_end_differs_between_runs_and_resumes(tmp_path, monkeypatch):
    """dpdm with dp.noise_source=secure: two runs of the same config and seed end with different weights (and the
    Poisson sample is not the seeded one); the basis says secure. A run killed after its step-10 checkpoint resumes
    from it with fresh noise for the steps left: nothing is replayed from stored or regenerated noise."""
    from privbench.models.checkpoint import load_weights
    from privbench.models.methods import dpdm

    cfg = train_cfg("dpdm", "test", dp__accountant="rdp", dp__noise_multiplicity=1, dp__noise_source="secure")
    a = api.train(cfg, tmp_path / "a", "cpu")
    p = a.privacy("model")
    assert p["noise_source"] == "secure" and "noise_label" not in p and "secure (OS entropy" in p["basis"]
    real = dpdm.dp_sgd_gradient
    sizes = []

    def flaky(ps, loss_fn, records, plan, generator, physical_batch=0):
        sizes.append(records[0].shape[0])
        if len(sizes) == 15:
            raise KeyboardInterrupt  # killed after the step-10 checkpoint
        return real(ps, loss_fn, records, plan, generator, physical_batch)

    monkeypatch.setattr(dpdm, "dp_sgd_gradient", flaky)
    with pytest.raises(KeyboardInterrupt):
        api.train(cfg, tmp_path / "b", "cpu")
    monkeypatch.setattr(dpdm, "dp_sgd_gradient", real)
    b = api.train(cfg, tmp_path / "b", "cpu")
    assert "resumed from checkpoint at step 10/20" in (b.ctx.run_dir / "log.txt").read_text()
    wa, wb = (load_weights(m.ctx.ckpt_dir / "model.safetensors") for m in (a, b))
    assert not all(torch.equal(wa[k], wb[k]) for k in wa)
    # the seeded run's Poisson batch sizes are fixed by the seed; the secure ones are not
    seeded = [len(poisson_sample(64, 0.25, step_generator(cfg.seed, s, "cpu"))) for s in range(14)]
    assert sizes[:14] != seeded
    # nothing of the noise is stored: the checkpoint holds the modules, the optimizers and the step
    state = (b.ctx.ckpt_dir / "model.state.json").read_text()
    assert '"noise_source": "secure"' in state and "generator" not in state
