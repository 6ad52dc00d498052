"""Helpers of the untrusted-input fault tests: tiny diffusers UNet folders and pytorch-ddpm checkpoints
to damage, digits records, and ``attack --model`` run in-process."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from fault_helpers import cli, entries


def tiny_unet(seed: int = 0, size: int = 8):
    from diffusers import UNet2DModel

    torch.manual_seed(seed)
    return UNet2DModel(sample_size=size, in_channels=1, out_channels=1, block_out_channels=(16, 32),
                       layers_per_block=1, down_block_types=("DownBlock2D",) * 2, up_block_types=("UpBlock2D",) * 2,
                       norm_num_groups=8).eval()


def unet_folder(path: Path, *, edit_weights=None, edit_config=None) -> Path:
    """A ``UNet2DModel.save_pretrained`` folder; ``edit_weights(state_dict)`` / ``edit_config(dict)`` damage it."""
    from safetensors.torch import load_file, save_file

    tiny_unet().save_pretrained(str(path))
    if edit_weights is not None:
        f = path / "diffusion_pytorch_model.safetensors"
        sd = dict(load_file(str(f)))
        edit_weights(sd)
        save_file(sd, str(f))
    if edit_config is not None:
        cfg = json.loads((path / "config.json").read_text())
        edit_config(cfg)
        (path / "config.json").write_text(json.dumps(cfg))
    return path


def digits_records(root: Path, n: int = 8) -> tuple[Path, Path]:
    """Disjoint 8×8 digits members / non-members as .npz (float N×1×8×8 in [-1, 1])."""
    from privbench import load_dataset

    x, y = load_dataset("digits")
    m, k = root / "m.npz", root / "n.npz"
    np.savez(m, images=x[:n].numpy().astype(np.float32), labels=y[:n].numpy())
    np.savez(k, images=x[n:2 * n].numpy().astype(np.float32), labels=y[n:2 * n].numpy())
    return m, k


def attack_model(model, members, nonmembers, runs: Path, *extra, attack: str = "loss"):
    """``privbench attack --model`` in-process; returns the Run (exit code, stderr lines)."""
    return cli("attack", "--model", model, "--members", members, "--nonmembers", nonmembers, "--attack", attack,
               "--runs-dir", runs, "--device", "cpu", *extra)


def nothing_written(runs: Path) -> bool:
    return entries(runs) == []


#: address space of a bounded subprocess: far above what privbench needs for a tiny model, far below the
#: allocations an unbounded model would attempt (an allocation beyond it fails at once instead of swapping)
BOUNDED_BYTES = 6 << 30


def run_bounded(*args, cwd=None):
    """``python -m privbench ARGS`` in a subprocess whose address space is :data:`BOUNDED_BYTES` — so a model that
    is not bounded before allocation fails fast (exit 3, out of memory) instead of reaching the OOM killer.
    Returns (exit code, stderr lines)."""
    import os
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (BOUNDED_BYTES, BOUNDED_BYTES))

    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PRIVBENCH_PROGRESS="0",
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    r = subprocess.run([sys.executable, "-m", "privbench", *map(str, args)], capture_output=True, text=True,
                       preexec_fn=limit, env=env, cwd=cwd, timeout=600)
    return r.returncode, [ln for ln in r.stderr.splitlines() if ln.strip()]
