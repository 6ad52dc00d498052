"""FLOPs of a forward pass or a training step and the device's measured matmul and convolution rates: the
hardware bound of a loop.

A loop's hardware bound is (the device's achieved FLOP rate) ÷ (FLOPs per item), both measured in the same run
(docs/scaling.md §4).
"""
from __future__ import annotations

import contextlib
import logging
import time

import torch

LOG = logging.getLogger(__name__)
_WARNED: set[str] = set()


def forward_flops(fn, *inputs, autocast: torch.dtype | None = None) -> int:
    """FLOPs of one call ``fn(*inputs)`` without gradients (``autocast``: under that autocast dtype)."""
    from torch.utils.flop_counter import FlopCounterMode  # lazy: torch.utils.flop_counter only when FLOPs are counted

    device = next((x.device for x in inputs if torch.is_tensor(x)), torch.device("cpu"))
    cast = torch.autocast(device.type, dtype=autocast) if autocast is not None else contextlib.nullcontext()
    with FlopCounterMode(display=False) as fc, torch.no_grad(), cast:
        fn(*inputs)
    return int(fc.get_total_flops())


def train_step_flops(model: torch.nn.Module, loss_fn, *inputs, autocast: torch.dtype | None = None) -> int:
    """FLOPs of one training step's forward and backward: ``loss_fn(model, *inputs)`` (per-record losses or a
    scalar), its mean and the backward through ``model`` (``autocast``: the forward under that autocast dtype).
    The optimizer's update is elementwise and not counted. The gradients it leaves are cleared."""
    from torch.utils.flop_counter import FlopCounterMode  # lazy: torch.utils.flop_counter only when FLOPs are counted

    device = next((x.device for x in inputs if torch.is_tensor(x)), torch.device("cpu"))
    cast = torch.autocast(device.type, dtype=autocast) if autocast is not None else contextlib.nullcontext()
    with FlopCounterMode(display=False) as fc:
        with cast:
            loss = loss_fn(model, *inputs)
        loss.float().mean().backward()
    model.zero_grad(set_to_none=True)
    return int(fc.get_total_flops())


def cpu_has_bf16_units() -> bool:
    """Whether this CPU runs bf16 matmuls and convolutions natively (AVX-512-BF16 or AMX: oneDNN's own check)."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def warn_if_bf16_emulated(device, setting: str) -> None:
    """Warn once per ``setting`` when it asks for bf16 on a CPU without bf16 units: there oneDNN emulates bf16
    through fp32, and the run can be many times slower than in fp32 (what it computes is unchanged)."""
    if torch.device(device).type != "cpu" or setting in _WARNED or cpu_has_bf16_units():
        return
    _WARNED.add(setting)
    LOG.warning("%s=bf16 on a CPU without bf16 units (%s; no AVX-512-BF16 or AMX): bf16 is emulated and can be many "
                "times slower than fp32 here; fp32 is the faster choice on this machine", setting, torch.backends.cpu.get_cpu_capability())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best_rate(op, flops: float, device: torch.device, seconds: float) -> float:
    """FLOP/s of ``op()`` (``flops`` per call): the best of three timings of at least ``seconds``/3 each, the
    repetitions doubled until a timing is that long, after one warm-up call."""
    op()
    _sync(device)
    best, reps = 0.0, 1
    for _ in range(3):
        while True:
            t0 = time.perf_counter()
            for _ in range(reps):
                op()
            _sync(device)
            el = time.perf_counter() - t0
            if el >= seconds / 3 or reps >= 1 << 16:
                break
            reps *= 2
        best = max(best, flops * reps / el)
    return best


def matmul_rate(device, dtype: torch.dtype = torch.float32, n: int = 1024, seconds: float = 0.5) -> float:
    """Achieved FLOP/s of an n×n @ n×n matmul in ``dtype`` on ``device`` (2n³ FLOPs per product; the best of
    repeated timings of at least ``seconds`` each, after a warm-up)."""
    device = torch.device(device)
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    return _best_rate(lambda: a @ b, 2 * n ** 3, device, seconds)


def conv_rate(device, dtype: torch.dtype = torch.float32, channels: int = 64, size: int = 16, batch: int = 64,
              channels_last: bool = False, seconds: float = 0.5) -> float:
    """Achieved FLOP/s of a 3×3 convolution, ``channels`` in and out, padding 1, on ``batch`` images of
    ``size``×``size`` in ``dtype`` (NHWC when ``channels_last``): 2·9·C²·size²·batch FLOPs per call, timed as
    :func:`matmul_rate`. A UNet's convolutions are its FLOPs; their rate can differ from a matmul's either way."""
    device = torch.device(device)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(batch, channels, size, size, generator=g).to(device=device, dtype=dtype, memory_format=fmt)
    w = torch.randn(channels, channels, 3, 3, generator=g).to(device=device, dtype=dtype, memory_format=fmt)
    flops = 2 * 9 * channels ** 2 * size ** 2 * batch
    return _best_rate(lambda: torch.nn.functional.conv2d(x, w, padding=1), flops, device, seconds)


def hardware_rates(device, dtype: torch.dtype, *, n: int, conv: tuple[int, int, int],
                   seconds: float = 0.5) -> dict[str, float]:
    """This device's measured FLOP/s in ``dtype``: an n×n matmul and a 3×3 convolution (``conv`` = channels,
    size, batch) in NCHW and NHWC. A loop's bound is the best of them (:func:`bound_rate`)."""
    c, size, batch = conv
    return {"matmul": matmul_rate(device, dtype, n, seconds),
            "conv": conv_rate(device, dtype, c, size, batch, False, seconds),
            "conv_nhwc": conv_rate(device, dtype, c, size, batch, True, seconds)}


def bound_rate(rates: dict[str, float]) -> tuple[str, float]:
    """The best of :func:`hardware_rates`' rates: (its name, FLOP/s)."""
    name = max(rates, key=rates.get)
    return name, rates[name]
