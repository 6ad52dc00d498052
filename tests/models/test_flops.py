"""The hardware bound's FLOP count: pytorch-ddpm's CIFAR-10 UNet is 12.44 GFLOP per 32×32 forward; a training
step counts its backward too (the gradients of the weights, and of the activations only where they are needed)."""
from __future__ import annotations

import logging

import torch

from privbench.models import flops
from privbench.models.flops import (
    bound_rate,
    conv_rate,
    forward_flops,
    hardware_rates,
    matmul_rate,
    train_step_flops,
)
from privbench.models.pytorch_ddpm import PytorchDDPMConfig, PytorchDDPMUNet


def _ddpm_forward_flops(batch: int) -> int:
    """FLOPs of one forward of the CIFAR-10 victim on ``batch`` images, built on the meta device (no memory)."""
    cfg = PytorchDDPMConfig()
    with torch.device("meta"):
        net = PytorchDDPMUNet(cfg).eval()
        x = torch.zeros(batch, cfg.in_channels, cfg.img_size, cfg.img_size)
        t = torch.zeros(batch, dtype=torch.long)
    return forward_flops(net, x, t)


def test_pytorch_ddpm_cifar10_unet_flops():
    flops = _ddpm_forward_flops(1)
    assert abs(flops / 12.44e9 - 1) < 0.01, flops
    assert _ddpm_forward_flops(4) == 4 * flops  # per image: linear in the batch


def test_forward_flops_counts_a_linear_layer_exactly():
    lin = torch.nn.Linear(32, 16, bias=False)
    assert forward_flops(lin, torch.zeros(8, 32)) == 2 * 8 * 32 * 16


def test_matmul_rate_is_positive_and_finite():
    r = matmul_rate("cpu", torch.float32, n=64, seconds=0.01)
    assert 0 < r < float("inf")


def test_train_step_flops_counts_the_backward_exactly():
    net = torch.nn.Sequential(torch.nn.Linear(32, 16, bias=False), torch.nn.Tanh(), torch.nn.Linear(16, 8, bias=False))
    x = torch.zeros(4, 32)
    fwd = 2 * 4 * (32 * 16 + 16 * 8)
    # backward: both weights' gradients, and the activation gradient into the second layer only (x needs none)
    bwd = 2 * 4 * (32 * 16 + 16 * 8) + 2 * 4 * 16 * 8
    assert forward_flops(net, x) == fwd
    assert train_step_flops(net, lambda m, v: m(v).pow(2), x) == fwd + bwd
    assert all(p.grad is None for p in net.parameters())  # the counting step leaves no gradients behind


def test_conv_rates_and_the_bound_are_the_best_measured():
    assert 0 < conv_rate("cpu", torch.float32, channels=8, size=8, batch=2, seconds=0.01) < float("inf")
    rates = hardware_rates("cpu", torch.float32, n=32, conv=(8, 8, 2), seconds=0.01)
    assert set(rates) == {"matmul", "conv", "conv_nhwc"}
    name, rate = bound_rate(rates)
    assert rate == max(rates.values()) and rates[name] == rate


def test_bf16_on_a_cpu_without_bf16_units_warns_once_per_setting(monkeypatch, caplog):
    monkeypatch.setattr(flops, "_WARNED", set())
    monkeypatch.setattr(flops, "cpu_has_bf16_units", lambda: False)
    with caplog.at_level(logging.WARNING, logger="privbench.models.flops"):
        flops.warn_if_bf16_emulated("cpu", "train.precision")
        flops.warn_if_bf16_emulated("cpu", "train.precision")
        flops.warn_if_bf16_emulated("cpu", "attack.precision")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "train.precision=bf16" in lines[0] and "attack.precision=bf16" in lines[1]
    assert "slower than fp32" in lines[0]


def test_bf16_on_bf16_units_or_off_the_cpu_does_not_warn(monkeypatch, caplog):
    monkeypatch.setattr(flops, "_WARNED", set())
    monkeypatch.setattr(flops, "cpu_has_bf16_units", lambda: True)
    with caplog.at_level(logging.WARNING, logger="privbench.models.flops"):
        flops.warn_if_bf16_emulated("cpu", "train.precision")
    monkeypatch.setattr(flops, "cpu_has_bf16_units", lambda: False)
    with caplog.at_level(logging.WARNING, logger="privbench.models.flops"):
        flops.warn_if_bf16_emulated("meta", "attack.precision")
    assert not caplog.records


def test_a_bf16_query_on_the_cpu_goes_through_the_check(monkeypatch):
    from privbench.core.schedule import Schedule
    from privbench.models import target as target_mod

    seen = []
    monkeypatch.setattr(target_mod, "warn_if_bf16_emulated", lambda dev, setting: seen.append((dev.type, setting)))
    schedule = Schedule(10, 1e-4, 0.02, "linear", "fixed_small")
    tgt = target_mod.Target("t", "centralized", torch.nn.Identity(), schedule, "cpu", 0)
    with tgt.query_precision("fp32"):
        pass
    with tgt.query_precision("bf16"):
        pass
    assert seen == [("cpu", "attack.precision")]
