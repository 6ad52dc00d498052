"""dpsad: teacher/student targets, both modes end to end, and the paper's output-gradient sanitization."""
from __future__ import annotations

import pytest
import torch

from helpers import train_cfg


@pytest.fixture(scope="session")
def dpsad_sound(runs_dir):
    from privbench.runs import train as api

    return api.train(train_cfg("dpsad", "test"), runs_dir, "cpu")  # default: sound mode, PRV


@pytest.fixture(scope="session")
def dpsad_paper(runs_dir):
    from privbench.runs import train as api

    return api.train(train_cfg("dpsad", "test", dpsad__mode="paper"), runs_dir, "cpu")


def test_sound_mode_targets_and_privacy(dpsad_sound):
    from privbench.privacy.dpsgd import dpsgd_basis

    m = dpsad_sound
    assert m.cfg.dpsad.mode == "sound" and m.target_names() == ["student", "teacher"]
    p = m.privacy("student")
    assert 0 < p["epsilon"] <= m.cfg.dp.epsilon
    assert p["basis"].startswith(dpsgd_basis(p["accountant"], p["delta"]))
    assert "student only" in p["basis"] and "teacher" in p["basis"] and "NOT bounded" in p["basis"]
    assert p["end_to_end"] is False and p["conditional_on"] == ["teacher", "discriminator"]
    assert m.privacy(None) == p  # student is the default target
    assert m.privacy("teacher") is None
    teacher = m.load_target("teacher")
    assert "never released" in teacher.note and "non-private" in teacher.note
    student = m.load_target()
    assert student.name == "student"
    # different networks: the teacher is the non-private DDPM, the student the distilled one
    x, t, y = torch.zeros(2, 1, 8, 8), torch.tensor([5, 500]), torch.tensor([1, 2])
    assert not torch.allclose(teacher.predict_noise(x, t, y), student.predict_noise(x, t, y))
    log = (m.ctx.run_dir / "log.txt").read_text()
    assert "[teacher]" in log and "sound mode" in log and "d_loss" in log
    ck = m.ctx.ckpt_dir
    assert (ck / "teacher.safetensors").exists() and (ck / "student.safetensors").exists()


def test_paper_mode_privacy_is_labelled_as_claimed(dpsad_paper):
    m = dpsad_paper
    p = m.privacy("student")
    assert 0 < p["epsilon"] <= m.cfg.dp.epsilon
    assert p["accountant"] == "rdp"  # the paper's own analysis
    assert p["basis"].startswith("as claimed by the paper (output-gradient sanitization; not a sound DP guarantee")
    assert "Jacobian" in p["basis"] and p["claimed_by_paper"] is True and p["end_to_end"] is False
    assert "as claimed by the paper" in m.load_target().note
    assert "paper mode" in (m.ctx.run_dir / "log.txt").read_text()


def test_output_gradient_clipping_bound_per_record():
    from privbench.core.mechanisms import sanitize_per_record as sanitize_output_grads

    g = torch.randn(6, 1, 8, 8) * torch.tensor([0.01, 0.5, 1.0, 3.0, 50.0, 1e4]).view(-1, 1, 1, 1)
    C = 1.0
    out, norms = sanitize_output_grads(g, C, 0.0, None)
    assert torch.allclose(norms, g.flatten(1).norm(dim=1))
    on = out.flatten(1).norm(dim=1)
    assert torch.all(on <= C * (1 + 1e-5))
    small = norms <= C
    assert torch.allclose(out[small], g[small])                # under the bound: untouched
    assert torch.allclose(on[~small], torch.full_like(on[~small], C), rtol=1e-5)  # over: scaled to C
    # noise: N(0, σ²C²) per output coordinate of every record (noise_std = σ·C = 3·2), from the generator
    z, _ = sanitize_output_grads(torch.zeros(400, 1, 16, 16), 2.0, 3.0 * 2.0, torch.Generator().manual_seed(0))
    assert abs(z.std().item() / 6.0 - 1) < 0.02
    z2, _ = sanitize_output_grads(torch.zeros(400, 1, 16, 16), 2.0, 6.0, torch.Generator().manual_seed(0))
    assert torch.equal(z, z2)


