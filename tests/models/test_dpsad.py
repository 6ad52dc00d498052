"""dpsad: teacher/student targets, both modes end to end, the paper's output-gradient sanitization, and what its ε
means: conditional with a teacher trained on the members, end to end with a public teacher."""
from __future__ import annotations

import json

import pytest
import torch
from helpers import interrupt_at_call, train_cfg


@pytest.fixture(scope="session")
def dpsad_sound(runs_dir):
    from privbench.runs import train as api

    return api.train(train_cfg("dpsad", "test"), runs_dir, "cpu")  # default: sound mode, PRV


@pytest.fixture(scope="session")
def dpsad_public(runs_dir):
    from privbench.runs import train as api

    return api.train(train_cfg("dpsad", "test", dpsad__teacher_data="public"), runs_dir, "cpu")


@pytest.fixture(scope="session")
def dpsad_paper(runs_dir):
    from privbench.runs import train as api

    return api.train(train_cfg("dpsad", "test", dpsad__mode="paper"), runs_dir, "cpu")


def test_sound_mode_targets_and_privacy(dpsad_sound):
    from privbench.core.mechanisms import SEEDED_NOISE_LABEL
    from privbench.models.debug import DEBUG_HEADER
    from privbench.privacy.dpsgd import dpsgd_basis

    m = dpsad_sound
    assert m.cfg.dpsad.mode == "sound" and m.cfg.dpsad.teacher_data == "members"
    assert m.target_names() == ["student", "teacher"]
    p = m.privacy("student")
    # teacher and discriminator trained on the members without DP: no formal ε, the DP-SGD number is conditional
    assert p["epsilon"] is None
    assert 0 < p["conditional_epsilon"] <= m.cfg.dp.epsilon
    assert p["conditional_on"] == ["teacher", "discriminator"]
    assert p["conditional_basis"].startswith(dpsgd_basis(p["accountant"], p["delta"]))
    assert "CONDITIONAL" in p["conditional_basis"] and "not a guarantee" in p["conditional_basis"]
    assert p["basis"].startswith("none: no formal guarantee") and "dpsad.teacher_data=public" in p["basis"]
    assert p["end_to_end"] is False and p["teacher_data"] == "members"
    assert p["noise_source"] == "seeded" and p["noise_label"] == SEEDED_NOISE_LABEL
    assert SEEDED_NOISE_LABEL in p["basis"] and SEEDED_NOISE_LABEL in p["conditional_basis"]
    assert "no formal epsilon" in m.load_target().note
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
    assert "[teacher]" in log and "sound mode" in log and "[student] step 20/20" in log
    # un-noised statistics (loss, clipped fraction, batch size, the discriminator's loss): debug output only
    student_lines = [line for line in log.splitlines() if "[student] step" in line]
    assert len(student_lines) == 4 and not any(w in line for line in student_lines
                                               for w in ("d_loss", "clipped", "loss", "batch"))
    debug = (m.ctx.run_dir / "debug" / "student.log").read_text().splitlines()
    assert debug[0] == DEBUG_HEADER and "NOT COVERED BY ANY PRIVACY GUARANTEE" in debug[0]
    assert any("d_loss" in line and "clipped" in line and "batch" in line for line in debug[1:])
    ck = m.ctx.ckpt_dir
    assert (ck / "teacher.safetensors").exists() and (ck / "student.safetensors").exists()


