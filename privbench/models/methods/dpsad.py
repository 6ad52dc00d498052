"""``dpsad``: DP-SAD, stochastic adversarial distillation of a private diffusion student (docs/methods.md §6).

A non-private teacher (on the members, or under ``dpsad.teacher_data=public`` the partition's cached public
pre-training), a student distilled on Poisson samples of the members with the per-record loss
MSE(x̂_ψ, x̂_θ) + MSE(x₀, x̂_θ) + λ·softplus(−D(clamp(x̂_θ), y)) on denoised estimates x̂₀, privatized by
``dpsad.mode`` (``sound``: DP-SGD; ``paper``: output-gradient sanitization), and a discriminator step after each
student step. The adversarial term is the non-saturating form of the paper's log(1 − D) (usable gradients early
on); D sees x̂₀ clamped to [−1, 1], as the DDPM sampler's clip_sample does. Which ε each choice gives: §6.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ...core.config import register_section, setting
from ...core.errors import BadInput, WorkFailed
from ...core.io import atomic_write_json
from ...core.mechanisms import noise_generator, noise_source_basis, noisy_mean, sanitize_per_record
from ...core.registry import METHODS
from ...core.seeding import sub_seed
from ...privacy.claims import CLAIMED_BY_PAPER
from .. import public_init
from ..dp_sgd import (
    DPPlan,
    DPSGDStep,
    check_dp_config,
    dp_sgd_gradient,
    make_plan,
    privacy_dict,
    read_privacy,
    resolve_sample_rate,
    write_privacy,
)
from ..grad_sample import PerSampleGrads, frozen
from ..loop import ema_capped, train_loop
from ..method import Method, run_partition
from ..training import TrainData, is_trained, load_ema, train_denoiser


@dataclass
class DPSADConfig:
    mode: str = setting("sound", choices=["sound", "paper"],
                        help="sound = DP-SGD on the student's parameter gradient; paper = output-gradient sanitization")
    teacher_steps: int = setting(4000, lo=1, help="steps of the non-private teacher DDPM")
    adv_weight: float = setting(1.0, lo=0.0, help="lambda of the adversarial loss")
    disc_lr: float = setting(2e-4, lo=0.0, lo_open=True, help="discriminator Adam learning rate")
    disc_width: int = setting(32, lo=1, help="channels of the discriminator's first conv")
    teacher_data: str = setting("members", choices=["members", "public"],
                                help="what the teacher and discriminator train on: members (the paper; the student's "
                                     "epsilon is then only conditional) or public (a disjoint public split; the "
                                     "student's epsilon is end to end)")
    n_public: int = setting(0, lo=0, help="public records for teacher_data=public under data.public=none (the run "
                                          "partition's public split); 0 = as many as data.n_members. Under "
                                          "data.public=pool or classes:A-B, data.n_public sizes the split")


register_section("dpsad", DPSADConfig, presets={"test": {"teacher_steps": 10}, "small": {"teacher_steps": 10000},
                                                "paper": {"teacher_steps": 200_000}})

PAPER_BASIS = ("as claimed by the paper (output-gradient sanitization; not a sound DP guarantee: the student's "
               "Jacobian depends on private data — docs/methods.md §6): RDP accountant of a Poisson-subsampled "
               "Gaussian on per-record output gradients clipped to C, delta={delta:g}; {teacher}")
PAPER_TEACHER = {"members": "the non-private teacher and discriminator are not covered either",
                 "public": "teacher and discriminator trained on public records only"}

NO_FORMAL_BASIS = ("none: no formal guarantee. DP-SAD sound mode with dpsad.teacher_data=members: the teacher and the "
                   "discriminator are trained without DP on the same members and enter every record's loss, so "
                   "removing one record changes the clipped gradient sums of batches that do not contain it; neither "
                   "the sensitivity bound C nor the subsampling argument holds. conditional_epsilon is the DP-SGD "
                   "epsilon of the student's updates, valid only if the teacher and the discriminator were fixed "
                   "functions independent of the members (set dpsad.teacher_data=public for an end-to-end epsilon)")
CONDITIONAL_SCOPE = ("the released student (EMA of its DP-SGD iterates), CONDITIONAL on the teacher and the "
                     "discriminator being fixed functions independent of the members — they are not (trained "
                     "without DP on the same members), so this is not a guarantee")
PUBLIC_SCOPE = ("the released student (EMA of its DP-SGD iterates), end to end for the members: the teacher was "
                "trained only on {n} public records (the run partition's public split: disjoint from the members, the "
                "non-members, the reference pool and RMIA's population) and "
                "the discriminator's updates use only those public records, the teacher's outputs on them and the "
                "student's outputs on them (the student's parameters are the DP-SGD iterates already accounted); "
                "the public records themselves are not protected")

_TAG_PUBLIC = 0x9B11C  # the public split and the discriminator's public batches


class Discriminator(nn.Module):
    """Small class-conditional conv discriminator: logit that an x̂₀ came from the teacher.

    No normalization across records, so it can sit inside per-record losses."""

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
    # in fp32 whatever the autocast dtype of g_out (a bf16 norm would clip to C only within ~0.4%)
    noisy, norms = sanitize_per_record(g_out.float(), plan.max_grad_norm, plan.noise_std,
                                       noise_generator(plan.noise_source, generator))
    grads = torch.autograd.grad(xs, params, grad_outputs=(noisy / plan.expected_batch).to(xs.dtype),
                                allow_unused=True)
    grads = [g if g is not None else torch.zeros_like(p) for g, p in zip(grads, params)]
    # stats stay on the device (the DP loop reads them back once per log interval)
    return grads, {"loss": losses.detach().float().mean(),
                   "clipped": (norms > plan.max_grad_norm).float().mean(), "batch": xs.shape[0]}


@METHODS.register_class
class DPSAD(Method):
    name = "dpsad"
    description = "DP-SAD: non-private teacher, student distilled with DP noise (targets: student, teacher)"
    default_target = "student"
    private = True
    report_order = 30
    coinciding_note = ("with dpsad.teacher_data=members the teacher is centralized's training (the same members, seed "
                       "and initialisation, non-private); with dpsad.teacher_steps equal to train.steps its weights, "
                       "and so its scores, are centralized's model's")
    target_order = ("student", "teacher")
    config_keys = ("dp", "dpsad", "train.ema_start_weight")

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
        if self.teacher_data == "public":
            self._check_public_fits()
        self.plan()

    @property
    def teacher_data(self) -> str:
        return self.cfg.dpsad.teacher_data

    def n_public(self) -> int:
        return len(self.ctx.split.public)

    public_demand_key = "dpsad.n_public"

    @classmethod
    def public_demand(cls, cfg) -> int:
        """``teacher_data=public`` under ``data.public=none``: ``dpsad.n_public`` records (0: data.n_members)."""
        return (cfg.dpsad.n_public or cfg.data.n_members) if cfg.dpsad.teacher_data == "public" else 0

    def _check_public_fits(self) -> None:
        """BadInput (one line, nothing written) when the run's partition has no public split to train on."""
        if not run_partition(self.cfg, self.ctx.dataset[1]).public:
            raise BadInput("dpsad.teacher_data=public: the run's public split is empty (data.n_public)")

    def public_indices(self) -> list[int]:
        """The run partition's public split (docs/methods.md §0); a reference model uses its target's."""
        return list(self.ctx.split.public)

    def teacher_records(self) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """(x, y, dataset indices) the teacher and the discriminator are trained on."""
        idx = list(self.ctx.split.members) if self.teacher_data == "members" else self.public_indices()
        x, y = self.ctx.records(idx)
        return x, y, idx

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

    def _teacher(self, x: torch.Tensor, y: torch.Tensor) -> tuple[nn.Module, torch.Tensor | None,
                                                                   torch.Tensor | None]:
        """The frozen teacher, and the public records (x, y) under ``teacher_data=public`` (else None, None)."""
        ctx, cfg = self.ctx, self.cfg
        dev = ctx.device
        cond = ctx.num_classes is not None
        xp = yp = None
        if self.teacher_data == "public":
            xp, yp, pidx = self.teacher_records()
            atomic_write_json(ctx.run_dir / "public.json",
                              {"indices": pidx, "seed": cfg.seed,
                               "note": "the run partition's public split (split.json): disjoint from the members, the "
                                       "non-members, the reference pool and RMIA's population; the DP-SAD teacher "
                                       "and discriminator are trained on these only (dpsad.teacher_data=public)"})
            # no member: the partition's cached public pre-training at teacher_steps (docs/methods.md §6)
            ctx.log(f"[teacher] the public pre-training: {cfg.dpsad.teacher_steps} non-private steps on {len(xp)} "
                    f"public records (no member), {public_init.pretrain_dir(ctx, cfg.dpsad.teacher_steps).name}")
            teacher = public_init.pretrained_denoiser(ctx, cfg.dpsad.teacher_steps)
        else:
            if not is_trained(ctx.ckpt_dir, "teacher", cfg.dpsad.teacher_steps):
                ctx.log(f"[teacher] non-private DDPM on {len(x)} members, {cfg.dpsad.teacher_steps} steps")
            teacher = train_denoiser(ctx.initial_denoiser(), TrainData(x.to(dev), y.to(dev) if cond else None),
                                     ctx.schedule.alphas_cumprod(dev), cfg.train, ctx.ckpt_dir, name="teacher",
                                     seed=cfg.seed, device=dev, steps=cfg.dpsad.teacher_steps,
                                     desc="train dpsad teacher")
        teacher.eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
        return teacher, xp, yp

    def train(self) -> None:
        ctx, cfg = self.ctx, self.cfg
        x, y = self.training_data()
        dev = ctx.device
        teacher, xp, yp = self._teacher(x, y)
        ppath = ctx.ckpt_dir / "privacy-student.json"
        if is_trained(ctx.ckpt_dir, "student", cfg.train.steps) and ppath.exists():
            return
        plan = self.plan()
        if plan.n_records != len(x):
            raise WorkFailed(f"dpsad: the member split has {len(x)} records, the plan {plan.n_records}")
        cond = ctx.num_classes is not None
        student = ctx.initial_denoiser().to(dev)
        step = DistillStep(self, student, teacher, x.to(dev), y.to(dev) if cond else None, xp, yp)
        ctx.log(f"[student] DP-SAD ({self.mode} mode, teacher_data={self.teacher_data}) on {plan.n_records} members: "
                f"q={plan.sample_rate:g}, {plan.steps} steps, sigma={plan.noise_multiplier:.4f} ({plan.accountant}), "
                f"C={plan.max_grad_norm:g}, lambda={step.lam:g}, delta={plan.delta:g}, noise {plan.noise_source}")
        train_loop(student, step, ema_capped(cfg.train, plan.steps), ctx.ckpt_dir, name="student", seed=cfg.seed,
                   device=dev, steps=plan.steps, desc=f"train dpsad student ({self.mode})")
        write_privacy(ppath, plan, mode=self.mode, teacher_data=self.teacher_data,
                      n_public=self.n_public() if xp is not None else 0)

    def shared_trainings(self) -> list[str]:
        own = super().shared_trainings()
        if self.teacher_data != "public":
            return own
        teacher = public_init.pretrain_dir(self.ctx, self.cfg.dpsad.teacher_steps).name
        return own + [teacher] if teacher not in own else own

    # ------------------------------------------------------------------------------------ targets
    def load_target(self, name=None):
        name = self.check_target(name)
        if name == "teacher" and self.teacher_data == "public":
            model = public_init.pretrained_denoiser(self.ctx, self.cfg.dpsad.teacher_steps)
        else:
            model = load_ema(self.ctx.new_denoiser(), self.ctx.ckpt_dir, name, self.ctx.device)
        if name == "teacher":
            what = ("the members" if self.teacher_data == "members"
                    else f"{self.n_public()} public records of the run's partition (no member, no evaluation record)")
            return self.make_target(name, model,
                                    note=f"never released; non-private (the teacher DDPM, trained without DP on "
                                         f"{what})")
        p = self.privacy(name)
        if self.mode == "paper":
            claim = f"epsilon={p['claimed_epsilon']:.3g} as claimed by the paper, not a sound guarantee"
        elif p["epsilon"] is None:
            claim = (f"no formal epsilon; conditional epsilon={p['conditional_epsilon']:.3g}, conditional on the "
                     f"non-private teacher and discriminator")
        else:
            claim = f"epsilon={p['epsilon']:.3g}, end to end (public teacher and discriminator)"
        return self.make_target(name, model, note=f"DP-SAD student, {self.mode} mode ({claim})")

    def privacy(self, target: str | None = None) -> dict | None:
        target = self.check_target(target)
        if target == "teacher":
            return None  # never released; trained without DP
        path = self.ctx.ckpt_dir / "privacy-student.json"
        public = self.teacher_data == "public"
        if self.mode == "paper":
            d = read_privacy(path)
            delta = d["accounting"]["delta"] if d else self.cfg.dp.delta
            out = privacy_dict(path, "", basis=PAPER_BASIS.format(delta=delta,
                                                                  teacher=PAPER_TEACHER[self.teacher_data]))
            # a claim, never a guarantee: privacy.epsilon stays null (privbench.privacy.claims)
            out["claimed_epsilon"], out["epsilon"] = out["epsilon"], None
            out["claim_kind"] = CLAIMED_BY_PAPER
            out["claimed_by_paper"] = True
            out["end_to_end"] = False
            out["teacher_data"] = self.teacher_data
            return out
        if public:
            out = privacy_dict(path, PUBLIC_SCOPE.format(n=self.n_public()))
            out["end_to_end"] = True
            out["teacher_data"] = "public"
            out["n_public"] = self.n_public()
            return out
        # teacher_data=members: the DP-SGD number is conditional, not a formal epsilon (docs/methods.md §6)
        dpsgd = privacy_dict(path, CONDITIONAL_SCOPE)
        out = {"epsilon": None, "delta": dpsgd["delta"],
               "basis": f"{NO_FORMAL_BASIS}; {noise_source_basis(dpsgd['noise_source'])}",
               "conditional_epsilon": dpsgd["epsilon"],
               "conditional_on": ["teacher", "discriminator"],
               "conditional_basis": dpsgd["basis"]}
        out.update({k: v for k, v in dpsgd.items() if k not in ("epsilon", "delta", "basis")})
        out["end_to_end"] = False
        out["teacher_data"] = "members"
        return out


