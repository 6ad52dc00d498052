"""``dp-txt2img``: the text-to-image pipeline of ``txt2img`` (public pre-training, privbench.models.text2image), fine-tuned on
the members with DP-SGD — on LoRA adapters (``t2i.trainable=lora``: DP-LoRA), the attention layers, or every UNet
parameter (docs/methods.md §7).

DPDM's DP-SGD step (docs/methods.md §5) on the trainable parameters; a record and its caption are one unit of
privacy, the caption dropout drawn from the step's generator. ε is end to end (everything before the fine-tuning is
public).
"""
from __future__ import annotations

import torch

from ...core.errors import WorkFailed
from ...core.registry import METHODS
from ..dp_sgd import (
    MemberDPSGD,
    dp_sgd_gradient,
    dp_sgd_train,
    multi_draw_loss,
    write_privacy,
)
from ..grad_sample import PerSampleGrads
from ..method import Method
from ..text2image import (
    export_finetuned,
    finetune_network,
    is_finetuned,
    load_finetuned,
    member_latents,
    pretrain_dir,
    pretrained_pipeline,
    validate_t2i,
)


@METHODS.register_class
class DPTextToImage(MemberDPSGD, Method):
    name = "dp-txt2img"
    description = ("latent text-to-image pipeline, public pre-training, DP-SGD fine-tuning on the members "
                   "(DP-LoRA with t2i.trainable=lora; target: model)")
    default_target = "model"
    private = True
    report_order = 25
    config_keys = ("t2i", "dp", "train.ema_start_weight")
    provenance_keys = ("t2i.trainable", "t2i.caption")
    reference_models = False  # its references would need the latent query path (not implemented)
    text_conditional = True

    @classmethod
    def public_demand(cls, cfg) -> int:
        """As ``txt2img``: ``data.n_public`` records (0: ``data.n_members``) under ``data.public=none``."""
        return cfg.data.n_public or cfg.data.n_members

    def validate(self) -> None:
        validate_t2i(self.ctx)
        super().validate()

    def shared_trainings(self) -> list[str]:
        return [pretrain_dir(self.ctx).name]  # the text-to-image pre-training on the public split

    def train(self) -> None:
        ctx, cfg = self.ctx, self.cfg
        ppath = self.privacy_path
        if is_finetuned(ctx, cfg.train.steps) and ppath.exists():
            return
        plan = self.plan()
        pre = pretrained_pipeline(ctx)
        net, trained, base = finetune_network(ctx, pre)
        z, rows = member_latents(ctx, base)
        if plan.n_records != len(z):
            raise WorkFailed(f"dp-txt2img: the member split has {len(z)} records, the plan {plan.n_records}")
        dev = ctx.device
        net.to(dev)
        ps = PerSampleGrads(net, cfg.dp.grad_sample)
        ac = ctx.schedule.alphas_cumprod(dev)
        loss_fn = multi_draw_loss(ac)
        T, K, p = ac.shape[0], plan.noise_multiplicity, float(cfg.t2i.caption_dropout)

        def step_fn(_step, idx, g):
            m = idx.shape[0]
            t = torch.randint(0, T, (m, K), generator=g, device=dev)
            noise = torch.randn((m, K, *z.shape[1:]), generator=g, device=dev)
            keep = torch.rand(m, generator=g, device=dev) >= p  # caption dropout, one draw per record and step
            yb = torch.where(keep, rows[idx], torch.zeros_like(rows[idx]))
            return dp_sgd_gradient(ps, loss_fn, (z[idx], yb, t, noise), plan, g, cfg.dp.physical_batch)

        ctx.log(f"[model] DP-SGD fine-tuning of the text-to-image UNet on {plan.n_records} members: "
                f"q={plan.sample_rate:g}, {plan.steps} steps, sigma={plan.noise_multiplier:.4f} "
                f"({'calibrated' if plan.calibrated else 'given'}, {plan.accountant}), C={plan.max_grad_norm:g}, "
                f"K={K}, delta={plan.delta:g}; trains {trained['trainable']} ({trained['n_trainable']:,} of "
                f"{trained['n_total']:,} parameters)")
        ema = dp_sgd_train(net, plan, cfg.train, ctx.ckpt_dir, name="model", seed=cfg.seed, device=dev,
                           step_fn=step_fn, desc="train dp-txt2img")
        export_finetuned(ctx.run_dir, ema, pre)
        write_privacy(ppath, plan, trained=trained,
                      init={"init": "public", "pretrain_dir": pretrain_dir(ctx).name,
                            "n_public": len(ctx.split.public)})

    def load_target(self, name=None):
        name = self.check_target(name)
        p = self.privacy(name)
        return load_finetuned(self.ctx, self.name,
                              f"DP-SGD text-to-image fine-tune ({self.cfg.t2i.trainable}; epsilon={p['epsilon']:.3g}, "
                              f"delta={p['delta']:g}, sigma={p['noise_multiplier']:.3g})")

    def privacy(self, target: str | None = None) -> dict | None:
        self.check_target(target)
        scope = ("the released pipeline (EMA of the DP-SGD iterates of the UNet: post-processing), each member with "
                 "its caption; end to end: the VAE, the text encoder and the UNet's starting point are trained on "
                 "public records only (not protected, disjoint from the members) or seeded")
        return self.stored_privacy(scope)
