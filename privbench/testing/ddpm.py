"""A tiny pixel-space DDPM built and trained with plain diffusers + torch code (not privbench's training loop): a
UNet2DModel on 8×8 digits trained until it memorises 32 records, and the same architecture at random
initialisation — the outside models of the external-model tests and a target a plug-in author can audit."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..data.base import load_dataset

MEMORIZE_STEPS = 500  # full-batch Adam steps on 32 records: PIA AUC ≈ 1 at t = 200 (about 40 s on one CPU thread)


def tiny_unet(seed: int = 0, *, channels: int = 1, size: int = 8, block_out_channels=(16, 32),
              num_class_embeds: int | None = None):
    """A diffusers UNet2DModel small enough to train on CPU in seconds, seeded."""
    # lazy: diffusers loads only when a tiny model is built
    from diffusers import UNet2DModel

    torch.manual_seed(seed)
    n = len(block_out_channels)
    return UNet2DModel(sample_size=size, in_channels=channels, out_channels=channels,
                       block_out_channels=tuple(block_out_channels), layers_per_block=1,
                       down_block_types=("DownBlock2D",) * n, up_block_types=("UpBlock2D",) * n,
                       norm_num_groups=8, num_class_embeds=num_class_embeds).eval()


def train_memorizing_unet(x: torch.Tensor, steps: int = MEMORIZE_STEPS, seed: int = 0):
    """The DDPM objective with diffusers' own DDPMScheduler.add_noise and a plain Adam loop, full batch; returns
    (UNet in eval mode, scheduler)."""
    # lazy: diffusers loads only when a tiny model is built
    from diffusers import DDPMScheduler

    unet = tiny_unet(seed).train()
    sched = DDPMScheduler(num_train_timesteps=1000)
    opt = torch.optim.Adam(unet.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(seed + 1)
    for _ in range(steps):
        noise = torch.randn(x.shape, generator=g)
        t = torch.randint(0, 1000, (len(x),), generator=g)
        loss = torch.nn.functional.mse_loss(unet(sched.add_noise(x, noise, t), t).sample, noise)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return unet.eval(), sched


def digits_split(n_members: int = 32, n_nonmembers: int = 32, seed: int = 0):
    """Disjoint member / non-member digits records (8×8, [−1, 1]) with labels, and their dataset indices."""
    x, y = load_dataset("digits")
    perm = np.random.default_rng(seed).permutation(len(y))
    m, n = perm[:n_members], perm[n_members:n_members + n_nonmembers]
    return (x[m], y[m]), (x[n], y[n]), (m, n)


def write_npz(path: Path, x: torch.Tensor, y: torch.Tensor | None = None) -> Path:
    """A record file privbench reads (``images`` N×C×H×W in [−1, 1], optional ``labels``)."""
    arrays = {"images": x.numpy().astype(np.float32)}
    if y is not None:
        arrays["labels"] = y.numpy().astype(np.int64)
    np.savez(path, **arrays)
    return Path(path)


def tiny_ddpm(out, steps: int = MEMORIZE_STEPS) -> Path:
    """Write the tiny DDPM to ``out`` (docs/api.md §9); returns ``out``. ``privbench attack --model OUT/pipeline
    --members OUT/members.npz --nonmembers OUT/nonmembers.npz`` audits it."""
    # lazy: diffusers loads only when a tiny model is built
    from diffusers import DDPMPipeline

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (xm, ym), (xn, yn), _ = digits_split(32, 32, seed=0)
    unet, sched = train_memorizing_unet(xm, steps)
    DDPMPipeline(unet=unet, scheduler=sched).save_pretrained(str(out / "pipeline"))
    DDPMPipeline(unet=tiny_unet(0), scheduler=sched).save_pretrained(str(out / "random"))
    write_npz(out / "members.npz", xm, ym)
    write_npz(out / "nonmembers.npz", xn, yn)
    return out
