"""The one training loop of privbench: everything around an optimizer step, for every way of taking one.

:func:`train_loop` owns what every training shares: checkpoints and exact resume (models/checkpoint.py), the
learning-rate warm-up, the EMA, statistics read back once per ``log_every`` steps, the divergence check (a
non-finite loss is WorkFailed), torchrun's per-rank dropout seed and the progress bar. How one step computes the
gradients is a :class:`StepStrategy`: ``PlainStep`` (models/training.py), ``DPSGDStep`` (models/dp_sgd.py) and
``DistillStep`` (models/methods/dpsad.py). Every step draws from a generator seeded by (seed, step), or from OS
entropy under ``dp.noise_source=secure``, so a resumed run follows the uninterrupted trajectory.

The EMA is ``torch._foreach_lerp_(s, p, 1−d)``, not diffusers' ``EMAModel``: they differ for decays ≤ 0.5, which
:func:`ema_capped` gives short client runs (docs/benchmarks.md, "Measurements behind the code").
"""
from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..core import distributed, progress
from ..core.errors import WorkFailed
from ..core.io import append_log as log
from . import checkpoint as ckpt
from .flops import warn_if_bf16_emulated


def ema_capped(tcfg, total_steps: int):
    """``tcfg`` with the EMA decay capped at w^(1/``total_steps``), w = ``tcfg.ema_start_weight``, so the network the
    run starts from keeps at most w of the released average (docs/methods.md §0, "released weights")."""
    cap = float(tcfg.ema_start_weight) ** (1.0 / max(1, int(total_steps)))
    if tcfg.ema_decay <= cap:
        return tcfg
    capped = copy.copy(tcfg)  # a TrainConfig or any object with its fields
    capped.ema_decay = cap
    return capped


def start_weight(decay: float, steps: int) -> float:
    """The weight the EMA after ``steps`` updates of decay ``decay`` keeps on the network it started from."""
    return float(decay) ** max(0, int(steps))


class EMA:
    """Exponential moving average of the parameters (buffers copied); ``self.model`` is the average (eval mode).
    Not diffusers' EMAModel: see the module docstring."""

    def __init__(self, model: nn.Module, decay: float):
        self.decay = decay
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        ema_p = list(self.model.parameters())
        torch._foreach_lerp_(ema_p, [p.detach() for p in model.parameters()], 1.0 - self.decay)
        for eb, b in zip(self.model.buffers(), model.buffers()):
            eb.copy_(b)


@dataclass
class LoopRun:
    """What a step strategy may read of the run it steps."""
    model: nn.Module
    tcfg: object         # the train config (or any object with its fields)
    name: str
    seed: int
    device: torch.device
    steps: int
    run_dir: Path
    bf16: bool           # train.precision = bf16: the strategy runs its forward/backward under bf16 autocast
    channels_last: bool  # train.channels_last: the model is NHWC, inputs should be too


@dataclass
class Summary:
    """What a strategy makes of one log interval's statistics."""
    loss: float              # the mean loss: the loop's divergence check reads it
    shown: str = ""          # the loss text of log.txt ("" when the loss is private)
    postfix: str | None = None  # the progress bar's loss (None when private)
    private_log: Path | None = None  # where a private loss went instead (a divergence error points there)


