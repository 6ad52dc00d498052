"""``txt2img``: a tiny Stable-Diffusion-shaped text-to-image pipeline, pre-trained on the public split, then fine-tuned
on the members without privacy — fully or as LoRA adapters (``t2i.trainable``) — the way teams fine-tune SD on
their users' images (docs/methods.md §7; the pipeline and its pre-training: privbench.models.text2image)."""
from __future__ import annotations

from ...core.registry import METHODS
from ..method import Method
from ..text2image import finetune_plain, is_finetuned, load_finetuned, pretrain_dir, validate_t2i


@METHODS.register_class
class TextToImage(Method):
    name = "txt2img"
    description = ("latent text-to-image pipeline (VAE, CLIP text encoder, UNet2DConditionModel): public "
                   "pre-training, non-private fine-tuning on the members (target: model)")
    default_target = "model"
    report_order = 45
    config_keys = ("t2i", "train.ema_start_weight")
    provenance_keys = ("t2i.trainable", "t2i.caption")
    reference_models = False  # its references would need the latent query path (not implemented)
    text_conditional = True

    def validate(self) -> None:
        validate_t2i(self.ctx)

    @classmethod
    def public_demand(cls, cfg) -> int:
        """Under ``data.public=none`` the pre-training takes ``data.n_public`` records (0: ``data.n_members``),
        allocated by the run's partition like ``data.public=pool`` (never a member or non-member)."""
        return cfg.data.n_public or cfg.data.n_members

    def shared_trainings(self) -> list[str]:
        return [pretrain_dir(self.ctx).name]  # the text-to-image pre-training on the public split

    def train(self) -> None:
        ctx = self.ctx
        if is_finetuned(ctx, self.cfg.train.steps):
            return
        finetune_plain(ctx)

    def load_target(self, name=None):
        name = self.check_target(name)
        return load_finetuned(self.ctx, self.name, f"non-private text-to-image fine-tune "
                                                   f"({self.cfg.t2i.trainable}; pre-trained on "
                                                   f"{len(self.ctx.split.public)} public records)")