def test_paper_mode_privacy_is_labelled_as_claimed(dpsad_paper):
    m = dpsad_paper
    p = m.privacy("student")
    # a claim, never a formal ε: privacy.epsilon is null, the number is claimed_epsilon
    assert p["epsilon"] is None and 0 < p["claimed_epsilon"] <= m.cfg.dp.epsilon
    assert p["claim_kind"] == "claimed_by_paper"
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
    from privbench.models.dp_sgd import DPPlan
    from privbench.models.grad_sample import frozen
    from privbench.models.methods.dpsad import Discriminator, denoised, paper_gradient, student_losses
    from privbench.runs import train as api

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

    res = run_attack(dpsad_sound.cfg, "loss", target, runs_dir=runs_dir, device="cpu").to_json()
    assert res["target"] == target
    if target == "teacher":
        assert res["privacy"] is None
    else:
        assert res["privacy"]["epsilon"] is None and res["privacy"]["conditional_epsilon"] <= 10


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
    eps = p["conditional_epsilon"] if mode == "sound" else p["claimed_epsilon"]  # members: conditional; paper: claimed
    assert p["sample_rate"] == 0.02 and eps <= 1.0
    log = (m.ctx.run_dir / "log.txt").read_text()
    assert "[student] step 20/20" in log
    student = m.load_target()
    assert all(torch.isfinite(v).all() for v in student.model.state_dict().values())


@pytest.mark.parametrize("mode", ["sound", "paper"])
def test_student_resume_equals_uninterrupted(tmp_path, monkeypatch, mode):
    """DistillStep in the one training loop: a student run killed after its step-10 checkpoint and restarted ends
    with exactly the weights (student, EMA, discriminator) of an uninterrupted one."""
    from safetensors.torch import load_file

    from privbench.models.methods import dpsad as mod
    from privbench.runs import train as api

    cfg = train_cfg("dpsad", "test", dpsad__mode=mode, dpsad__teacher_steps=2)
    a = api.train(cfg, tmp_path / "a", "cpu")
    fn = "dp_sgd_gradient" if mode == "sound" else "paper_gradient"
    real = interrupt_at_call(monkeypatch, mod, fn)  # killed after the step-10 checkpoint
    with pytest.raises(KeyboardInterrupt):
        api.train(cfg, tmp_path / "b", "cpu")
    monkeypatch.setattr(mod, fn, real)
    run_b = next((tmp_path / "b").iterdir())
    assert json.loads((run_b / "checkpoints" / "student.state.json").read_text())["step"] == 10
    b = api.train(cfg, tmp_path / "b", "cpu")
    assert "[student] resumed from checkpoint at step 10/20" in (b.ctx.run_dir / "log.txt").read_text()
    wa, wb = (load_file(str(m.ctx.ckpt_dir / "student.safetensors")) for m in (a, b))
    assert wa.keys() == wb.keys() and any(k.startswith("disc.") for k in wa)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


# ------------------------------------------------------------------ what the student's ε covers

def _teacher_and_clipped_sum(m, x, y, drop: int | None, batch: list[int]):
    """Train m's teacher on its own teacher records (without dataset record ``drop``), then the student's clipped
    gradient sum (C = 1, no noise) of member rows ``batch`` with that teacher — what DP-SGD adds its noise to."""
    from privbench.models.dp_sgd import DPPlan, dp_sgd_gradient
    from privbench.models.grad_sample import PerSampleGrads, frozen
    from privbench.models.methods.dpsad import denoised, student_losses
    from privbench.models.training import TrainData, train_denoiser

    tx, ty, tidx = m.teacher_records()
    keep = torch.tensor([j != drop for j in tidx])
    ac = m.ctx.schedule.alphas_cumprod()
    teacher = train_denoiser(m.ctx.new_denoiser(), TrainData(tx[keep], ty[keep]), ac, m.cfg.train,
                             m.ctx.run_dir / f"teacher-without-{drop}", name="teacher", seed=m.cfg.seed,
                             device="cpu", steps=m.cfg.dpsad.teacher_steps).eval()
    student, disc = m.ctx.new_denoiser(), m._discriminator()
    g = torch.Generator().manual_seed(1)
    b = torch.tensor(batch)
    r = torch.randint(0, ac.shape[0], (len(b),), generator=g)
    noise = torch.randn((len(b), *x.shape[1:]), generator=g)
    a = ac[r].view(-1, 1, 1, 1)
    x0, yb = x[b], y[b]
    x_r = a.sqrt() * x0 + (1 - a).sqrt() * noise
    with torch.no_grad():
        x_teacher = denoised(x_r, teacher(x_r, r, yb), a)

    def loss(model, x0, yb, r, noise, x_teacher):
        aa = ac[r].view(-1, 1, 1, 1)
        xr = aa.sqrt() * x0 + (1 - aa).sqrt() * noise
        return student_losses(denoised(xr, model(xr, r, yb), aa), x0, x_teacher, yb, disc, 1.0)

    plan = DPPlan(len(x), 0.25, 1, 10.0, 1e-5, 0.0, False, "rdp", 1.0, 1)
    with frozen(disc):
        grads, _ = dp_sgd_gradient(PerSampleGrads(student, "hooks"), loss, (x0, yb, r, noise, x_teacher), plan, None)
    return torch.cat([gr.flatten() for gr in grads]) * plan.expected_batch


