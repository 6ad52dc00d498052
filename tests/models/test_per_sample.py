"""Per-record gradients (models/grad_sample/) against per-example autograd, clipping and DP noise."""
from __future__ import annotations

import math

import pytest
import torch
from helpers import per_example_grads, train_cfg
from torch import nn

from privbench.core.mechanisms import add_noise, clip_factors, clipped_sum, flat_norms, privatize
from privbench.models.grad_sample import PerSampleGrads

# torch.func has no batching rule for CPU flash attention yet (a performance warning, results are exact)
pytestmark = pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")


def denoiser(tmp_path, preset, **sets):
    """The exact network DPDM / the DP-SAD student train for this config (ctx.new_denoiser)."""
    from privbench.runs import train as api

    cfg = train_cfg("dpdm", preset, **sets)
    method = api.make_method(cfg, tmp_path / "run", "cpu")
    return method.ctx.new_denoiser(), method.ctx.schedule.alphas_cumprod()


def batch(n, k, seed=0, T=1000):
    g = torch.Generator().manual_seed(seed)
    x0 = torch.rand((n, 1, 8, 8), generator=g) * 2 - 1
    y = torch.randint(0, 10, (n,), generator=g)
    t = torch.randint(0, T, (n, k), generator=g)
    noise = torch.randn((n, k, 1, 8, 8), generator=g)
    return x0, y, t, noise




def assert_same(got, ref, names):
    # scale-aware tolerance: some parameters (attention key biases) have an exactly-zero true gradient that
    # autograd returns as ~1e-10 round-off, so compare against each record's whole-gradient norm
    ref_norm = flat_norms(ref)
    assert torch.all(ref_norm > 0)
    for name, a, b in zip(names, got, ref):
        err = (a - b).flatten(1).norm(dim=1)
        assert torch.all(err <= 2e-5 * ref_norm + 1e-7), (name, (err / ref_norm).max().item())
    assert torch.allclose(flat_norms(got), ref_norm, rtol=1e-5)


ARCHS = [
    pytest.param("test", {}, id="test-preset"),
    pytest.param("tiny", {}, id="tiny"),
    pytest.param("tiny", {"model__attention_levels": "[1]"}, id="tiny-attention"),
]


@pytest.mark.parametrize("backend", ["hooks", "hooks-patches", "vmap"])
@pytest.mark.parametrize("preset,sets", ARCHS)
def test_dpdm_per_sample_grads_equal_per_example_autograd(tmp_path, preset, sets, backend, monkeypatch):
    from privbench.models.dp_sgd import multi_draw_loss
    from privbench.models.grad_sample import layers

    if backend == "hooks-patches":  # the conv route used off CPU (patches × output gradients), tested here
        monkeypatch.setattr(layers, "conv_route", lambda *a: "patches")
        backend = "hooks"
    torch.manual_seed(0)
    model, ac = denoiser(tmp_path, preset, **sets)
    if sets:  # the variant really has diffusers attention blocks
        assert any("attentions" in n for n, _ in model.named_parameters())
    loss_fn = multi_draw_loss(ac)
    records = batch(3, 2)  # K = 2 draws per record: rows of a record are averaged before the gradient
    ps = PerSampleGrads(model, backend)
    got, losses = ps.grads(loss_fn, *records)
    ref = per_example_grads(model, loss_fn, records)
    assert all(g.shape == (3, *p.shape) for g, p in zip(got, ps.params))
    assert torch.allclose(losses, loss_fn(model, *records).detach(), rtol=1e-5)
    assert_same(got, ref, ps.names)
    # no parameter was left with requires_grad off or a stale .grad
    assert all(p.requires_grad for p in model.parameters())


def test_hooks_conv_after_attention_not_zero(tmp_path):
    """opacus' conv grad sampler silently returns zeros for convs fed by a diffusers attention block's
    transposed (non-contiguous) output; every conv of the up path here must get a non-zero gradient."""
    from privbench.models.dp_sgd import multi_draw_loss

    model, ac = denoiser(tmp_path, "tiny", model__attention_levels="[1]")
    ps = PerSampleGrads(model, "hooks")
    got, _ = ps.grads(multi_draw_loss(ac), *batch(2, 1, seed=3))
    for name, g in zip(ps.names, got):
        if "up_blocks" in name and "conv" in name and name.endswith("weight"):
            assert torch.all(g.flatten(1).norm(dim=1) > 0), name