def test_paper_gradient_is_backprop_of_clipped_output_grads(tmp_path):
    """With σ = 0 the student's update is Σᵢ J_iᵀ clip_C(∂ℓᵢ/∂x̂ᵢ) / E[B] — checked record by record."""
    from privbench.runs import train as api
    from privbench.models.dp_sgd import DPPlan
    from privbench.models.methods.dpsad import Discriminator, denoised, paper_gradient, student_losses
    from privbench.models.per_sample import frozen

    m = api.make_method(train_cfg("dpsad", "test", dpsad__mode="paper"), tmp_path / "run", "cpu")
    student = m.ctx.new_denoiser()
    ac = m.ctx.schedule.alphas_cumprod()
    disc = Discriminator(1, 10, 8)
    params = list(student.parameters())
    g = torch.Generator().manual_seed(0)
    n = 4
    x0 = torch.rand((n, 1, 8, 8), generator=g) * 2 - 1
    y = torch.arange(n)
    r = torch.tensor([3, 200, 600, 990])
    a = ac[r].view(-1, 1, 1, 1)
    x_r = a.sqrt() * x0 + (1 - a).sqrt() * torch.randn(x0.shape, generator=g)
    x_t = torch.randn_like(x0)
    C, eb = 0.05, 8.0
    plan = DPPlan(32, eb / 32, 1, 10.0, 1e-5, 0.0, False, "rdp", C, 1)
    with frozen(disc):
        xs = denoised(x_r, student(x_r, r, y), a)
        got, stats = paper_gradient(params, xs, student_losses(xs, x0, x_t, y, disc, 1.0), plan, None)
        ref = [torch.zeros_like(p) for p in params]
        for i in range(n):
            xi = denoised(x_r[i:i + 1], student(x_r[i:i + 1], r[i:i + 1], y[i:i + 1]), a[i:i + 1])
            li = student_losses(xi, x0[i:i + 1], x_t[i:i + 1], y[i:i + 1], disc, 1.0).sum()
            gi = torch.autograd.grad(li, xi, retain_graph=True)[0]
            gi = gi * min(1.0, C / (gi.norm().item() + 1e-6))
            for acc, pg in zip(ref, torch.autograd.grad(xi, params, grad_outputs=gi / eb, allow_unused=True)):
                if pg is not None:
                    acc.add_(pg)
    assert stats["batch"] == n and 0 <= stats["clipped"] <= 1
    scale = max(r_.abs().max().item() for r_ in ref)
    for a_, b_ in zip(got, ref):
        assert torch.allclose(a_, b_, atol=1e-5 * scale, rtol=1e-4)


@pytest.mark.parametrize("target", ["student", "teacher"])
def test_attack_on_both_targets(dpsad_sound, runs_dir, target):
    from privbench.runs.attack import run_attack

    res = run_attack(dpsad_sound.cfg, "loss", target, runs_dir=runs_dir, device="cpu")
    assert res["target"] == target
    if target == "teacher":
        assert res["privacy"] is None
    else:
        assert res["privacy"]["epsilon"] <= 10


def test_paper_mode_update_reveals_private_inputs():
    """Why dpsad.mode=paper is not DP (docs/methods.md §6): the noise is added to the OUTPUT gradient and then
    multiplied by the student's Jacobian at the private inputs. For a linear student x̂ = W·x_r the update is
    Σᵢ (clip(gᵢ) + zᵢ)·x_rᵢᵀ: even with zero signal, its row space is spanned by the batch's private inputs,
    so one released update tells with certainty whether a given record was in the batch (ε = ∞ per step),
    whatever σ. DP-SGD's noise (sound mode) is isotropic in parameter space and carries no such trace."""
    from privbench.models.dp_sgd import DPPlan
    from privbench.models.methods.dpsad import paper_gradient

    torch.manual_seed(0)
    d, n = 32, 4
    student = torch.nn.Linear(d, d, bias=False)
    members = torch.randn(n, d)
    plan = DPPlan(40, 0.1, 1, 1.0, 1e-5, 50.0, False, "rdp", 1.0, 1)  # heavy noise: σ = 50

    def update(batch):
        xs = student(batch)
        losses = (0.0 * xs).sum(1)  # no signal at all: the update is pure (Jacobian-shaped) noise
        return paper_gradient([student.weight], xs, losses, plan, torch.Generator().manual_seed(1))[0][0]

    def score(G, x, others):
        # the part of x outside the span of the other records, seen through the update's row space
        q, _ = torch.linalg.qr(others.T)
        x_perp = x - q @ (q.T @ x)
        return ((G @ x_perp).norm() / x_perp.norm()).item()

    # neighbouring datasets: the adversary knows the other records and asks whether `target` was in the batch
    others, target = members[1:], members[0]
    with_target = score(update(members), target, others)
    without_target = score(update(others), target, others)
    assert with_target > 1.0
    assert without_target < 1e-5 * with_target  # ≈ 0 up to round-off: a perfect membership test


@pytest.mark.parametrize("mode", ["sound", "paper"])
def test_sparse_poisson_sampling_with_empty_batches(tmp_path, mode):
    """q = 0.02 on 64 members: most steps draw an empty batch (sound mode still applies pure noise)."""
    from privbench.runs import train as api

    cfg = train_cfg("dpsad", "test", dpsad__mode=mode, dp__sample_rate=0.02, dp__epsilon=1.0,
                    dp__accountant="rdp", dpsad__teacher_steps=2)
    m = api.train(cfg, tmp_path, "cpu")
    p = m.privacy("student")
    assert p["sample_rate"] == 0.02 and p["epsilon"] <= 1.0
    log = (m.ctx.run_dir / "log.txt").read_text()
    assert "[student] step 20/20" in log
    student = m.load_target()
    assert all(torch.isfinite(v).all() for v in student.model.state_dict().values())
