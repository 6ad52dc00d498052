"""Where an attack's forward pass spends its time on a GPU: the paper victim's UNet at an attack batch, profiled.

``gpu_check.sh``'s last line measures PIA in bf16 against the bf16 matmul bound. This script says why the ratio is
what it is: for the paper preset's UNet (untrained: speed does not depend on the weights) at ``--batch`` records it
times a no-grad forward in fp32 (TF32 convolutions, PyTorch's default), bf16 autocast, bf16 with channels_last, and
the bf16 forward compiled (inductor, on CUDA; with ``--cudagraphs`` also ``mode="reduce-overhead"``), and prints records/s,
the achieved FLOP rate (matmuls, convolutions and attention counted by ``torch.utils.flop_counter``) and its ratio
to the bf16 matmul rate measured in the same run. For the eager fp32 and bf16 forwards it profiles the kernels
(``torch.profiler``) and splits the device time into convolutions and matmuls, attention, normalisation,
elementwise work and the rest, with the ten costliest kernels.

    python benchmarks/gpu_forward_profile.py                           # paper preset, cuda
    python benchmarks/gpu_forward_profile.py --preset test --device cpu --batch 64   # dry run (seconds)
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PRIVBENCH_PROGRESS", "0")

from gpu_check import SHAPES, flops_str, say, sync, timed  # benchmarks/ is first on sys.path: the script's folder

from privbench.core.config import build_config
from privbench.core.threads import configure_threads
from privbench.models.flops import forward_flops, matmul_rate
from privbench.models.unet import build_denoiser

CATEGORIES = (  # first match wins; kernel names are lower-cased
    ("attention", ("flash", "fmha", "attention", "sdpa", "softmax")),
    ("conv/matmul", ("conv", "gemm", "xmma", "cutlass", "cudnn", "nvjet", "mkldnn", "addmm", "mm", "wgrad", "dgrad")),
    ("normalisation", ("group_norm", "groupnorm", "rowwisemoments", "layer_norm", "batch_norm", "welford", "norm")),
    ("elementwise", ("elementwise", "vectorized", "silu", "add", "mul", "copy", "cat", "triton", "upsample",
                     "index", "reduce", "fill")),
)


def category(name: str) -> str:
    low = name.lower()
    for cat, keys in CATEGORIES:
        if any(k in low for k in keys):
            return cat
    return "other"


def profile(fn, dev, top: int) -> None:
    """Device time (CPU time on a CPU) of one call of ``fn`` split by kernel category, and its costliest kernels."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    fn()
    sync(dev)
    with torch_profile(activities=activities) as prof:
        fn()
        sync(dev)
    rows = []
    for ev in prof.key_averages():
        t = ev.self_device_time_total if dev.type == "cuda" else ev.self_cpu_time_total
        if t > 0 and (dev.type != "cuda" or ev.device_type.name == "CUDA"):
            rows.append((t, ev.count, ev.key))
    total = sum(r[0] for r in rows) or 1
    by_cat: dict[str, float] = defaultdict(float)
    for t, _, key in rows:
        by_cat[category(key)] += t
    say("    " + ", ".join(f"{c} {t / 1e3:.2f} ms ({t / total:.0%})"
                          for c, t in sorted(by_cat.items(), key=lambda kv: -kv[1])) + f"; total {total / 1e3:.2f} ms")
    for t, n, key in sorted(rows, reverse=True)[:top]:
        say(f"    {t / 1e3:8.3f} ms  {n:4d}x  [{category(key)}] {key[:110]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true", help="skip the compiled forwards (on a CPU they are skipped: "
                                                              "inductor's C++ build takes minutes there)")
    ap.add_argument("--cudagraphs", action="store_true", help="also compile with mode='reduce-overhead'")
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_forward_profile: no CUDA device here; dry-run with --preset test --device cpu")
    threads = configure_threads(a.threads)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
    cfg = build_config("centralized", preset=a.preset)
    shape = SHAPES.get(a.preset, (1, 8, 8))
    torch.manual_seed(0)
    model = build_denoiser(cfg.model, shape[0], shape[1], 10).to(dev).eval()
    g = torch.Generator().manual_seed(1)
    x = (torch.rand((a.batch, *shape), generator=g) * 2 - 1).to(dev)
    y = torch.randint(0, 10, (a.batch,), generator=g).to(dev)
    t = torch.full((a.batch,), cfg.attack.t, dtype=torch.long, device=dev)
    n_mm = 8192 if dev.type == "cuda" else 512
    rate = matmul_rate(dev, torch.bfloat16, n=n_mm)
    flops = forward_flops(model, x, t, y, autocast=torch.bfloat16)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    say(f"gpu_forward_profile: preset={a.preset} device={dev} ({name}) torch={torch.__version__} threads={threads} "
        f"batch={a.batch} image={shape}; {flops / a.batch / 1e9:.3f} GFLOP/record forward; "
        f"bf16 matmul {n_mm}^3 {flops_str(rate)}")
    x_cl = x.contiguous(memory_format=torch.channels_last)
    model_cl = copy.deepcopy(model).to(memory_format=torch.channels_last)

    def forward(net, inp, bf16: bool):
        @torch.no_grad()
        def run():
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                net(inp, t, y)
        return run

    runs = [("fp32", forward(model, x, False)), ("bf16", forward(model, x, True)),
            ("bf16 channels_last", forward(model_cl, x_cl, True))]
    if not a.no_compile and dev.type == "cuda":
        runs.append(("bf16 compiled", forward(torch.compile(model), x, True)))
        if a.cudagraphs:
            runs.append(("bf16 compiled reduce-overhead", forward(torch.compile(model, mode="reduce-overhead"), x, True)))
    for label, fn in runs:
        t0 = time.perf_counter()
        fn()  # a second warm-up: compilation, autotuning and CUDA-graph capture end here
        s = timed(fn, dev, a.reps)
        warm = time.perf_counter() - t0 - s * a.reps
        say(f"[{label}] {s * 1e3:.2f} ms/batch, {a.batch / s:.0f} records/s, {flops_str(flops / s)} = "
            f"{flops / s / rate:.3f} of the bf16 matmul rate (warm-up {warm:.1f} s)")
        if label in ("fp32", "bf16"):
            profile(fn, dev, a.top)


if __name__ == "__main__":
    main()
