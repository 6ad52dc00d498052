"""Records the user brings: .npz (float NCHW / uint8 NHWC), image folders (ImageFolder labels), dataset indices,
the PIA/SecMI split file; fitted to the model's channels and side or refused."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from ext_helpers import cli, digits_split, tiny_unet
from PIL import Image

from privbench.core.errors import BadInput
from privbench.data.records_io import load_records, read_split


def _u8(x):  # [−1, 1] → uint8 as x/127.5 − 1 inverts
    return np.round((x.numpy() + 1) * 127.5).clip(0, 255).astype(np.uint8)


def test_npz_uint8_nhwc_equals_float_nchw(tmp_path):
    g = torch.Generator().manual_seed(0)
    pix = torch.randint(0, 256, (5, 4, 4, 3), generator=g, dtype=torch.uint8)
    np.savez(tmp_path / "u8.npz", images=pix.numpy(), labels=np.arange(5))
    x, y, prov = load_records(tmp_path / "u8.npz", image_shape=(3, 4, 4))
    ref = pix.permute(0, 3, 1, 2).float() / 127.5 - 1
    assert torch.allclose(x, ref, atol=1e-6) and y.tolist() == list(range(5)) and prov["kind"] == "npz"
    np.savez(tmp_path / "f.npz", images=ref.numpy())
    x2, y2, _ = load_records(tmp_path / "f.npz", image_shape=(3, 4, 4))
    assert torch.equal(x2, x) and y2 is None
    np.savez(tmp_path / "bad_range.npz", images=(ref * 255).numpy())
    with pytest.raises(BadInput, match=r"inside none of \[-1, 1\]"):
        load_records(tmp_path / "bad_range.npz")
    np.savez(tmp_path / "nhwc_float.npz", images=ref.permute(0, 2, 3, 1).numpy())
    with pytest.raises(BadInput, match="channels first"):
        load_records(tmp_path / "nhwc_float.npz", image_shape=(3, 4, 4))
    np.savez(tmp_path / "obj.npz", images=np.array([object()] * 2, dtype=object))
    with pytest.raises(BadInput, match="pickle"):
        load_records(tmp_path / "obj.npz")


def test_image_folder_labels_like_imagefolder(tmp_path):
    pix = np.random.default_rng(0).integers(0, 256, (6, 8, 8, 3), dtype=np.uint8)
    for i, cls in enumerate(["zebra", "ant", "ant", "moth", "zebra", "ant"]):
        (tmp_path / "imgs" / cls).mkdir(parents=True, exist_ok=True)
        Image.fromarray(pix[i]).save(tmp_path / "imgs" / cls / f"{i}.png")
    x, y, prov = load_records(tmp_path / "imgs", image_shape=(3, 8, 8))
    from torchvision.datasets import ImageFolder

    ref = ImageFolder(str(tmp_path / "imgs"))
    assert y.tolist() == [t for _, t in ref.samples] and prov["classes"] == ref.class_to_idx
    first = np.array(Image.open(ref.samples[0][0]))
    assert torch.allclose(x[0], torch.from_numpy(first).permute(2, 0, 1).float() / 127.5 - 1)
    with pytest.raises(BadInput, match="colour image and the model has 1 channel"):
        load_records(tmp_path / "imgs", image_shape=(1, 8, 8))


def test_gray_files_for_rgb_model_and_resize(tmp_path):
    (tmp_path / "g").mkdir()
    pix = np.random.default_rng(1).integers(0, 256, (3, 16, 16), dtype=np.uint8)
    for i in range(3):
        Image.fromarray(pix[i], mode="L").save(tmp_path / "g" / f"{i}.png")
    x, y, prov = load_records(tmp_path / "g", image_shape=(3, 16, 16))
    assert y is None and x.shape == (3, 3, 16, 16) and torch.equal(x[:, 0], x[:, 2])
    small, _, prov = load_records(tmp_path / "g", image_shape=(1, 8, 8))
    assert small.shape == (3, 1, 8, 8) and prov["resized_files"] == 3
    np.savez(tmp_path / "wide.npz", images=np.zeros((2, 1, 8, 16), dtype=np.float32))
    with pytest.raises(BadInput, match="only square images are resized"):
        load_records(tmp_path / "wide.npz", image_shape=(1, 8, 8), records_range="-1:1")


def test_indices_and_split_file(tmp_path):
    np.save(tmp_path / "idx.npy", np.array([5, 0, 7]))
    x, y, prov = load_records(tmp_path / "idx.npy", image_shape=(1, 8, 8), dataset="digits")
    from privbench import load_dataset

    X, Y = load_dataset("digits")
    assert torch.equal(x, X[[5, 0, 7]]) and torch.equal(y, Y[[5, 0, 7]]) and prov["index"] == [5, 0, 7]
    with pytest.raises(BadInput, match="needs --dataset"):
        load_records(tmp_path / "idx.npy")
    np.save(tmp_path / "far.npy", np.array([0, 99999]))
    with pytest.raises(BadInput, match="indices must lie in"):
        load_records(tmp_path / "far.npy", dataset="digits")
    np.savez(tmp_path / "CIFAR10_train_ratio0.5.npz", mia_train_idxs=np.array([1, 2]), mia_eval_idxs=np.array([3]),
             ratio=0.5)
    m, n = read_split(tmp_path / "CIFAR10_train_ratio0.5.npz")
    assert m.tolist() == [1, 2] and n.tolist() == [3]


def test_cli_split_file_gives_members_and_nonmembers(tmp_path):
    """--split (SecMI's mia_train_idxs / mia_eval_idxs) with --dataset: the same run as the two .npy files."""
    from diffusers import DDPMPipeline, DDPMScheduler

    DDPMPipeline(unet=tiny_unet(0), scheduler=DDPMScheduler()).save_pretrained(str(tmp_path / "pipe"))
    _, _, (m, n) = digits_split(10, 10, seed=4)
    np.savez(tmp_path / "split.npz", mia_train_idxs=m, mia_eval_idxs=n, ratio=0.5)
    np.save(tmp_path / "m.npy", m)
    np.save(tmp_path / "n.npy", n)
    base = ["attack", "--model", tmp_path / "pipe", "--attack", "pia", "--dataset", "digits", "--preset", "test",
            "--device", "cpu", "--json"]
    code, out, err = cli(*base, "--split", tmp_path / "split.npz", "--runs-dir", tmp_path / "r1")
    assert code == 0, err
    a = json.loads(out)
    code, out, err = cli(*base, "--members", tmp_path / "m.npy", "--nonmembers", tmp_path / "n.npy",
                         "--runs-dir", tmp_path / "r2")
    assert code == 0, err
    b = json.loads(out)
    za, zb = np.load(a["scores_path"]), np.load(b["scores_path"])
    assert np.array_equal(za["scores"], zb["scores"]) and za["index"].tolist() == m.tolist() + n.tolist()
    assert a["provenance"]["members"]["spec"].endswith("(mia_train_idxs)")
