"""``feddm``: FedAvg of a class-conditional DDPM over the clients (FedDM-vanilla, docs/methods.md §3), non-private.

The global weights (raw + EMA) are checkpointed after every round (``global.safetensors``) and a round's per-client
checkpoints removed once its average is saved, so an interrupted run resumes at the last finished round (or inside
it, client by client).
"""
from __future__ import annotations

import copy
import dataclasses

import torch

from ...core.registry import METHODS
from ...core.seeding import sub_seed
from .. import checkpoint as ckpt
from ..federated import FederatedMethod
from ..loop import ema_capped
from ..training import TrainData, diffusion_loss, load_ema, train_denoiser

_TAG_FED = 0xFEDA


def fedavg(states: list[dict[str, torch.Tensor]], weights: list[float]) -> dict[str, torch.Tensor]:
    """Σ_m w_m·state_m / Σ w for floating tensors (others copied from the first state)."""
    total = float(sum(weights))
    out = {}
    for k, v0 in states[0].items():
        if torch.is_floating_point(v0):
            acc = torch.zeros_like(v0, dtype=torch.float64)
            for s, w in zip(states, weights):
                acc += s[k].double() * (w / total)
            out[k] = acc.to(v0.dtype)
        else:
            out[k] = v0.clone()
    return out


def _prox_loss(global_params: list[torch.Tensor], mu: float):
    def loss_fn(model, x0, y, extra, t, noise, ac):
        base = diffusion_loss(model, x0, y, extra, t, noise, ac)
        prox = sum(((p - g) ** 2).sum() for p, g in zip(model.parameters(), global_params))
        return base + 0.5 * mu * prox  # added to every record's loss: the batch mean gets exactly μ/2·‖w − w_g‖²

    return loss_fn


@METHODS.register_class
class FedDM(FederatedMethod):
    name = "feddm"
    description = "FedAvg of a class-conditional DDPM over the clients, non-private (target: global)"
    default_target = "global"
    report_order = 50
    target_order = ("global",)
    config_keys = ("clients", "fed.rounds", "fed.local_steps", "fed.prox_mu")

    def target_names(self) -> list[str]:
        return ["global"]

    def train(self) -> None:
        ctx, f = self.ctx, self.cfg.fed
        wpath = ckpt.checkpoint_paths(ctx.ckpt_dir, "global")[0]
        ac = ctx.schedule.alphas_cumprod()
        clients = ctx.clients.clients
        sizes = [len(c) for c in clients]
        data = []
        for idx in clients:
            x, y = ctx.records(idx)
            data.append(TrainData(x.to(ctx.device), y.to(ctx.device) if ctx.num_classes else None))

        model = ctx.initial_denoiser().to(ctx.device)
        ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
        start = 0
        ckpt.clean(ctx.ckpt_dir, "global")
        state = ckpt.read_state(ctx.ckpt_dir, "global")
        if state is not None:
            t = ckpt.load_tensors(ctx.ckpt_dir, "global", ctx.device, state)
            ckpt.load_into(model, {k[6:]: v for k, v in t.items() if k.startswith("model.")}, wpath)
            ema = {k[4:]: v for k, v in t.items() if k.startswith("ema.")}
            start = int(state["round"])
            if start >= f.rounds:
                return
            ctx.log(f"[global] resuming FedAvg at round {start}/{f.rounds}")
        decay = ema_capped(self.cfg.train, f.rounds * f.local_steps).ema_decay ** f.local_steps
        for r in range(start, f.rounds):
            tcfg = dataclasses.replace(self.cfg.train, warmup=self.cfg.train.warmup if r == 0 else 0)
            client_states = []
            for m in range(len(clients)):
                local = copy.deepcopy(model)
                loss_fn = None
                if f.prox_mu > 0:
                    loss_fn = _prox_loss([p.detach().clone() for p in model.parameters()], f.prox_mu)
                train_denoiser(local, data[m], ac, tcfg, ctx.ckpt_dir, name=f"fed_r{r:03d}_c{m}",
                               seed=sub_seed(self.cfg.seed, _TAG_FED, r, m), device=ctx.device, steps=f.local_steps,
                               loss_fn=loss_fn, desc=f"feddm round {r + 1}/{f.rounds} client {m}")
                client_states.append({k: v.detach().clone() for k, v in local.state_dict().items()})
            avg = fedavg(client_states, sizes)
            model.load_state_dict(avg)
            for k, v in avg.items():
                if torch.is_floating_point(v):
                    ema[k] = torch.lerp(ema[k], v, 1.0 - decay)
                else:
                    ema[k] = v.clone()
            tensors = {f"model.{k}": v for k, v in avg.items()}
            tensors.update({f"ema.{k}": v for k, v in ema.items()})
            ckpt.save_checkpoint(ctx.ckpt_dir, "global", tensors, {"round": r + 1, "rounds": f.rounds, "step": r + 1},
                                 meta={"round": r + 1})  # weights and round as one unit
            for m in range(len(clients)):
                for suffix in (".safetensors", ".optim.pt", ".state.json"):
                    (ctx.ckpt_dir / f"fed_r{r:03d}_c{m}{suffix}").unlink(missing_ok=True)
            ctx.log(f"[global] FedAvg round {r + 1}/{f.rounds} done (client sizes {sizes})")

    def load_target(self, name=None):
        name = self.check_target(name)
        model = load_ema(self.ctx.new_denoiser(), self.ctx.ckpt_dir, "global", self.ctx.device)
        return self.make_target(name, model, note="non-private: FedAvg DDPM over the clients")