class StepStrategy(ABC):
    """How one optimizer step computes the gradients; :func:`train_loop` does the rest."""

    #: appended to the progress bar's default ``train <name>``
    bar_suffix = ""

    def extra_modules(self) -> dict[str, nn.Module]:
        """Modules checkpointed and resumed with the model (e.g. DP-SAD's discriminator)."""
        return {}

    @abstractmethod
    def optimizer(self, model: nn.Module, tcfg) -> torch.optim.Optimizer:
        """The model's optimizer: the loop warms up its learning rate and steps it."""

    def state(self) -> dict:
        """Fields the checkpoint manifest carries besides the step."""
        return {}

    def check_resume(self, state: dict, spath: Path) -> None:
        """Refuse (BadInput) a checkpoint this strategy must not continue."""
        del state, spath  # the hook's arguments: by default every checkpoint of this name continues

    def optim_state(self, opt: torch.optim.Optimizer) -> dict:
        return opt.state_dict()

    def load_optim_state(self, opt: torch.optim.Optimizer, saved: dict) -> None:
        opt.load_state_dict(saved)

    def prepare(self, run: LoopRun) -> None:
        """Called once before the first step (after any resume): wrap the model, say what does not apply."""
        del run  # the hook's argument: by default the model runs as it is

    @abstractmethod
    def gradients(self, step: int, run: LoopRun) -> dict:
        """Set ``.grad`` of the optimizer's parameters for step ``step``; return the step's statistics (tensors
        stay on the device: the loop sums them and reads them back once per log interval)."""

    @abstractmethod
    def summarize(self, sums: dict, n: int, step: int, run: LoopRun) -> Summary:
        """The summary of a log interval of ``n`` steps ending at ``step`` (1-based) from the summed statistics."""


def run_dir_of(ckpt_dir: Path) -> Path:
    return ckpt_dir.parent if ckpt_dir.name == "checkpoints" else ckpt_dir


def warmup_schedule(opt: torch.optim.Optimizer, tcfg, start: int):
    """diffusers' constant-with-warm-up schedule, one epoch ahead (``last_epoch = start``): step s (from 0) gets
    lr·min(1, (s+1)/W) (tests/models/test_loop.py)."""
    # lazy: diffusers (seconds to import) only with a warm-up
    from diffusers.optimization import get_constant_schedule_with_warmup

    for group in opt.param_groups:
        group["initial_lr"] = tcfg.lr  # what the schedule scales (also after a resume loaded the saved groups)
    return get_constant_schedule_with_warmup(opt, tcfg.warmup or 0, last_epoch=start)


