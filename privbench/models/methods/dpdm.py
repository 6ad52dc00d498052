"""``dpdm``: DP-SGD on a class-conditional DDPM with noise multiplicity (docs/methods.md §5).

Per step (§3.1), with the model's ε-prediction loss and the T-step schedule of the rest of privbench:

1. Poisson sample: each of the N members joins the step independently with probability q
   (``dp.sample_rate``, or ``train.batch_size / N`` when it is 0), so the batch size varies;
2. per record i, K = ``dp.noise_multiplicity`` draws (t_ik, ε_ik): the record's loss is the mean over the K
   draws of ‖ε_ik − ε_θ(x_t, t_ik, y_i)‖² (mean over pixels) — averaged **before** the gradient, so there is
   one gradient per record and K costs no privacy (DPDM Thm 1);
3. per-record gradients of all parameters (privbench.models.grad_sample), flat clipping to
   C = ``dp.max_grad_norm``, sum, Gaussian noise N(0, σ²C² I), divided by the expected batch size q·N;
4. Adam (``train.lr``, linear warm-up), EMA (``train.ema_decay``) of the weights: the EMA is the target.

σ is calibrated with privbench's accountant to ``dp.epsilon`` at δ = min(``dp.delta``, 1/N) for q and
``train.steps`` steps, unless ``dp.noise_multiplier`` > 0 is given. The DP-SGD plan and step, and the step's
randomness (``dp.noise_source``), are :mod:`privbench.models.dp_sgd`'s, shared with the other DP methods.
"""
from __future__ import annotations

import torch

from ...core.errors import WorkFailed
from ...core.registry import METHODS
from ..dp_sgd import (
    MemberDPSGD,
    dp_sgd_gradient,
    dp_sgd_train,
    drop_labels,
    multi_draw_loss,
    write_privacy,
)
from ..grad_sample import PerSampleGrads
from ..method import Method
from ..trainable import apply_trainable
from ..training import is_trained, load_ema

# --------------------------------------------------------------------------------------------- method

@METHODS.register_class
class DPDM(MemberDPSGD, Method):
    name = "dpdm"
    description = "DP-SGD class-conditional DDPM with noise multiplicity K (target: model)"
    default_target = "model"
    private = True
    report_order = 20
    config_keys = ("dp", "train.ema_start_weight")

    def train(self) -> None:
        ctx, cfg = self.ctx, self.cfg
        ppath = self.privacy_path
        if is_trained(ctx.ckpt_dir, "model", cfg.train.steps) and ppath.exists():
            return
        x, y = self.training_data()
        plan = self.plan()
        if plan.n_records != len(x):
            raise WorkFailed(f"dpdm: the member split has {len(x)} records, the plan {plan.n_records}")
        dev = ctx.device
        x, y = x.to(dev), (y.to(dev) if ctx.num_classes else None)
        model = ctx.initial_denoiser()
        trained = apply_trainable(model, cfg.dp.trainable, cfg.dp.lora_rank, cfg.seed)
        model.to(dev)
        ps = PerSampleGrads(model, cfg.dp.grad_sample)
        ac = ctx.schedule.alphas_cumprod(dev)
        loss_fn = multi_draw_loss(ac)
        T, K = ac.shape[0], plan.noise_multiplicity

        def step_fn(_step, idx, g):
            m = idx.shape[0]
            t = torch.randint(0, T, (m, K), generator=g, device=dev)
            noise = torch.randn((m, K, *x.shape[1:]), generator=g, device=dev)
            yb = y[idx] if y is not None else torch.zeros(m, dtype=torch.long, device=dev)
            return dp_sgd_gradient(ps, drop_labels(loss_fn, y is None), (x[idx], yb, t, noise), plan, g,
                                   cfg.dp.physical_batch)

        ctx.log(f"[model] DP-SGD on {plan.n_records} members: q={plan.sample_rate:g} (E[B]={plan.expected_batch:g}), "
                f"{plan.steps} steps, sigma={plan.noise_multiplier:.4f} ({'calibrated' if plan.calibrated else 'given'}, "
                f"{plan.accountant}), C={plan.max_grad_norm:g}, K={K}, delta={plan.delta:g}, "
                f"per-sample backend {cfg.dp.grad_sample}; trains {trained['trainable']} "
                f"({trained['n_trainable']:,} of {trained['n_total']:,} parameters), init {cfg.train.init}")
        dp_sgd_train(model, plan, cfg.train, ctx.ckpt_dir, name="model", seed=cfg.seed, device=dev, step_fn=step_fn,
                     desc="train dpdm")
        write_privacy(ppath, plan, trained=trained, init=ctx.init_record())

    def load_target(self, name=None):
        name = self.check_target(name)
        model = self.ctx.new_denoiser()
        apply_trainable(model, self.cfg.dp.trainable, self.cfg.dp.lora_rank, self.cfg.seed)  # the adapters' layout
        model = load_ema(model, self.ctx.ckpt_dir, "model", self.ctx.device)
        p = self.privacy(name)
        return self.make_target(name, model,
                                note=f"DP-SGD (epsilon={p['epsilon']:.3g}, delta={p['delta']:g}, "
                                     f"sigma={p['noise_multiplier']:.3g}, K={self.cfg.dp.noise_multiplicity})")

    def privacy(self, target: str | None = None) -> dict | None:
        self.check_target(target)
        scope = ("the released model (EMA of the DP-SGD iterates: post-processing); each record's label is covered "
                 "with its record")
        if self.cfg.train.init == "public":
            scope += ("; end to end: the initial weights are a non-private pre-training on public records only "
                      "(not protected, disjoint from the members)")
        return self.stored_privacy(scope)
