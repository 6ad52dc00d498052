"""The DP-SGD plan and step shared by the DP methods (dpdm, dpsad, dp-txt2img): Poisson sampling, per-record clipped
gradients, Gaussian noise on their sum (the release ``privbench.core.mechanisms.noisy_mean``), Adam, accounting. The
step (:class:`DPSGDStep`) runs in the one training loop (models/loop.py: warm-up, EMA, checkpoints, resume).

Randomness by ``dp.noise_source``: docs/methods.md §0. The loop's statistics (un-noised loss, clipped fraction,
batch size) are outside every ε: ``debug/<name>.log`` only, kept on the device and read back once per
``train.log_every`` steps (no host sync per step). Under torchrun the noise is drawn once, on rank 0, and one
all-reduce sums the ranks' clipped shares: docs/scaling.md §2.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from ..core import distributed
from ..core.errors import BadInput
from ..core.io import append_log as log
from ..core.io import atomic_write_json, read_json_or_none
from ..core.mechanisms import (
    SECURE,
    SEEDED_NOISE_LABEL,
    noise_generator,
    noise_source_basis,
    noisy_mean,
    poisson_sample,
    secure_generator,
)
from ..core.seeding import step_generator
from .debug import debug_log, debug_path
from .grad_sample import PerSampleGrads
from .loop import StepStrategy, Summary, ema_capped, train_loop

# --------------------------------------------------------------------------------------------- the plan

@dataclass
class DPPlan:
    """Everything the DP-SGD loop and its accounting need, resolved from the config."""
    n_records: int
    sample_rate: float
    steps: int
    epsilon_budget: float
    delta: float
    noise_multiplier: float
    calibrated: bool
    accountant: str
    max_grad_norm: float
    noise_multiplicity: int
    noise_source: str = "seeded"  # dp.noise_source: where the privacy randomness comes from

    @property
    def expected_batch(self) -> float:
        return self.sample_rate * self.n_records

    @property
    def noise_std(self) -> float:
        """Std of the noise added to the sum of clipped gradients: σ·C."""
        return self.noise_multiplier * self.max_grad_norm


def resolve_sample_rate(cfg, n_records: int) -> float:
    dp = cfg.dp
    q = dp.sample_rate if dp.sample_rate > 0 else cfg.train.batch_size / n_records
    if not 0.0 < q <= 1.0:
        raise BadInput(f"dp.sample_rate resolves to {q:g} (train.batch_size={cfg.train.batch_size} / "
                       f"{n_records} members): the Poisson sample rate must be in (0, 1]; lower train.batch_size "
                       f"or set dp.sample_rate")
    return float(q)


def check_dp_config(cfg) -> None:
    """The checks of the DP section that do not need an accountant (BadInput, one line)."""
    if cfg.dp.trainable == "attention" and not cfg.model.attention_levels:
        raise BadInput("dp.trainable=attention: the UNet has no attention block; set model.attention_levels "
                       "(e.g. [1])")
    dp = cfg.dp
    if not (dp.epsilon > 0 and math.isfinite(dp.epsilon)):
        raise BadInput(f"dp.epsilon={dp.epsilon!r}: must be a finite number > 0")
    if not 0.0 < dp.delta < 1.0:
        raise BadInput(f"dp.delta={dp.delta!r}: must be in (0, 1)")
    if not (dp.noise_multiplier >= 0 and math.isfinite(dp.noise_multiplier)):
        raise BadInput(f"dp.noise_multiplier={dp.noise_multiplier!r}: must be >= 0 (0 = calibrate to dp.epsilon)")
    if not dp.max_grad_norm > 0:
        raise BadInput(f"dp.max_grad_norm={dp.max_grad_norm!r}: must be > 0")
    if not 0.0 <= dp.sample_rate <= 1.0:
        raise BadInput(f"dp.sample_rate={dp.sample_rate!r}: must be in (0, 1], or 0 for train.batch_size / N")


def make_plan(cfg, n_records: int, steps: int, *, accountant: str | None = None,
              noise_multiplicity: int | None = None) -> DPPlan:
    """Resolve q and δ and calibrate σ (or check a given σ against the budget). Raises BadInput."""
    # lazy: privacy.dpsgd imports scipy; only when ε is accounted
    from ..privacy.dpsgd import dpsgd_epsilon, noise_multiplier_for_epsilon

    check_dp_config(cfg)
    dp = cfg.dp
    q = resolve_sample_rate(cfg, n_records)
    delta = min(dp.delta, 1.0 / n_records)
    acc = accountant or dp.accountant
    if dp.noise_multiplier > 0:
        res = dpsgd_epsilon(dp.noise_multiplier, q, steps, delta, acc)
        if res["epsilon"] > dp.epsilon:
            raise BadInput(f"dp.noise_multiplier={dp.noise_multiplier:g}: gives epsilon={res['epsilon']:.3f} > "
                           f"dp.epsilon={dp.epsilon:g} (q={q:g}, {steps} steps, delta={delta:g}); raise it, raise "
                           f"dp.epsilon, or set it to 0 to calibrate")
        sigma, calibrated = float(dp.noise_multiplier), False
    else:
        res = noise_multiplier_for_epsilon(dp.epsilon, q, steps, delta, acc)
        sigma, calibrated = float(res["noise_multiplier"]), True
    k = dp.noise_multiplicity if noise_multiplicity is None else noise_multiplicity
    return DPPlan(n_records, q, int(steps), float(dp.epsilon), float(delta), sigma, calibrated, res["accountant"],
                  float(dp.max_grad_norm), int(k), str(dp.noise_source))


def account(plan: DPPlan, accountant: str | None = None) -> dict:
    """The accounted ε of a plan: dpsgd_epsilon(σ, q, steps, δ)."""
    from ..privacy.dpsgd import dpsgd_epsilon  # lazy: privacy.dpsgd imports scipy; only when ε is accounted

    return dpsgd_epsilon(plan.noise_multiplier, plan.sample_rate, plan.steps, plan.delta,
                         accountant or plan.accountant)


# --------------------------------------------------------------------------------------------- DDPM loss

def multi_draw_loss(alphas_cumprod: torch.Tensor) -> Callable:
    """Per-record DDPM loss averaged over K draws: ``loss(model, x0, y, t, noise) -> (n,)`` with t (n, K) and
    noise (n, K, C, H, W); the model sees the n·K noised inputs record-major."""

    def loss(model, x0, y, t, noise):
        n, k = t.shape
        a = alphas_cumprod[t].view(n, k, 1, 1, 1)
        x_t = (a.sqrt() * x0.unsqueeze(1) + (1 - a).sqrt() * noise).reshape(n * k, *x0.shape[1:])
        eps = model(x_t, t.reshape(-1), y.repeat_interleave(k) if y is not None else None)
        return ((eps.view_as(noise) - noise) ** 2).flatten(2).mean(2).mean(1)

    return loss


# --------------------------------------------------------------------------------------------- the loop

StepFn = Callable[[int, torch.Tensor, torch.Generator], tuple[list[torch.Tensor], dict]]


class DPSGDStep(StepStrategy):
    """A DP-SGD step: the Poisson sample of the step, ``step_fn(step, idx, generator)`` for the privatized
    gradient of each trainable parameter, Adam. ``extra_modules`` and ``extra_optims`` (e.g. a discriminator) are
    checkpointed and resumed with the model; ``meta`` joins the checkpoint manifest."""

    bar_suffix = " (DP-SGD)"

    def __init__(self, plan: DPPlan, step_fn: StepFn, *, extra_modules: dict[str, nn.Module] | None = None,
                 extra_optims: dict[str, torch.optim.Optimizer] | None = None, meta: dict | None = None):
        self.plan, self.step_fn, self.meta = plan, step_fn, meta or {}
        self.modules = extra_modules or {}
        self.optims = extra_optims or {}
        self.plan_json = asdict(plan)
        self.params: list[torch.Tensor] = []

    def extra_modules(self):
        return self.modules

    def optimizer(self, model, tcfg):
        self.params = [p for p in model.parameters() if p.requires_grad]
        return torch.optim.Adam(self.params, lr=tcfg.lr, weight_decay=tcfg.weight_decay)

    def state(self):
        return {"plan": self.plan_json, **self.meta}

    def check_resume(self, state, spath):
        if state.get("plan") != json.loads(json.dumps(self.plan_json)):
            raise BadInput(f"checkpoint {spath}: was trained under another DP plan ({state.get('plan')}); "
                           f"delete it to retrain")

    def optim_state(self, opt):
        return {"model": opt.state_dict(), **{k: o.state_dict() for k, o in self.optims.items()}}

    def load_optim_state(self, opt, saved):
        opt.load_state_dict(saved["model"])
        for oname, o in self.optims.items():
            o.load_state_dict(saved[oname])

    def prepare(self, run):
        if getattr(run.tcfg, "compile", False):
            log(run.run_dir, f"[{run.name}] train.compile: not applied to the DP-SGD loop (per-record gradient hooks)")

    def gradients(self, step, run):
        plan, device = self.plan, run.device
        secure = plan.noise_source == "secure"
        dist = distributed.is_distributed()
        if secure and dist:  # one secure seed and one Poisson sample for all ranks, drawn on rank 0
            g = distributed.secure_generator_from_main(device)
            idx = distributed.poisson_sample_from_main(plan.n_records, plan.sample_rate, device)
        else:
            g = secure_generator(device) if secure else step_generator(run.seed, step, device)
            idx = poisson_sample(plan.n_records, plan.sample_rate, SECURE if secure else g, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=run.bf16):  # per-record math stays fp32
            grads, stats = self.step_fn(step, idx, g)
        if secure and dist:
            # noise released outside dp_sgd_gradient (DP-SAD's paper mode, an empty sample) was drawn on each
            # rank: every rank applies rank 0's, so the noise is drawn once
            grads = distributed.broadcast_from_main(list(grads))
        for p, gr in zip(self.params, grads):
            p.grad = gr
        return stats

    def summarize(self, sums, n, step, run):
        avg = {k: float(v) / n for k, v in sums.items()}  # the one host sync of the interval
        # un-noised functions of the private records: debug output only; log.txt gets the step and the learning rate
        debug_log(run.run_dir, run.name, f"[{run.name}] step {step}/{run.steps} "
                  + " ".join(f"{k} {v:.4g}" for k, v in avg.items()))
        return Summary(avg.get("loss", 0.0), private_log=debug_path(run.run_dir, run.name))


def dp_sgd_train(model: nn.Module, plan: DPPlan, tcfg, ckpt_dir: Path, *, name: str, seed: int, device,
                 step_fn: StepFn, extra_modules: dict[str, nn.Module] | None = None,
                 extra_optims: dict[str, torch.optim.Optimizer] | None = None, desc: str | None = None,
                 meta: dict | None = None) -> nn.Module:
    """Private training of ``model`` for ``plan.steps`` steps; returns its EMA copy (eval mode): the one training
    loop (models/loop.py) with a :class:`DPSGDStep` and the EMA decay capped (:func:`~.loop.ema_capped`).

    ``step_fn(step, idx, generator)`` gets the step's Poisson sample (indices into the N records) and returns the
    privatized gradient of each trainable parameter and a dict of statistics (``debug/<name>.log`` only)."""
    strategy = DPSGDStep(plan, step_fn, extra_modules=extra_modules, extra_optims=extra_optims, meta=meta)
    return train_loop(model, strategy, ema_capped(tcfg, plan.steps), ckpt_dir, name=name, seed=seed, device=device, steps=plan.steps,
                      desc=desc)


def dp_sgd_gradient(ps: PerSampleGrads, loss_fn: Callable, records: tuple[torch.Tensor, ...], plan: DPPlan,
                    generator: torch.Generator, physical_batch: int = 0) -> tuple[list[torch.Tensor], dict]:
    """(Σᵢ clip_C(∇ℓᵢ) + N(0, σ²C² I)) / (q·N) for the records of this step, in physical chunks of
    ``physical_batch`` records (0 = all at once; exact, since clipping is per record).

    Returns the gradients (one per ``ps.params``) and the debug stats (mean loss, clipped fraction, batch size) as
    device tensors. Under torchrun ``records`` is the whole Poisson sample; each rank clips its own slice."""
    n = records[0].shape[0]
    dist = distributed.is_distributed()
    if dist:
        lo_, hi_ = distributed.shard(n)
        records = tuple(r[lo_:hi_] for r in records)
    m = records[0].shape[0]
    dev = ps.params[0].device if ps.params else torch.device("cpu")
    summed = None
    loss_sum = torch.zeros((), dtype=torch.float32, device=dev)
    n_clipped = torch.zeros((), dtype=torch.float32, device=dev)
    chunk = physical_batch if physical_batch > 0 else max(m, 1)
    for c0 in range(0, m, chunk):
        part = tuple(r[c0:c0 + chunk] for r in records)
        s, norms, losses = ps.clipped_sum(loss_fn, *part, max_norm=plan.max_grad_norm)
        if summed is None:
            summed = list(s)
        else:
            torch._foreach_add_(summed, s)
        loss_sum += losses.detach().float().sum()
        n_clipped += (norms > plan.max_grad_norm).sum()
    if summed is None:  # an empty Poisson sample (on this rank): the noise alone
        summed = [torch.zeros_like(p) for p in ps.params]
    reduced = {"loss": loss_sum, "clipped": n_clipped}

    def all_reduce(noised):  # one all-reduce of the ranks' noised shares and the stats
        *noised, reduced["loss"], reduced["clipped"] = distributed.all_reduce_sum([*noised, loss_sum, n_clipped])
        return noised

    # the release: core's Gaussian mechanism; under torchrun the noise is drawn once, by rank 0
    grads = noisy_mean(summed, plan.noise_std if not dist or distributed.is_main() else 0.0, plan.expected_batch,
                       noise_generator(plan.noise_source, generator), all_reduce if dist else None)
    stats = {"loss": reduced["loss"] / max(n, 1), "clipped": reduced["clipped"] / max(n, 1), "batch": n}
    if n == 0:
        stats.pop("loss")
    return grads, stats


def write_privacy(path: Path, plan: DPPlan, accountant: str | None = None, **extra) -> dict:
    res = account(plan, accountant)
    out = {"plan": asdict(plan), "accounting": res, **extra}
    atomic_write_json(path, out)
    return out


def read_privacy(path: Path) -> dict | None:
    return read_json_or_none(path, "corrupt; delete it to re-account")


def privacy_dict(path: Path, covers: str, basis: str | None = None) -> dict:
    """The ``privacy`` object of a DP-SGD target from its stored accounting. Every basis ends with the noise
    source; seeded noise adds ``noise_label`` (docs/methods.md §0)."""
    from ..privacy.dpsgd import dpsgd_basis  # lazy: privacy.dpsgd imports scipy; only when ε is accounted

    d = read_privacy(path)
    if d is None:
        raise BadInput(f"{path}: no privacy accounting; train the target first")
    plan, res = d["plan"], d["accounting"]
    source = plan["noise_source"]
    out = {
        "epsilon": float(res["epsilon"]), "delta": float(res["delta"]),
        "basis": (basis or f"{dpsgd_basis(res['accountant'], res['delta'])}; scope: {covers}")
                 + f"; {noise_source_basis(source)}",
        "noise_multiplier": float(plan["noise_multiplier"]), "accountant": res["accountant"],
        "sample_rate": float(plan["sample_rate"]), "steps": int(plan["steps"]),
        "max_grad_norm": float(plan["max_grad_norm"]), "epsilon_budget": float(plan["epsilon_budget"]),
        "noise_calibrated": bool(plan["calibrated"]),
        "noise_source": source,
    }
    if source == "seeded":
        out["noise_label"] = SEEDED_NOISE_LABEL
    if res.get("fallback"):
        out["fallback"] = res["fallback"]
    return out


class MemberDPSGD:
    """Mix-in of a :class:`~privbench.models.method.Method` trained with DP-SGD on its whole member split (one
    target): the plan (σ calibrated once per method object), its checks, and the ``privacy`` object read back from
    ``<checkpoints>/privacy-model.json`` (with what was trained and what the training started from)."""

    _plan: DPPlan | None = None

    def validate(self) -> None:
        check_dp_config(self.cfg)
        resolve_sample_rate(self.cfg, self.cfg.data.n_members)
        self.plan()  # calibrates σ (BadInput if the budget cannot be met or a given σ exceeds it)

    def plan(self) -> DPPlan:
        if self._plan is None:
            self._plan = make_plan(self.cfg, self.cfg.data.n_members, self.cfg.train.steps)
        return self._plan

    @property
    def privacy_path(self) -> Path:
        return self.ctx.ckpt_dir / "privacy-model.json"

    def stored_privacy(self, scope: str) -> dict:
        """The target's privacy object (:func:`privacy_dict`) plus the stored ``trained`` and ``init`` records."""
        out = privacy_dict(self.privacy_path, scope)
        stored = read_privacy(self.privacy_path) or {}
        for key in ("trained", "init"):
            if key in stored:
                out[key] = stored[key]
        return out


def drop_labels(loss_fn, unconditional: bool):
    if not unconditional:
        return loss_fn
    return lambda model, x0, _y, t, noise: loss_fn(model, x0, None, t, noise)