@pytest.mark.parametrize("teacher_data", ["members", "public"])
def test_removing_a_record_from_the_teacher_changes_batches_without_it(request, teacher_data):
    """The leak (docs/methods.md §6): with the teacher trained on the members, removing member k
    changes the clipped gradient sum of a batch that does NOT contain k — DP-SGD's sensitivity (C, and only for
    batches holding k) does not hold, so the student's ε may not be reported as a formal ε. With a public teacher
    nothing changes, and the ε is formal and end to end."""
    m = request.getfixturevalue("dpsad_sound" if teacher_data == "members" else "dpsad_public")
    x, y = m.training_data()
    members = list(m.ctx.split.members)
    k = members[0]
    batch = list(range(1, 17))  # member rows 1..16: record k (row 0) is not in this batch
    full = _teacher_and_clipped_sum(m, x, y, None, batch)
    without_k = _teacher_and_clipped_sum(m, x, y, k, batch)
    change = (full - without_k).norm().item()
    p = m.privacy("student")
    if teacher_data == "members":
        assert change > 1e-3  # > 0 is already outside the analysis
        assert p["epsilon"] is None and p["conditional_epsilon"] > 0 and p["end_to_end"] is False
    else:
        assert not set(m.teacher_records()[2]) & set(members + list(m.ctx.split.nonmembers))
        assert change == 0.0  # record k never reaches the teacher
        assert 0 < p["epsilon"] <= m.cfg.dp.epsilon and p["end_to_end"] is True
        assert "conditional_epsilon" not in p


def test_public_teacher_and_discriminator_never_see_a_member(tmp_path, monkeypatch):
    """teacher_data=public: the teacher and the discriminator are functions of the public split and of the
    student's parameters only. With the student's update zeroed (so its parameters do not move), changing every
    member's pixels leaves the teacher and the discriminator bit-identical; with teacher_data=members both change
    (the discriminator step of the paper uses the student's and the teacher's outputs on the member batch)."""
    from privbench.models.methods import dpsad as mod
    from privbench.runs import train as api

    def zero_update(ps, _loss_fn, records, _plan, _generator, _physical_batch=0):
        return [torch.zeros_like(p) for p in ps.params], {"batch": records[0].shape[0]}

    monkeypatch.setattr(mod, "dp_sgd_gradient", zero_update)
    discs = {}
    real_disc = mod.DPSAD._discriminator

    def keep_disc(self):
        d = real_disc(self)
        discs[self.ctx.run_dir.name] = d
        return d

    monkeypatch.setattr(mod.DPSAD, "_discriminator", keep_disc)
    out = {}
    for teacher_data in ("members", "public"):
        cfg = train_cfg("dpsad", "test", dpsad__teacher_data=teacher_data, dpsad__teacher_steps=4,
                        train__steps=4, train__checkpoint_every=4)
        states = []
        for variant in ("data", "changed"):
            # a run store each: the public teacher is a cached pre-training, which must not be shared here
            m = api.make_method(cfg, tmp_path / f"{teacher_data}-{variant}" / "run", "cpu")
            m.ctx.run_dir.mkdir(parents=True)
            x, y = m.ctx.dataset
            if variant == "changed":
                x = x.clone()
                x[torch.tensor(m.ctx.split.members)] *= -1  # every member's pixels change, nothing else
                m.ctx.__dict__["dataset"] = (x, y)
            m.train()
            teacher = m.load_target("teacher").model
            states.append((teacher.state_dict(), discs[m.ctx.run_dir.name].state_dict()))
        same = [all(torch.equal(a[k], b[k]) for k in a) for a, b in zip(*states)]
        out[teacher_data] = same
    assert out["public"] == [True, True]     # teacher, discriminator: independent of the members
    assert out["members"] == [False, False]  # both depend on them: the student's ε is only conditional


