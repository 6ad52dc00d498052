"""``public-only``: the public pre-training released as the target — a network that never read a member.

The cached pre-training of :mod:`privbench.models.public_init`, so the row costs no training of its own; ε = 0,
δ = 0 with respect to the members by construction (docs/methods.md §8; a test changes the members and checks the
weights are bit-identical).
"""
from __future__ import annotations

from ...core.registry import METHODS
from ..method import Method
from ..public_init import ensure_pretrained, pretrain_dir, pretrained_denoiser, public_hash

BASIS = ("by construction: the released model is the non-private pre-training on the public split only (no "
         "member is read), so it is the same function of the public records whatever the members are — ε = 0, "
         "δ = 0 for the members under replace-one and add/remove-one alike; the public records are not protected")


@METHODS.register_class
class PublicOnly(Method):
    name = "public-only"
    description = ("the public pre-training alone (train.init=public's network): never reads a member, ε = 0 for "
                   "them; the reference a private fine-tune must beat (target: model)")
    default_target = "model"
    report_order = 38  # after the private methods, before the non-private baselines
    config_keys = ()  # data, model, diffusion, train only (train.public_steps / public_seed decide the weights)
    # reference models would all be the same pre-training (the public split does not depend on the members)
    reference_models = False
    public_demand_key = "data.n_public"

    @classmethod
    def public_demand(cls, cfg) -> int:
        """Under ``data.public=none``: ``data.n_public`` records (0: as many as ``data.n_members``), as ``pool``."""
        return cfg.data.n_public or cfg.data.n_members

    def shared_trainings(self) -> list[str]:
        return [pretrain_dir(self.ctx).name]

    def train(self) -> None:
        ensure_pretrained(self.ctx)  # trained once under a lock and cached; nothing else to train

    def load_target(self, name=None):
        name = self.check_target(name)
        model = pretrained_denoiser(self.ctx)
        return self.make_target(name, model, note="public pre-training only (never read a member)")

    def privacy(self, target: str) -> dict:
        del target  # part of the Method interface; the one target is never trained on a member
        ctx = self.ctx
        return {"epsilon": 0.0, "delta": 0.0, "accountant": "none (by construction)",
                "neighbouring_relation": "replace-one", "basis": BASIS,
                "public_split": {"mode": ctx.split.public_mode, "n_public": len(ctx.split.public),
                                 "public_sha256": public_hash(ctx.split.public),
                                 "pretraining": pretrain_dir(ctx).name}}
