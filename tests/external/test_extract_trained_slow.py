"""extract on trained UNets: a tiny model trained on 8 records each duplicated 32x regenerates some of them (the
training-set count and the clique count); one trained on 256 unique records with the same delta, none. A diffusers
UNet2DModel trained with a plain Adam loop (not privbench's), attacked through ``privbench.attack``. The fake-target version of this claim
(tests/attacks/test_attack_extract.py) runs in ``make test``; this one trains (slow on CPU)."""
from __future__ import annotations

import pytest
import torch
from ext_helpers import digits_split, tiny_unet

import privbench

STEPS, BATCH = 400, 64


def _train(x: torch.Tensor, seed: int = 0):
    """Minibatch DDPM ε-loss with diffusers' DDPMScheduler.add_noise; the same steps for every training set."""
    from diffusers import DDPMScheduler

    unet = tiny_unet(seed).train()
    sched = DDPMScheduler(num_train_timesteps=1000)
    opt = torch.optim.Adam(unet.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(seed + 1)
    for _ in range(STEPS):
        x0 = x[torch.randint(0, len(x), (BATCH,), generator=g)]
        noise = torch.randn(x0.shape, generator=g)
        t = torch.randint(0, 1000, (BATCH,), generator=g)
        loss = torch.nn.functional.mse_loss(unet(sched.add_noise(x0, noise, t), t).sample, noise)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return unet.eval(), sched


@pytest.mark.slow
def test_a_trained_unet_regenerates_duplicated_records_and_none_of_256_unique_ones():
    (xm, _), (xn, _), (mem_idx, _) = digits_split(256, 16, seed=0)
    settings = dict(n_samples=64, sampler="ddim", steps=50, extract_delta=0.1)  # the automatic clique: 4, then 2
    duplicated = xm[:8].repeat(32, 1, 1, 1)                      # 8 records, each 32 times: 256 training rows
    unet, sched = _train(duplicated)
    dup = privbench.attack(privbench.wrap(unet, sched), duplicated, xn, attack="extract", **settings)
    assert dup.metrics["n_extracted"] >= 1 and dup.metrics["n_extracted_clique"] >= 1
    assert dup.metrics["filter_precision"] == 1.0
    for c in dup.figures["candidates"]:
        assert c["distance"] < 0.1
    unet, sched = _train(xm)                                     # 256 unique records, the same steps and delta
    uniq = privbench.attack(privbench.wrap(unet, sched), xm, xn, attack="extract", **settings)
    assert uniq.metrics["n_extracted"] == 0 and uniq.metrics["n_extracted_clique"] == 0