class DistillStep(DPSGDStep):
    """DP-SAD's student step, a DP-SGD step of the one training loop: per record one
    timestep, the privatized student gradient, then the discriminator's step (docs/methods.md §6 steps 2–3). The
    discriminator and its optimizer are checkpointed and resumed with the student."""

    def __init__(self, method: DPSAD, student: nn.Module, teacher: nn.Module, x: torch.Tensor,
                 y: torch.Tensor | None, xp: torch.Tensor | None, yp: torch.Tensor | None):
        ctx, cfg = method.ctx, method.cfg
        self.cfg, self.dev, self.cond = cfg, ctx.device, ctx.num_classes is not None
        self.student, self.teacher, self.x, self.y, self.xp, self.yp = student, teacher, x, y, xp, yp
        self.ac = ctx.schedule.alphas_cumprod(self.dev)
        self.mode, self.lam, self.public = method.mode, cfg.dpsad.adv_weight, xp is not None
        # this order (the discriminator's seeded init, then the gradient hooks) decides the run's numbers
        self.disc = method._discriminator().to(self.dev)
        self.opt_d = torch.optim.Adam(self.disc.parameters(), lr=cfg.dpsad.disc_lr, betas=(0.5, 0.999))
        self.ps = PerSampleGrads(student, cfg.dp.grad_sample) if self.mode == "sound" else None
        super().__init__(method.plan(), self.distill, extra_modules={"disc": self.disc},
                         extra_optims={"disc": self.opt_d},
                         meta={"mode": self.mode, "teacher_data": method.teacher_data})

    def sound_loss(self, model, x0, yb, r, noise, x_teacher):
        a = self.ac[r].view(-1, 1, 1, 1)
        x_r = a.sqrt() * x0 + (1 - a).sqrt() * noise
        cy = yb if self.cond else None
        return student_losses(denoised(x_r, model(x_r, r, cy), a), x0, x_teacher, cy, self.disc, self.lam)

    def disc_step(self, x_teacher, xs, yd) -> torch.Tensor:
        """One discriminator step: teacher outputs = 1, student outputs = 0 (not noised, never released)."""
        d_loss = (F.softplus(-self.disc(x_teacher.clamp(-1, 1), yd)).mean()
                  + F.softplus(self.disc(xs.detach().clamp(-1, 1), yd)).mean())
        self.opt_d.zero_grad(set_to_none=True)
        d_loss.backward()
        self.opt_d.step()
        return d_loss.detach()

    def distill(self, step, idx, g):
        grads, stats = self.student_step(idx, g)
        if self.public and self.lam > 0:
            # every step, whatever the member batch was (its size is private)
            stats["d_loss"] = self.public_disc_step(step)
        return grads, stats

    def student_step(self, idx, g):
        plan, dev, cond = self.plan, self.dev, self.cond
        m = idx.shape[0]
        r = torch.randint(0, self.ac.shape[0], (m,), generator=g, device=dev)
        noise = torch.randn((m, *self.x.shape[1:]), generator=g, device=dev)
        x0 = self.x[idx]
        yb = self.y[idx] if cond else torch.zeros(m, dtype=torch.long, device=dev)
        cy = yb if cond else None
        a = self.ac[r].view(-1, 1, 1, 1)
        x_r = a.sqrt() * x0 + (1 - a).sqrt() * noise
        if m == 0:  # DP-SGD still releases noise on an empty Poisson sample; the paper's noise is per record
            zeros = [torch.zeros_like(p) for p in self.params]
            if self.mode == "sound":
                zeros = noisy_mean(zeros, plan.noise_std, plan.expected_batch,
                                   noise_generator(plan.noise_source, g))
            return zeros, {"batch": 0}
        with torch.no_grad():
            x_teacher = denoised(x_r, self.teacher(x_r, r, cy), a)
        with frozen(self.disc):
            if self.mode == "sound":
                grads, stats = dp_sgd_gradient(self.ps, self.sound_loss, (x0, yb, r, noise, x_teacher), plan, g,
                                               self.cfg.dp.physical_batch)
                with torch.no_grad():
                    xs = denoised(x_r, self.student(x_r, r, cy), a)
            else:
                xs = denoised(x_r, self.student(x_r, r, cy), a)
                losses = student_losses(xs, x0, x_teacher, cy, self.disc, self.lam)
                grads, stats = paper_gradient(self.params, xs, losses, plan, g)
        if not self.public and self.lam > 0:  # the paper's discriminator step: on the member batch (not covered)
            stats["d_loss"] = self.disc_step(x_teacher, xs, cy)
        return grads, stats

    def public_disc_step(self, step: int) -> torch.Tensor:
        """The discriminator step of ``teacher_data=public``, from a generator seeded by (seed, step) alone: only
        the student's parameters (DP-SGD iterates) depend on the members."""
        dev, ac = self.dev, self.ac
        gp = torch.Generator().manual_seed(sub_seed(self.cfg.seed, _TAG_PUBLIC, step))
        b = self.cfg.train.batch_size
        pick = torch.randint(0, len(self.xp), (b,), generator=gp)
        r = torch.randint(0, ac.shape[0], (b,), generator=gp).to(dev)
        noise = torch.randn((b, *self.xp.shape[1:]), generator=gp).to(dev)
        x0 = self.xp[pick].to(dev)
        yd = self.yp[pick].to(dev) if self.cond else None
        a = ac[r].view(-1, 1, 1, 1)
        x_r = a.sqrt() * x0 + (1 - a).sqrt() * noise
        with torch.no_grad():
            x_teacher = denoised(x_r, self.teacher(x_r, r, yd), a)
            xs = denoised(x_r, self.student(x_r, r, yd), a)
        return self.disc_step(x_teacher, xs, yd)
