"""The member/non-member overlap check compares records on the 8-bit grid after conversion to the
model's [-1, 1], so re-encoding the same records (uint8 N×H×W×C vs u8/127.5 − 1 in float64) cannot hide them."""
from __future__ import annotations

import numpy as np
import torch
from fault_helpers import assert_one_line, cli

from privbench.data.records_io import shared_count


def _digits_u8(n=32):
    from privbench import load_dataset

    x, _ = load_dataset("digits")
    return np.round((x[:n].numpy() + 1) * 127.5).clip(0, 255).astype(np.uint8)  # N×1×8×8


def test_shared_count_sees_reencoded_copies():
    u8 = _digits_u8()
    a = torch.from_numpy(u8).float().div_(127.5).sub_(1.0)                  # how a uint8 file is read
    b = torch.from_numpy((u8.astype(np.float64) / 127.5 - 1.0).astype(np.float32))  # float64 arithmetic, then cast
    assert not torch.equal(a, b)  # the float32 bytes differ: an exact-bytes comparison misses every copy
    assert shared_count(a, b) == 32
    other = torch.from_numpy(_digits_u8(64)[32:]).float().div_(127.5).sub_(1.0)
    assert shared_count(a, other) == len({r.tobytes() for r in u8} & {r.tobytes() for r in _digits_u8(64)[32:]})


def test_cli_refuses_members_reencoded_as_nonmembers(tmp_path):
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=1, block_out_channels=(8, 16), layers_per_block=1,
                       down_block_types=("DownBlock2D",) * 2, up_block_types=("UpBlock2D",) * 2, norm_num_groups=4)
    DDPMPipeline(unet=unet, scheduler=DDPMScheduler()).save_pretrained(str(tmp_path / "pipe"))
    u8 = _digits_u8()
    np.savez(tmp_path / "m.npz", images=u8.transpose(0, 2, 3, 1))           # uint8 N×H×W×C
    np.savez(tmp_path / "n.npz", images=u8.astype(np.float64) / 127.5 - 1)  # the same records, float64 N×C×H×W
    r = cli("attack", "--model", tmp_path / "pipe", "--members", tmp_path / "m.npz", "--nonmembers",
            tmp_path / "n.npz", "--attack", "loss", "--preset", "test", "--device", "cpu",
            "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "members and non-members share 32 records")
    assert not (tmp_path / "runs").exists()
