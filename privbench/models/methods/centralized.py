"""``centralized``: a non-private class-conditional DDPM trained on the whole member split."""
from __future__ import annotations

from ...core.registry import METHODS
from ..loop import ema_capped
from ..method import Method
from ..training import TrainData, is_trained, load_ema, train_denoiser


@METHODS.register_class
class Centralized(Method):
    name = "centralized"
    description = "non-private class-conditional DDPM on all member data (target: model)"
    default_target = "model"
    report_order = 40
    config_keys = ()  # data, model, diffusion, train only

    def train(self) -> None:
        ctx = self.ctx
        if is_trained(ctx.ckpt_dir, "model", self.cfg.train.steps):
            return
        x, y = self.training_data()
        data = TrainData(x.to(ctx.device), y.to(ctx.device) if ctx.num_classes else None)
        ctx.log(f"[model] training on {len(x)} member records, {self.cfg.train.steps} steps")
        tcfg = self.cfg.train
        if tcfg.init != "scratch":  # a fine-tune of the public pre-training: its EMA must not release the start
            tcfg = ema_capped(tcfg, tcfg.steps)
        train_denoiser(ctx.initial_denoiser(), data, ctx.schedule.alphas_cumprod(), tcfg, ctx.ckpt_dir,
                       name="model", seed=self.cfg.seed, device=ctx.device, desc="train centralized")

    def load_target(self, name=None):
        name = self.check_target(name)
        model = load_ema(self.ctx.new_denoiser(), self.ctx.ckpt_dir, "model", self.ctx.device)
        return self.make_target(name, model, note="non-private")
