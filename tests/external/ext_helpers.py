"""Helpers of the external-model tests: tiny diffusers UNets, record files, the CLI, a pickle payload."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch
from click.testing import CliRunner


def tiny_unet(seed: int = 0, *, channels: int = 1, size: int = 8, block_out_channels=(16, 32),
              num_class_embeds: int | None = None):
    from diffusers import UNet2DModel

    torch.manual_seed(seed)
    n = len(block_out_channels)
    return UNet2DModel(sample_size=size, in_channels=channels, out_channels=channels,
                       block_out_channels=tuple(block_out_channels), layers_per_block=1,
                       down_block_types=("DownBlock2D",) * n, up_block_types=("UpBlock2D",) * n,
                       norm_num_groups=8, num_class_embeds=num_class_embeds).eval()


MEMORIZE_STEPS = 500  # full-batch Adam steps on 32 records: PIA AUC ≈ 1 at t = 200 (≈ 40 s on one CPU thread)


def train_memorizing_unet(x: torch.Tensor, steps: int = MEMORIZE_STEPS, seed: int = 0):
    """The DDPM objective with diffusers' own DDPMScheduler.add_noise and a plain Adam loop."""
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
    """Disjoint member / non-member digits records (8×8, [−1, 1]) with labels."""
    from privbench import load_dataset

    x, y = load_dataset("digits")
    perm = np.random.default_rng(seed).permutation(len(y))
    m, n = perm[:n_members], perm[n_members:n_members + n_nonmembers]
    return (x[m], y[m]), (x[n], y[n]), (m, n)


def write_npz(path: Path, x: torch.Tensor, y: torch.Tensor | None = None) -> Path:
    arrays = {"images": x.numpy().astype(np.float32)}
    if y is not None:
        arrays["labels"] = y.numpy().astype(np.int64)
    np.savez(path, **arrays)
    return path


def cli(*args):
    """Run the privbench CLI in-process; (exit code, stdout, stderr)."""
    from privbench.cli import main

    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


class _Payload:
    """Unpickling this runs ``open(marker, 'w')`` — the test proves it never happens."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def write_pickle_payload(path: Path, marker: Path, torch_format: bool = False) -> Path:
    obj = {"net_model": _Payload(marker), "ema_model": _Payload(marker)}
    if torch_format:
        torch.save(obj, path)
    else:
        with open(path, "wb") as fh:
            pickle.dump(obj, fh)
    return path


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).rglob("*"))


def write_fake_cifar10(root: Path, per_batch: int = 4, seed: int = 0) -> np.ndarray:
    """A tiny ``cifar-10-batches-py/`` in the python tarball's format (5 training batches of dict pickles,
    data = N×3072 uint8 as R, G, B planes); returns the training images N×3×32×32 in file order."""
    rng = np.random.default_rng(seed)
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    xs = []
    for b in range(1, 6):
        x = rng.integers(0, 256, size=(per_batch, 3, 32, 32), dtype=np.uint8)
        y = [int(v) for v in rng.integers(0, 10, size=per_batch)]
        with open(folder / f"data_batch_{b}", "wb") as fh:
            pickle.dump({"labels": y, "data": x.reshape(per_batch, 3072)}, fh, protocol=2)
        xs.append(x)
    with open(folder / "test_batch", "wb") as fh:
        pickle.dump({"labels": [0], "data": np.zeros((1, 3072), dtype=np.uint8)}, fh, protocol=2)
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)]}, fh, protocol=2)
    return np.concatenate(xs)