def test_public_split_is_disjoint_seeded_and_validated(dpsad_public, tmp_path):
    from privbench.core.errors import BadInput
    from privbench.runs import train as api

    m = dpsad_public
    pub = m.public_indices()
    split = m.ctx.split
    assert len(pub) == m.cfg.data.n_members == len(set(pub))
    assert not set(pub) & (set(split.members) | set(split.nonmembers))
    assert json.loads((m.ctx.run_dir / "public.json").read_text())["indices"] == pub
    assert m.public_indices() == pub  # seeded
    assert "public records" in m.load_target("teacher").note and "end to end" in m.load_target().note
    p = m.privacy("student")
    assert p["basis"].startswith("DP-SGD") and "end to end for the members" in p["basis"]
    assert "discriminator's updates use only those public records" in p["basis"] and p["n_public"] == len(pub)
    assert ("[teacher] the public pre-training: 10 non-private steps on 64 public records (no member), pretrain-"
            in (m.ctx.run_dir / "log.txt").read_text())
    # the setting enters the run's hash
    a, b = (train_cfg("dpsad", "test", dpsad__teacher_data=v) for v in ("members", "public"))
    assert a.training_hash() != b.training_hash()
    # too many public records for the dataset (1797 digits): one clear line, before training
    bad = api.make_method(train_cfg("dpsad", "test", dpsad__teacher_data="public", dpsad__n_public=1700),
                          tmp_path / "bad", "cpu")
    with pytest.raises(BadInput, match="dpsad.n_public.*1700 public records do not fit") as e:
        bad.validate()
    assert "\n" not in str(e.value) and not (tmp_path / "bad").exists()  # nothing written


def test_public_teacher_is_the_cached_public_pretraining_shared_across_epsilons(tmp_path):
    """teacher_data=public: the teacher is the partition's public pre-training at dpsad.teacher_steps — trained once
    per public split (every ε cell of a seed loads it), and the very network train.init=public starts from when
    train.public_steps equals the teacher's steps (dpdm's pre-training here)."""
    from privbench.models import public_init
    from privbench.runs import train as api

    common = dict(dpsad__teacher_data="public", data__public="pool", data__n_public=64, dpsad__teacher_steps=6,
                  train__steps=2, train__checkpoint_every=2)
    runs = [api.train(train_cfg("dpsad", "test", dp__epsilon=e, **common), tmp_path, "cpu") for e in (1.0, 10.0)]
    assert runs[0].ctx.run_dir != runs[1].ctx.run_dir
    pre = sorted(p.name for p in tmp_path.glob("pretrain-*"))
    assert len(pre) == 1 and not list(runs[0].ctx.ckpt_dir.glob("teacher.*"))  # one teacher, in the cache
    logs = [(r.ctx.run_dir / "log.txt").read_text() for r in runs]
    assert all(f"[teacher] the public pre-training: 6 non-private steps on 64 public records (no member), {pre[0]}"
               in log for log in logs)
    t0, t1 = (r.load_target("teacher").model.state_dict() for r in runs)
    assert all(torch.equal(t0[k], t1[k]) for k in t0)
    dpdm = api.make_method(train_cfg("dpdm", "test", data__public="pool", data__n_public=64, train__init="public",
                                     train__public_steps=6), tmp_path / "dpdm", "cpu")
    assert public_init.pretrain_dir(dpdm.ctx).name == pre[0]
    pretrained = public_init.pretrained_denoiser(dpdm.ctx).state_dict()
    assert all(torch.equal(t0[k], pretrained[k]) for k in t0)
