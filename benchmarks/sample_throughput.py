"""Sampling overhead: privbench's sampler throughput ÷ the raw forward bound (steps × one forward pass).

Same model, batch and step count; the bound is what any sampler with that many network calls must spend on the
network alone (one no-grad forward of the whole batch per step, timed on a fixed input in the same run). The
ratio shows what privbench's sampling loop adds (scheduler step, noise draws, per-step bookkeeping). Goal: ≥ 0.9.
It does not show the step count's own cost: a 1000-step DDPM chain is 10× a 100-step DDIM chain at the same
ratio (``privbench sample --sampler ddim --steps N``).

Two measurements per sampler:

* in process: ``Target.sample`` on the preset's UNet with its seeded initial weights (throughput does not depend
  on the weights). The bound is the sampler's own network calls, each timed inside the run (steps × the mean
  forward time of that run), so machine load moves both sides alike; the bound from forward passes timed alone,
  back to back with the run, is printed beside it;
* end to end: a fresh ``privbench sample`` process (start-up, config, cache check, checkpoint loading, sampling,
  the PNG grid) on a run trained for one step in a temporary run store (same network), against the same bound.

Times are CPU seconds of the measuring process (of the child for end to end), with one thread: unlike wall time
they do not move with the load of other processes on a shared machine. Wall seconds are printed beside them.

    python benchmarks/sample_throughput.py [--preset tiny] [--n 64] [--sampler ddpm ddim] [--steps 100]
                                           [--repeats 2] [--no-cli]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PRIVBENCH_PROGRESS", "0")

from privbench.core.config import build_config  # noqa: E402
from privbench.models.method import RunContext  # noqa: E402
from privbench.models.sampling import ddim_timesteps  # noqa: E402
from privbench.models.target import Target  # noqa: E402


ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
       "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PRIVBENCH_PROGRESS": "0"}


def child(args: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of a fresh ``python -m privbench ARGS`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "privbench", *args], capture_output=True, text=True, env=ENV)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"privbench {' '.join(args)} failed:\n{r.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


class Timed(torch.nn.Module):
    """The model, with the CPU (or wall, on a GPU) seconds and the number of its forward calls counted."""

    def __init__(self, model, clock):
        super().__init__()
        self.model, self.clock, self.seconds, self.calls = model, clock, 0.0, 0

    def forward(self, *args):
        t0 = self.clock()
        out = self.model(*args)
        if out.is_cuda:
            torch.cuda.synchronize()
        self.seconds += self.clock() - t0
        self.calls += 1
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--n", type=int, default=64, help="samples per timed run (one batch)")
    ap.add_argument("--sampler", nargs="+", default=["ddpm", "ddim"], choices=["ddpm", "ddim"])
    ap.add_argument("--steps", type=int, default=None, help="DDIM steps (default: sample.ddim_steps of the preset)")
    ap.add_argument("--repeats", type=int, default=2, help="timed sampler runs (median ratio)")
    ap.add_argument("--no-cli", action="store_true", help="skip the end-to-end `privbench sample` measurement")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(1)
    cfg = build_config("centralized", preset=a.preset)
    dev = torch.device(a.device)
    ddim_steps = a.steps or cfg.sample.ddim_steps
    clock = time.process_time if dev.type == "cpu" else time.perf_counter  # CPU seconds: robust to machine load
    unit = "CPU s" if dev.type == "cpu" else "s"
    with tempfile.TemporaryDirectory() as tmp:
        ctx = RunContext(cfg, Path(tmp), dev)
        model = ctx.new_denoiser().to(dev).eval()
        timed = Timed(model, clock)
        tgt = Target("model", "centralized", timed, ctx.schedule, dev, ctx.num_classes,
                     meta={"shape": ctx.image_shape})
        T = ctx.schedule.num_timesteps
        g = torch.Generator().manual_seed(0)
        x = torch.randn((a.n, *ctx.image_shape), generator=g).to(dev)
        y = torch.randint(0, ctx.num_classes, (a.n,), generator=g).to(dev) if ctx.num_classes else None
        t = torch.full((a.n,), T // 2, dtype=torch.long, device=dev)

        def sync():
            if dev.type == "cuda":
                torch.cuda.synchronize()

        @torch.no_grad()
        def forward_s(k: int = 30) -> float:
            """Median seconds of one forward pass of the batch (k timed calls after 3 warm-up calls)."""
            for _ in range(3):
                model(x, t, y)
            times = []
            for _ in range(k):
                sync()
                t0 = clock()
                model(x, t, y)
                sync()
                times.append(clock() - t0)
            return statistics.median(times)

        print(f"preset={a.preset} n={a.n} device={dev} threads={torch.get_num_threads()} T={T} (times: {unit})")
        if not a.no_cli:  # a run trained for one step: the same network, seconds to train
            store = Path(tmp) / "runs"
            base = ["--method", "centralized", "--preset", a.preset, "--runs-dir", str(store), "--device", a.device,
                    "--set", "train.steps=1"]
            child(["train", *base])
        for sampler in a.sampler:
            steps = T if sampler == "ddpm" else len(ddim_timesteps(T - 1, 0, ddim_steps))
            tgt.sample(a.n, y, seed=0, sampler=sampler, ddim_steps=min(ddim_steps, 5), batch_size=a.n)  # warm-up
            alone, cpus, walls, nets, ratios, ratios_alone = [], [], [], [], [], []
            for r in range(a.repeats):
                alone.append(steps * forward_s())
                timed.seconds, timed.calls = 0.0, 0
                sync()
                t0, w0 = clock(), time.perf_counter()
                tgt.sample(a.n, y, seed=r, sampler=sampler, ddim_steps=ddim_steps, batch_size=a.n)
                sync()
                cpus.append(clock() - t0)
                walls.append(time.perf_counter() - w0)
                assert timed.calls == steps, (timed.calls, steps)
                nets.append(timed.seconds)
                ratios.append(nets[-1] / cpus[-1])
                ratios_alone.append(alone[-1] / cpus[-1])
            bound = statistics.median(alone)
            cpu, wall, net = statistics.median(cpus), statistics.median(walls), statistics.median(nets)
            print(f"{sampler} {steps} steps, {a.n} samples:")
            print(f"  in process: sampler {cpu:7.2f} {unit} ({a.n / cpu:7.2f} images/s; wall {wall:.2f} s); its "
                  f"{steps} forward calls {net:7.2f} {unit} ({a.n / net:7.2f} images/s)")
            print(f"  ratio {sampler} sampler/bound in process = {statistics.median(ratios):.3f}  (goal >= 0.9; "
                  f"bound = steps x forward, timed inside the run; median of {a.repeats}, range "
                  f"{min(ratios):.3f}-{max(ratios):.3f})")
            print(f"  forward timed alone: bound {bound:7.2f} {unit} ({a.n / bound:7.2f} images/s), sampler/bound "
                  f"{statistics.median(ratios_alone):.3f} (range {min(ratios_alone):.3f}-{max(ratios_alone):.3f}; "
                  f"moves with machine load)")
            if not a.no_cli:
                opts = ["--sampler", sampler] + (["--steps", str(ddim_steps)] if sampler == "ddim" else [])
                runs = [child(["sample", *base, "--n", str(a.n), *opts, "--out", str(Path(tmp) / "grid.png")])
                        for _ in range(max(1, a.repeats // 2))]
                c_cpu = statistics.median(c for c, _ in runs)
                c_wall = statistics.median(w for _, w in runs)
                print(f"  end to end (privbench sample process): {c_cpu:7.2f} CPU s ({a.n / c_cpu:7.2f} images/s; "
                      f"wall {c_wall:.2f} s)")
                print(f"  ratio {sampler} privbench sample/bound end to end = {bound / c_cpu:.3f}")
    print(f"process start-up (python -m privbench --version): {child(['--version'])[0]:.2f} CPU s")


if __name__ == "__main__":
    main()