@pytest.mark.parametrize("backend", ["hooks", "vmap"])
def test_dpsad_student_loss_per_sample_grads(tmp_path, backend):
    """The sound-mode loss (teacher target + data + discriminator term) is per record: per-sample gradients
    of the student match per-example autograd, and the (frozen) discriminator gets none."""
    from privbench.models.grad_sample import frozen
    from privbench.models.methods.dpsad import Discriminator, denoised, student_losses

    model, ac = denoiser(tmp_path, "test")
    disc = Discriminator(1, 10, 8)
    x0, y, t, noise = batch(3, 1, seed=1)
    r, noise = t[:, 0], noise[:, 0]
    x_teacher = torch.randn_like(x0)

    def loss(m, x0, y, r, noise, xt):
        a = ac[r].view(-1, 1, 1, 1)
        x_r = a.sqrt() * x0 + (1 - a).sqrt() * noise
        return student_losses(denoised(x_r, m(x_r, r, y), a), x0, xt, y, disc, 1.0)

    records = (x0, y, r, noise, x_teacher)
    with frozen(disc):
        got, _ = PerSampleGrads(model, backend).grads(loss, *records)
        ref = per_example_grads(model, loss, records)
    assert_same(got, ref, [n for n, _ in model.named_parameters()])
    assert all(p.grad is None for p in disc.parameters())


def test_hooks_reject_unsupported_layers():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x * self.scale

    with pytest.raises(ValueError, match="vmap"):
        PerSampleGrads(Odd(), "hooks")
    PerSampleGrads(Odd(), "vmap")  # the general backend takes it


def test_clipped_record_norms_at_most_C_with_K_draws(tmp_path):
    from privbench.models.dp_sgd import multi_draw_loss

    model, ac = denoiser(tmp_path, "test")
    ps = PerSampleGrads(model, "hooks")
    got, _ = ps.grads(multi_draw_loss(ac), *batch(6, 4, seed=2))  # K = 4
    norms = flat_norms(got)
    for C in (1e-3, float(norms.median()), 1e3):
        f = clip_factors(norms, C)
        clipped = [g * f.view(-1, *[1] * (g.dim() - 1)) for g in got]
        assert torch.all(flat_norms(clipped) <= C * (1 + 1e-5))
        unclipped = norms <= C
        assert torch.allclose(f[unclipped], torch.ones_like(f[unclipped]), atol=1e-5)  # small ones untouched
        summed, _ = clipped_sum(got, C)
        for s_, c in zip(summed, clipped):
            assert torch.allclose(s_, c.sum(0), atol=1e-6, rtol=1e-4)


def test_noise_std_is_sigma_C_over_expected_batch():
    """privatize: with zero per-record gradients the result is pure noise of std σ·C / E[B], seeded."""
    sigma, C, eb, n = 1.7, 0.5, 12.5, 3
    per_sample = [torch.zeros(n, 400, 250), torch.zeros(n, 1000)]
    g1, norms = privatize(per_sample, C, sigma, eb, torch.Generator().manual_seed(5))
    g2, _ = privatize(per_sample, C, sigma, eb, torch.Generator().manual_seed(5))
    flat = torch.cat([g.flatten() for g in g1])
    assert flat.numel() == 101_000
    assert abs(flat.std().item() / (sigma * C / eb) - 1) < 0.01
    assert abs(flat.mean().item()) < 5 * sigma * C / eb / math.sqrt(flat.numel())
    assert all(torch.equal(a, b) for a, b in zip(g1, g2))  # deterministic from the generator
    assert torch.all(norms == 0)
    # σ = 0: exactly the mean of the clipped gradients
    ones = [torch.ones(n, 4)]
    g, _ = privatize(ones, 1.0, 0.0, 2.0, None)
    assert torch.allclose(g[0], torch.full((4,), n * 0.5 / 2.0), atol=1e-5)  # each record clipped to norm 1
    assert add_noise([torch.zeros(3)], 0.0, None)[0].eq(0).all()


