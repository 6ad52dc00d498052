"""``dpdm``: DP-SGD on a class-conditional DDPM with noise multiplicity (docs/methods.md §5).

The K draws of a record are averaged before the gradient, so there is one gradient per record and K costs no
privacy (DPDM Thm 1). The DP-SGD plan, step and randomness are :mod:`privbench.models.dp_sgd`'s, shared with the
other DP methods.
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
