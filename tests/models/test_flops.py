"""The hardware bound's FLOP count: pytorch-ddpm's CIFAR-10 UNet is 12.44 GFLOP per 32×32 forward."""
from __future__ import annotations

import torch

from privbench.models.flops import forward_flops, matmul_rate, pytorch_ddpm_forward_flops


def test_pytorch_ddpm_cifar10_unet_flops():
    flops = pytorch_ddpm_forward_flops()
    assert abs(flops / 12.44e9 - 1) < 0.01, flops
    assert pytorch_ddpm_forward_flops(batch=4) == 4 * flops  # per image: linear in the batch


def test_forward_flops_counts_a_linear_layer_exactly():
    lin = torch.nn.Linear(32, 16, bias=False)
    assert forward_flops(lin, torch.zeros(8, 32)) == 2 * 8 * 32 * 16


def test_matmul_rate_is_positive_and_finite():
    r = matmul_rate("cpu", torch.float32, n=64, seconds=0.01)
    assert 0 < r < float("inf")
