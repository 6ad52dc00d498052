"""FLOPs of a forward pass and the device's measured matmul rate: the hardware bound of a loop.

A loop's hardware bound is (the device's achieved FLOP rate) ÷ (FLOPs per item). The FLOPs are counted by
``torch.utils.flop_counter`` (matmuls, convolutions, attention; 2 FLOPs per multiply-add; elementwise work is
not counted), the rate is that of a large square matmul in the same dtype on the same device, measured in the
same run (benchmarks/attack_throughput.py, benchmarks/gpu_check.py; docs/scaling.md §4).
"""
from __future__ import annotations

import contextlib
import time

import torch

from .pytorch_ddpm import PytorchDDPMConfig, PytorchDDPMUNet


def forward_flops(fn, *inputs, autocast: torch.dtype | None = None) -> int:
    """FLOPs of one call ``fn(*inputs)`` without gradients (``autocast``: under that autocast dtype)."""
    from torch.utils.flop_counter import FlopCounterMode  # lazy: torch.utils.flop_counter only when FLOPs are counted

    device = next((x.device for x in inputs if torch.is_tensor(x)), torch.device("cpu"))
    cast = torch.autocast(device.type, dtype=autocast) if autocast is not None else contextlib.nullcontext()
    with FlopCounterMode(display=False) as fc, torch.no_grad(), cast:
        fn(*inputs)
    return int(fc.get_total_flops())


def pytorch_ddpm_forward_flops(batch: int = 1, **config) -> int:
    """FLOPs of one forward of pytorch-ddpm's UNet (``config``: PytorchDDPMConfig fields; default: the CIFAR-10
    victim, 35.7M parameters, 32×32) on ``batch`` images — built on the meta device: no memory, no arithmetic."""
    cfg = PytorchDDPMConfig(**config)
    with torch.device("meta"):
        net = PytorchDDPMUNet(cfg).eval()
        x = torch.zeros(batch, cfg.in_channels, cfg.img_size, cfg.img_size)
        t = torch.zeros(batch, dtype=torch.long)
    return forward_flops(net, x, t)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_rate(device, dtype: torch.dtype = torch.float32, n: int = 1024, seconds: float = 0.5) -> float:
    """Achieved FLOP/s of an n×n @ n×n matmul in ``dtype`` on ``device`` (2n³ FLOPs per product; the best of
    repeated timings of at least ``seconds`` each, after a warm-up)."""
    device = torch.device(device)
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    a @ b
    _sync(device)
    best, reps = 0.0, 1
    for _ in range(3):
        while True:
            t0 = time.perf_counter()
            for _ in range(reps):
                a @ b
            _sync(device)
            el = time.perf_counter() - t0
            if el >= seconds / 3 or reps >= 1 << 16:
                break
            reps *= 2
        best = max(best, 2 * n ** 3 * reps / el)
    return best