def test_dp_sgd_gradient_chunks_and_empty_batch(tmp_path):
    """Physical chunks give the same clipped sum; an empty Poisson sample gives pure noise σC/E[B]."""
    from privbench.models.dp_sgd import DPPlan, dp_sgd_gradient, multi_draw_loss

    model, ac = denoiser(tmp_path, "test")
    loss_fn = multi_draw_loss(ac)
    ps = PerSampleGrads(model, "hooks")
    records = batch(5, 2, seed=4)
    plan = DPPlan(50, 0.1, 1, 10.0, 1e-5, 0.0, False, "rdp", 0.01, 2)  # σ = 0, E[B] = 5
    whole, s1 = dp_sgd_gradient(ps, loss_fn, records, plan, None)
    parts, s2 = dp_sgd_gradient(ps, loss_fn, records, plan, None, physical_batch=2)
    assert all(torch.allclose(a, b, atol=1e-7, rtol=1e-5) for a, b in zip(whole, parts))
    assert s1["batch"] == s2["batch"] == 5 and float(s1["loss"]) == pytest.approx(float(s2["loss"]), rel=1e-5)
    assert flat_norms([g.unsqueeze(0) for g in whole]).item() <= 0.01 + 1e-6  # ≤ n·C / E[B] = C
    noisy = DPPlan(50, 0.1, 1, 10.0, 1e-5, 2.0, False, "rdp", 0.5, 2)
    empty = tuple(r[:0] for r in records)
    g, stats = dp_sgd_gradient(ps, loss_fn, empty, noisy, torch.Generator().manual_seed(1))
    flat = torch.cat([x.flatten() for x in g])
    assert stats["batch"] == 0 and "loss" not in stats
    assert abs(flat.std().item() / (2.0 * 0.5 / 5) - 1) < 0.03


# ---------------------------------------------------------------------------------------------- ghost backend

def loop_clipped_sum(model, loss_fn, records, C):
    """Reference: Σᵢ clip_C(∇ℓᵢ) from one autograd backward per record, and the per-record norms."""
    ref = per_example_grads(model, loss_fn, records)
    norms = flat_norms(ref)
    f = clip_factors(norms, C)
    return [torch.tensordot(f, g, dims=([0], [0])) for g in ref], norms


def assert_sums_close(got, ref, names, C):
    # absolute tolerance on the scale of one clipped record (norm ≤ C): exactly-zero true gradients (attention
    # key biases) come back as round-off of either sign
    for name, a, b in zip(names, got, ref):
        assert torch.linalg.vector_norm(a - b) <= 2e-5 * C + 1e-6 * torch.linalg.vector_norm(b), name


@pytest.mark.parametrize("keep", ["keep", "recompute"])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("preset,sets", ARCHS)
def test_ghost_norms_and_clipped_sum_equal_per_example_autograd(tmp_path, preset, sets, k, keep):
    """The ghost backend's per-record norms and Σᵢ clip_C(∇ℓᵢ) — without per-record gradients of the whole
    model; ghost norms on the Linear/Embedding layers, book-keeping sums (recompute: every layer's sum formed
    as one weighted batched gradient) — equal those of one backward per record."""
    from privbench.models.dp_sgd import multi_draw_loss
    from privbench.models.grad_sample import ghost

    model, ac = denoiser(tmp_path, preset, **sets)
    loss_fn = multi_draw_loss(ac)
    records = batch(4, k, seed=5)
    ps = PerSampleGrads(model, "ghost")
    ref_norms = flat_norms(per_example_grads(model, loss_fn, records))
    C = float(ref_norms.median())  # half the records clipped, half not
    ref_sum, _ = loop_clipped_sum(model, loss_fn, records, C)
    summed, norms, losses = ghost.ghost_clipped_sum(ps, loss_fn, records, C,
                                                    keep_bytes=None if keep == "keep" else 0)
    assert torch.allclose(norms, ref_norms, rtol=2e-5)
    assert torch.allclose(losses, loss_fn(model, *records).detach(), rtol=1e-5)
    assert_sums_close(summed, ref_sum, ps.names, C)
    # the ghost route really was taken somewhere (else this test would only re-test instantiation)
    _, calls = ps.capture(loss_fn, records, 4)
    assert any(ghost.use_ghost(m, x, g, 4, keep=keep == "keep") for m, x, g in calls)
    assert all(p.requires_grad and p.grad is None for p in model.parameters())


