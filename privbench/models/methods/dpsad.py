"""``dpsad``: DP-SAD, stochastic adversarial distillation of a private diffusion student (docs/methods.md §6).

1. **Teacher** ε_ψ: an ordinary (non-private) class-conditional DDPM on the members (``train_denoiser``,
   ``dpsad.teacher_steps`` steps). Never released.
2. **Student** ε_θ (same architecture and initialization), ``train.steps`` steps on Poisson samples of the
   members (rate q as in dpdm). Per record one random timestep r ~ U{0..T−1} and x_r = √ᾱ_r·x₀ + √(1−ᾱ_r)·ε
   (forward process, no reverse rollout). The "outputs" are the denoised estimates
   x̂₀ = (x_r − √(1−ᾱ_r)·ε(x_r, r, y)) / √ᾱ_r of teacher (x̂_ψ) and student (x̂_θ). Per-record loss

       ℓ = MSE(x̂_ψ, x̂_θ) + MSE(x₀, x̂_θ) + λ·softplus(−D(clamp(x̂_θ), y))      (λ = ``dpsad.adv_weight``)

   where D is a small class-conditional discriminator (logit of "teacher output"). The adversarial term is
   the non-saturating form −log D of the paper's log(1 − D) (same fixed point, usable gradients early on);
   D sees x̂₀ clamped to [−1, 1], which is what the DDPM sampler uses (clip_sample). The student's update
   is privatized according to ``dpsad.mode``:

   - ``sound`` (default): DP-SGD on the student's full parameter gradient — per-record gradients of ℓ
     (per_sample), flat clipping to C, N(0, σ²C²) on the sum, / q·N, Adam; σ calibrated with
     ``dp.accountant``. The formal statement covers the student's own per-record gradient accesses with
     the teacher and the discriminator treated as fixed functions. They are not: both are trained
     without DP on the same members and enter every record's loss, so a record also reaches the student
     through them. That channel is outside the DP-SGD analysis (its sensitivity is not bounded by C), and
     the basis says so.
   - ``paper``: the paper's sanitization (docs/methods.md §6): the gradient of each record's loss with respect to the
     student's **output** x̂_θ is clipped to C and gets its own N(0, σ²C² I); the noisy output gradients
     (/ q·N) are back-propagated through the student. ε is the paper's claim: the RDP accountant of the
     Poisson-subsampled Gaussian. Not a DP guarantee: the Jacobian ∂x̂_θ/∂θ is evaluated at the private x_r
     (docs/methods.md §6), so the parameter update is not post-processing of the noised output gradients.
3. **Discriminator** step after each student step: cross-entropy of D on teacher (label 1) vs student
   (label 0) outputs of the same batch; Adam ``dpsad.disc_lr``; not noised, not released.

One timestep per record (K = 1) as in the paper: ``dp.noise_multiplicity`` applies to dpdm only.
Targets: ``student`` (default; EMA weights) and ``teacher`` (never released; attacking it shows what the
student protects).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ...core.config import register_section, setting
from ...core.errors import BadInput, WorkFailed
from ...core.mechanisms import add_noise, sanitize_per_record
from ...core.registry import METHODS
from ..dp_sgd import (DPPlan, check_dp_config, dp_sgd_gradient, dp_sgd_train, make_plan, privacy_dict,
                      read_privacy, resolve_sample_rate, write_privacy)
from ..method import Method
from ..per_sample import PerSampleGrads, frozen
from ..training import TrainData, is_trained, load_ema, train_denoiser


@dataclass
class DPSADConfig:
    mode: str = setting("sound", choices=["sound", "paper"],
                        help="sound = DP-SGD on the student's parameter gradient; paper = output-gradient sanitization")
    teacher_steps: int = setting(4000, lo=1, help="steps of the non-private teacher DDPM")
    adv_weight: float = setting(1.0, lo=0.0, help="lambda of the adversarial loss")
    disc_lr: float = setting(2e-4, lo=0.0, lo_open=True, help="discriminator Adam learning rate")
    disc_width: int = setting(32, lo=1, help="channels of the discriminator's first conv")


register_section("dpsad", DPSADConfig, presets={"test": {"teacher_steps": 10}, "small": {"teacher_steps": 10000},
                                                "paper": {"teacher_steps": 200_000}})

PAPER_BASIS = ("as claimed by the paper (output-gradient sanitization; not a sound DP guarantee: the student's "
               "Jacobian depends on private data — docs/methods.md §6): RDP accountant of a Poisson-subsampled "
               "Gaussian on per-record output gradients clipped to C, delta={delta:g}; the non-private teacher "
               "and discriminator are not covered either")


class Discriminator(nn.Module):
    """Small class-conditional conv discriminator: logit that an x̂₀ came from the teacher.

    No normalization across records (each record's logit depends on that record only), so it can sit
    inside per-record losses."""

    def __init__(self, channels: int, num_classes: int | None, width: int = 32):
        super().__init__()
        w = width
        self.net = nn.Sequential(
            nn.Conv2d(channels, w, 3, padding=1), nn.SiLU(),
            nn.Conv2d(w, 2 * w, 3, stride=2, padding=1), nn.SiLU(),
            nn.Conv2d(2 * w, 2 * w, 3, stride=2, padding=1), nn.SiLU(),
        )
        self.head = nn.Linear(2 * w, 1)
        self.embed = nn.Embedding(num_classes, 2 * w) if num_classes else None

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        h = self.net(x).mean((2, 3))
        out = self.head(h).squeeze(1)
        if self.embed is not None and y is not None:
            out = out + (self.embed(y) * h).sum(1)  # projection conditioning
        return out


def denoised(x_r: torch.Tensor, eps: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """x̂₀ = (x_r − √(1−ᾱ)·ε) / √ᾱ, with ᾱ shaped to broadcast."""
    return (x_r - (1 - a).sqrt() * eps) / a.sqrt()


def student_losses(xs: torch.Tensor, x0: torch.Tensor, x_teacher: torch.Tensor, y, disc: nn.Module,
                   adv_weight: float) -> torch.Tensor:
    """Per-record DP-SAD loss of student outputs ``xs`` (n,): MSE to the teacher + MSE to the data + λ·adv."""
    dis = ((xs - x_teacher) ** 2).flatten(1).mean(1) + ((xs - x0) ** 2).flatten(1).mean(1)
    if adv_weight > 0:
        dis = dis + adv_weight * F.softplus(-disc(xs.clamp(-1, 1), y))
    return dis


def paper_gradient(params: list[torch.Tensor], xs: torch.Tensor, losses: torch.Tensor, plan: DPPlan,
                   generator: torch.Generator | None) -> tuple[list[torch.Tensor], dict]:
    """The paper's sanitization: per record, g_i = ∂ℓ_i/∂x̂_θ,i clipped to C plus N(0, σ²C² I), then
    back-propagated through the student: Σᵢ J_iᵀ(clip(g_i) + z_i) / (q·N)."""
    g_out = torch.autograd.grad(losses.sum(), xs, retain_graph=True)[0]
    noisy, norms = sanitize_per_record(g_out, plan.max_grad_norm, plan.noise_std, generator)
    grads = torch.autograd.grad(xs, params, grad_outputs=noisy / plan.expected_batch, allow_unused=True)
    grads = [g if g is not None else torch.zeros_like(p) for g, p in zip(grads, params)]
    return grads, {"loss": float(losses.detach().mean()),
                   "clipped": float((norms > plan.max_grad_norm).float().mean()), "batch": xs.shape[0]}


@METHODS.register_class
class DPSAD(Method):
    name = "dpsad"
    description = "DP-SAD: non-private teacher, student distilled with DP noise (targets: student, teacher)"
    default_target = "student"
    private = True
    report_order = 30
    target_order = ("student", "teacher")
    config_keys = ("dp", "dpsad")

    def __init__(self, ctx):
        super().__init__(ctx)
        self._plan: DPPlan | None = None

    def target_names(self) -> list[str]:
        return ["student", "teacher"]

    # ------------------------------------------------------------------------------------ config
    @property
    def mode(self) -> str:
        return self.cfg.dpsad.mode

    def validate(self) -> None:
        check_dp_config(self.cfg)
        resolve_sample_rate(self.cfg, self.cfg.data.n_members)
        if self.mode not in ("sound", "paper"):
            raise BadInput(f"dpsad.mode={self.mode!r}: choose sound or paper")
        self.plan()

    def plan(self) -> DPPlan:
        if self._plan is None:
            # paper mode: σ and ε from the paper's own analysis (RDP); sound mode: privbench's accountant
            acc = "rdp" if self.mode == "paper" else None
            self._plan = make_plan(self.cfg, self.cfg.data.n_members, self.cfg.train.steps, accountant=acc,
                                   noise_multiplicity=1)
        return self._plan

    # ------------------------------------------------------------------------------------ training
    def _discriminator(self) -> Discriminator:
        c = self.ctx.image_shape[0]
        torch.manual_seed(self.cfg.seed + 7919)
        return Discriminator(c, self.ctx.num_classes, self.cfg.dpsad.disc_width)

    def train(self) -> None:
        ctx, cfg = self.ctx, self.cfg
        x, y = self.training_data()
        dev = ctx.device
        ac = ctx.schedule.alphas_cumprod(dev)
        cond = ctx.num_classes is not None
        if not is_trained(ctx.ckpt_dir, "teacher", cfg.dpsad.teacher_steps):
            ctx.log(f"[teacher] non-private DDPM on {len(x)} members, {cfg.dpsad.teacher_steps} steps")
        teacher = train_denoiser(ctx.new_denoiser(), TrainData(x.to(dev), y.to(dev) if cond else None), ac,
                                 cfg.train, ctx.ckpt_dir, name="teacher", seed=cfg.seed, device=dev,
                                 steps=cfg.dpsad.teacher_steps, desc="train dpsad teacher")
        teacher.eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
        ppath = ctx.ckpt_dir / "privacy-student.json"
        if is_trained(ctx.ckpt_dir, "student", cfg.train.steps) and ppath.exists():
            return
        plan = self.plan()
        if plan.n_records != len(x):
            raise WorkFailed(f"dpsad: the member split has {len(x)} records, the plan {plan.n_records}")
        x = x.to(dev)
        y = y.to(dev) if cond else None
        student = ctx.new_denoiser().to(dev)
        params = [p for p in student.parameters() if p.requires_grad]
        disc = self._discriminator().to(dev)
        opt_d = torch.optim.Adam(disc.parameters(), lr=cfg.dpsad.disc_lr, betas=(0.5, 0.999))
        lam = cfg.dpsad.adv_weight
        T = ac.shape[0]
        mode = self.mode
        ps = PerSampleGrads(student, cfg.dp.grad_sample) if mode == "sound" else None

        def sound_loss(model, x0, yb, r, noise, x_teacher):
            a = ac[r].view(-1, 1, 1, 1)
            x_r = a.sqrt() * x0 + (1 - a).sqrt() * noise
            xs = denoised(x_r, model(x_r, r, yb if cond else None), a)
            return student_losses(xs, x0, x_teacher, yb if cond else None, disc, lam)

        def step_fn(step, idx, g):
            m = idx.shape[0]
            r = torch.randint(0, T, (m,), generator=g, device=dev)
            noise = torch.randn((m, *x.shape[1:]), generator=g, device=dev)
            x0 = x[idx]
            yb = y[idx] if cond else torch.zeros(m, dtype=torch.long, device=dev)
            a = ac[r].view(-1, 1, 1, 1)
            x_r = a.sqrt() * x0 + (1 - a).sqrt() * noise
            if m == 0:  # DP-SGD still releases noise on an empty Poisson sample; the paper's noise is per record
                zeros = [torch.zeros_like(p) for p in params]
                if mode == "sound":
                    zeros = [z / plan.expected_batch for z in add_noise(zeros, plan.noise_std, g)]
                return zeros, {"batch": 0}
            with torch.no_grad():
                x_teacher = denoised(x_r, teacher(x_r, r, yb if cond else None), a)
            with frozen(disc):
                if mode == "sound":
                    grads, stats = dp_sgd_gradient(ps, sound_loss, (x0, yb, r, noise, x_teacher), plan, g,
                                                   cfg.dp.physical_batch)
                    with torch.no_grad():
                        xs = denoised(x_r, student(x_r, r, yb if cond else None), a)
                else:
                    xs = denoised(x_r, student(x_r, r, yb if cond else None), a)
                    losses = student_losses(xs, x0, x_teacher, yb if cond else None, disc, lam)
                    grads, stats = paper_gradient(params, xs, losses, plan, g)
            # discriminator step: teacher outputs = 1, student outputs = 0 (not noised, never released)
            if lam > 0:
                yd = yb if cond else None
                d_loss = (F.softplus(-disc(x_teacher.clamp(-1, 1), yd)).mean()
                          + F.softplus(disc(xs.detach().clamp(-1, 1), yd)).mean())
                opt_d.zero_grad(set_to_none=True)
                d_loss.backward()
                opt_d.step()
                stats["d_loss"] = float(d_loss.detach())
            return grads, stats

        ctx.log(f"[student] DP-SAD ({mode} mode) on {plan.n_records} members: q={plan.sample_rate:g}, "
                f"{plan.steps} steps, sigma={plan.noise_multiplier:.4f} ({plan.accountant}), C={plan.max_grad_norm:g}, "
                f"lambda={lam:g}, delta={plan.delta:g}")
        dp_sgd_train(student, plan, cfg.train, ctx.ckpt_dir, name="student", seed=cfg.seed, device=dev,
                     step_fn=step_fn, extra_modules={"disc": disc}, extra_optims={"disc": opt_d},
                     desc=f"train dpsad student ({mode})", meta={"mode": mode})
        write_privacy(ppath, plan, mode=mode)

    # ------------------------------------------------------------------------------------ targets
    def load_target(self, name=None):
        name = self.check_target(name)
        model = load_ema(self.ctx.new_denoiser(), self.ctx.ckpt_dir, name, self.ctx.device)
        if name == "teacher":
            return self.make_target(name, model,
                                    note="never released; non-private (the teacher DDPM, trained without DP on "
                                         "the members)")
        p = self.privacy(name)
        claim = "as claimed by the paper, not a sound guarantee" if self.mode == "paper" else \
            "DP-SGD on the student, teacher/discriminator not covered"
        return self.make_target(name, model,
                                note=f"DP-SAD student, {self.mode} mode (epsilon={p['epsilon']:.3g}, {claim})")

    def privacy(self, target: str | None = None) -> dict | None:
        target = self.check_target(target)
        if target == "teacher":
            return None  # never released; trained without DP
        path = self.ctx.ckpt_dir / "privacy-student.json"
        if self.mode == "paper":
            d = read_privacy(path)
            delta = d["accounting"]["delta"] if d else self.cfg.dp.delta
            out = privacy_dict(path, "", basis=PAPER_BASIS.format(delta=delta))
            out["claimed_by_paper"] = True
            out["end_to_end"] = False
            return out
        out = privacy_dict(
            path, "the released student only (EMA of its DP-SGD iterates), with the teacher and discriminator "
                  "treated as fixed: both are never released but are trained without DP on the same members and "
                  "enter every record's gradient, so a record's influence through them is NOT bounded by this "
                  "epsilon (not an end-to-end guarantee)")
        out["end_to_end"] = False
        out["conditional_on"] = ["teacher", "discriminator"]
        return out
