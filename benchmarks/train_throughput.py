"""Training-loop overhead: privbench's loop throughput ÷ raw forward+backward+step throughput.

Same model, batch and optimizer; the raw loop does only what any DDPM step must (forward, loss, backward,
AdamW step) on a fixed pre-built batch. The ratio shows what privbench's loop adds (per-step RNG, batch
gather, EMA, LR warm-up, logging, grad clipping). Goal: ≥ 0.9.

    python benchmarks/train_throughput.py [--preset tiny] [--steps 150] [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PRIVBENCH_PROGRESS", "0")

from privbench.core.config import build_config  # noqa: E402
from privbench.core.threads import configure_threads  # noqa: E402
from privbench.models.method import RunContext  # noqa: E402
from privbench.models.training import TrainData, train_denoiser  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--steps", type=int, default=150, help="steps per timed run")
    ap.add_argument("--repeats", type=int, default=5, help="back-to-back raw/loop pairs (median ratio)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: privbench's policy)")
    a = ap.parse_args()
    configure_threads(a.threads)
    cfg = build_config("centralized", preset=a.preset, overrides=[("train.steps", a.steps),
                                                                  ("train.checkpoint_every", 10 ** 9)])
    dev = torch.device(a.device)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = RunContext(cfg, Path(tmp), dev)
        x, y = ctx.records(ctx.split.members)
        x, y = x.to(dev), y.to(dev)
        ac = ctx.schedule.alphas_cumprod(dev)
        B = cfg.train.batch_size

        # raw: forward + loss + backward + AdamW step on one fixed batch
        model = ctx.new_denoiser().to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
        xb, yb = x[:B], y[:B]
        t = torch.randint(0, 1000, (B,), device=dev)
        noise = torch.randn_like(xb)
        a_t = ac[t].view(-1, 1, 1, 1)
        xt = a_t.sqrt() * xb + (1 - a_t).sqrt() * noise

        def raw_step():
            loss = ((model(xt, t, yb) - noise) ** 2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        for _ in range(10):
            raw_step()

        def sync():
            if dev.type == "cuda":
                torch.cuda.synchronize()

        # raw and loop timed back to back, `--repeats` times; the median ratio cancels slow drifts of machine load
        raws, loops, ratios = [], [], []
        for r in range(a.repeats):
            sync()
            t0 = time.perf_counter()
            for _ in range(a.steps):
                raw_step()
            sync()
            raws.append(a.steps / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            train_denoiser(ctx.new_denoiser(), TrainData(x, y), ac, cfg.train, Path(tmp) / f"checkpoints{r}",
                           name="m", seed=0, device=dev)
            sync()
            loops.append(a.steps / (time.perf_counter() - t0))
            ratios.append(loops[-1] / raws[-1])
        raw, loop = statistics.median(raws), statistics.median(loops)
    print(f"preset={a.preset} batch={B} device={dev} threads={torch.get_num_threads()}")
    print(f"raw forward+backward+step: {raw:8.1f} steps/s")
    print(f"privbench training loop:   {loop:8.1f} steps/s (incl. one final checkpoint)")
    print(f"ratio loop/raw = {statistics.median(ratios):.3f}  (goal >= 0.9; median of {a.repeats} back-to-back "
          f"pairs, range {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