def test_ghost_dpsad_student_loss(tmp_path):
    from privbench.models.grad_sample import frozen
    from privbench.models.methods.dpsad import Discriminator, denoised, student_losses

    model, ac = denoiser(tmp_path, "test")
    disc = Discriminator(1, 10, 8)
    x0, y, t, noise = batch(3, 1, seed=1)
    r, noise = t[:, 0], noise[:, 0]
    x_teacher = torch.randn_like(x0)

    def loss(m, x0, y, r, noise, xt):
        a = ac[r].view(-1, 1, 1, 1)
        x_r = a.sqrt() * x0 + (1 - a).sqrt() * noise
        return student_losses(denoised(x_r, m(x_r, r, y), a), x0, xt, y, disc, 1.0)

    records = (x0, y, r, noise, x_teacher)
    with frozen(disc):
        ps = PerSampleGrads(model, "ghost")
        ref, ref_norms = loop_clipped_sum(model, loss, records, 0.05)
        got, norms, _ = ps.clipped_sum(loss, *records, max_norm=0.05)
    assert torch.allclose(norms, ref_norms, rtol=2e-5)
    assert_sums_close(got, ref, ps.names, 0.05)


def test_ghost_shared_layer_called_twice():
    """A layer applied twice per forward: its per-record gradient is the sum over both calls, whose norm is
    not the sum of the calls' norms; the ghost backend must instantiate it and still be exact."""
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5, 6)
            self.lin = nn.Linear(6, 6)
            self.out = nn.Linear(6, 1)

        def forward(self, idx):
            h = self.lin(torch.tanh(self.lin(self.emb(idx))))
            return self.out(h).squeeze(-1)

    torch.manual_seed(0)
    model = Twice()
    idx = torch.randint(0, 5, (7,))
    target = torch.randn(7)

    def loss(m, i, tgt):
        return (m(i) - tgt) ** 2

    ref, ref_norms = loop_clipped_sum(model, loss, (idx, target), 0.5)
    got, norms, _ = PerSampleGrads(model, "ghost").clipped_sum(loss, idx, target, max_norm=0.5)
    assert torch.allclose(norms, ref_norms, rtol=1e-5)
    assert_sums_close(got, ref, [n for n, _ in model.named_parameters()], 0.5)


def test_ghost_bf16_autocast_clips_each_record_to_C(tmp_path):
    """Under bf16 autocast the per-record norm and the sum it enters are formed from the same fp32 values:
    one record's clipped contribution (a batch of one) has norm ≤ C."""
    from privbench.models.dp_sgd import multi_draw_loss

    model, ac = denoiser(tmp_path, "test")
    loss_fn = multi_draw_loss(ac)
    records = batch(4, 2, seed=7)
    ps = PerSampleGrads(model, "ghost")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, norms, _ = ps.clipped_sum(loss_fn, *records, max_norm=1.0)
        C = float(norms.min()) / 4  # every record clipped
        for i in range(4):
            one = tuple(r[i:i + 1] for r in records)
            summed, _, _ = ps.clipped_sum(loss_fn, *one, max_norm=C)
            total = flat_norms([s.unsqueeze(0) for s in summed])
            assert total.dtype == torch.float32 and total.item() <= C * (1 + 1e-5)
            assert total.item() >= C * (1 - 1e-3)  # clipped to C, not below it


def test_ghost_is_the_default_backend():
    from privbench.core.config import build_config

    assert build_config("dpdm", preset="test").dp.grad_sample == "ghost"
