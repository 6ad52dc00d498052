"""``local``: the non-collaborative baseline — every client trains a full T-step class-conditional DDPM on its
own records alone (the same client split as ``pfdm``/``feddm``; no communication, no DP).

Targets ``client:K`` (default ``client:0``). ``fed.local_only_steps`` steps per client.
"""
from __future__ import annotations

from ...core.registry import METHODS
from ...core.seeding import sub_seed
from ..federated import FederatedMethod
from ..loop import ema_capped
from ..training import TrainData, is_trained, load_ema, train_denoiser
from ..unit_pool import TrainUnit, train_units

_TAG_LOCAL_ONLY = 0x1A10E


def client_seed(seed: int, m: int) -> int:
    return sub_seed(seed, _TAG_LOCAL_ONLY, m)


@METHODS.register_class
class Local(FederatedMethod):
    name = "local"
    description = "non-collaborative: each client trains a full DDPM alone, non-private (targets: client:K)"
    default_target = "client:0"
    report_order = 60
    target_order = ("client",)
    config_keys = ("clients", "fed.local_only_steps")
    provenance_keys = ("clients.n_clients",)

    def target_names(self) -> list[str]:
        return [f"client:{k}" for k in range(self.n_clients)]

    def train(self) -> None:
        """Every client's model: independent trainings, side by side where :mod:`privbench.models.unit_pool`
        allows (the numbers of one after another)."""
        steps, ckpts = self.cfg.fed.local_only_steps, self.ctx.ckpt_dir
        units = [TrainUnit(f"client{m}", steps) for m in range(self.n_clients)]
        train_units(self, [u for u in units if not is_trained(ckpts, u.name, u.steps)])

    def train_unit(self, unit: TrainUnit) -> None:
        ctx, steps = self.ctx, self.cfg.fed.local_only_steps
        m = int(unit.name.removeprefix("client"))
        if is_trained(ctx.ckpt_dir, unit.name, steps):
            return
        x, y = ctx.records(ctx.clients.clients[m])
        data = TrainData(x.to(ctx.device), y.to(ctx.device) if ctx.num_classes else None)
        ctx.log(f"[{unit.name}] local-only DDPM on its {len(x)} records, {steps} steps (non-private)")
        train_denoiser(ctx.initial_denoiser(), data, ctx.schedule.alphas_cumprod(), ema_capped(self.cfg.train, steps),
                       ctx.ckpt_dir, name=unit.name, seed=client_seed(self.cfg.seed, m), device=ctx.device,
                       steps=steps, desc=f"local client {m}")

    def load_target(self, name=None):
        name = self.check_target(name)
        k = int(name.split(":", 1)[1])
        model = load_ema(self.ctx.new_denoiser(), self.ctx.ckpt_dir, f"client{k}", self.ctx.device)
        tgt = self.make_target(name, model, note=f"non-private: client {k}'s model trained alone on its own records")
        tgt.meta["client"] = k
        return tgt