class _Loop:
    """One call of :func:`train_loop` (its state, split into steps short enough to read)."""

    def __init__(self, model, strategy: StepStrategy, tcfg, ckpt_dir: Path, name: str, seed: int, device,
                 steps: int):
        self.strategy, self.tcfg, self.ckpt_dir, self.name = strategy, tcfg, ckpt_dir, name
        device = torch.device(device)
        self.run = LoopRun(model, tcfg, name, seed, device, steps, run_dir_of(ckpt_dir),
                           getattr(tcfg, "precision", "fp32") == "bf16", bool(getattr(tcfg, "channels_last", False)))
        if self.run.bf16:
            warn_if_bf16_emulated(device, "train.precision")
        if distributed.is_main():
            ckpt_dir.mkdir(parents=True, exist_ok=True)
            ckpt.clean(ckpt_dir, name)
        distributed.barrier()  # no rank reads the checkpoint while rank 0 tidies it
        model.to(device)
        if self.run.channels_last:
            model.to(memory_format=torch.channels_last)
        self.ema = EMA(model, tcfg.ema_decay)
        self.opt = strategy.optimizer(model, tcfg)

    def modules(self) -> dict[str, nn.Module]:
        return {"model": self.run.model, "ema": self.ema.model, **self.strategy.extra_modules()}

    def resume(self) -> int:
        """The step to start from: 0, or that of an existing checkpoint (loaded)."""
        state = ckpt.read_state(self.ckpt_dir, self.name)
        if state is None:
            return 0
        self.strategy.check_resume(state, ckpt.checkpoint_paths(self.ckpt_dir, self.name)[2])
        ckpt.load_checkpoint_modules(self.ckpt_dir, self.name, self.modules(), self.run.device, state)
        start = int(state["step"])
        if start < self.run.steps:
            self.strategy.load_optim_state(self.opt, ckpt.load_checkpoint_optimizer(self.ckpt_dir, self.name, state))
            log(self.run.run_dir, f"[{self.name}] resumed from checkpoint at step {start}/{self.run.steps}")
        return start

    def checkpoint(self, step: int) -> None:
        """Weights, optimizer state and step as one unit (models/checkpoint.py); a no-op on ranks other than 0."""
        ckpt.save_checkpoint(self.ckpt_dir, self.name, ckpt.module_tensors(self.modules()),
                             {"step": step, "steps": self.run.steps, "ema_decay": self.ema.decay,
                              "ema_start_weight": start_weight(self.ema.decay, step), **self.strategy.state()},
                             optim_state=self.strategy.optim_state(self.opt), meta={"step": step})

    def report(self, sums: dict, n: int, step: int, lr: float, bar) -> None:
        """The log interval ending at ``step``: the divergence check, log.txt and the progress bar."""
        run = self.run
        s = self.strategy.summarize(sums, n, step, run)
        if not math.isfinite(s.loss):
            what = "non-finite loss" if s.private_log is not None else f"loss {s.loss}"
            where = s.private_log if s.private_log is not None else run.run_dir / "log.txt"
            log(run.run_dir, f"[{self.name}] training diverged ({what}) at step {step}; stopping")
            raise WorkFailed(f"training {self.name} diverged ({what}) at step {step}; see {where}")
        log(run.run_dir, f"[{self.name}] step {step}/{run.steps} {s.shown}lr {lr:.2e}")
        if s.postfix is not None:
            bar.set_postfix(loss=s.postfix)

    def steps(self, start: int, desc: str) -> None:
        run, tcfg, opt = self.run, self.tcfg, self.opt
        schedule = warmup_schedule(opt, tcfg, start)
        sums: dict = {}  # summed on the device; read back once per log interval
        n = 0
        bar = progress.bar(total=run.steps, initial=start, desc=desc, unit="step")
        for step in range(start, run.steps):
            lr = opt.param_groups[0]["lr"]
            opt.zero_grad(set_to_none=True)
            stats = self.strategy.gradients(step, run)
            opt.step()
            opt.zero_grad(set_to_none=True)
            schedule.step()
            self.ema.update(run.model)
            for k, v in stats.items():
                sums[k] = sums.get(k, 0.0) + (v.detach() if torch.is_tensor(v) else v)
            n += 1
            if (step + 1) % tcfg.log_every == 0 or step + 1 == run.steps:
                self.report(sums, n, step + 1, lr, bar)
                sums, n = {}, 0
            bar.update(1)
            if (step + 1) % tcfg.checkpoint_every == 0 or step + 1 == run.steps:
                self.checkpoint(step + 1)
        bar.close()


def train_loop(model: nn.Module, strategy: StepStrategy, tcfg, ckpt_dir: Path, *, name: str, seed: int, device,
               steps: int, desc: str | None = None) -> nn.Module:
    """Train ``model`` for ``steps`` steps of ``strategy``; return its EMA copy (eval mode).

    Checkpoints ``<name>.*`` in ``ckpt_dir`` every ``tcfg.checkpoint_every`` steps and at the end; an existing
    checkpoint is resumed and a finished one is loaded without training. Reads ``tcfg.lr``, ``warmup``,
    ``ema_decay``, ``log_every``, ``checkpoint_every`` and, when present, ``precision`` and ``channels_last``.
    Under torchrun rank 0 alone writes checkpoints and logs; every rank returns after the final checkpoint exists.
    """
    loop = _Loop(model, strategy, tcfg, ckpt_dir, name, seed, device, steps)
    start = loop.resume()
    if start >= steps:
        return loop.ema.model.eval()
    strategy.prepare(loop.run)
    if distributed.is_distributed():  # dropout draws from the default RNG: each rank its own stream (fixed by the seed)
        torch.manual_seed(distributed.rank_seed(seed, start))
    model.train()
    loop.steps(start, desc or f"train {name}{strategy.bar_suffix}")
    distributed.barrier()  # the other ranks may read the final checkpoint next (is_trained, load_ema)
    return loop.ema.model.eval()
