"""Records declare or reveal their pixel range (--records-range {auto,-1:1,0:1,0:255}); what auto cannot
decide, and members and non-members encoded differently, are refused; an .npy of images is images; uint8 N×C×H×W
is not read as N×H×W×C."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from ext_helpers import cli, digits_split, tiny_unet, write_npz

from privbench.core.errors import BadInput
from privbench.data.records_io import load_records


def _pix(n=4, c=3, side=8, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, c, side, side), dtype=np.uint8)


def test_uint8_nchw_is_not_read_as_eight_channels(tmp_path):
    pix = _pix()
    np.savez(tmp_path / "nchw.npz", images=pix)
    np.savez(tmp_path / "nhwc.npz", images=pix.transpose(0, 2, 3, 1))
    a, _, prov = load_records(tmp_path / "nchw.npz", image_shape=(3, 8, 8))
    b, _, _ = load_records(tmp_path / "nhwc.npz", image_shape=(3, 8, 8))
    assert a.shape == (4, 3, 8, 8) and torch.equal(a, b) and prov["layout"].startswith("uint8 N×C×H×W")
    assert prov["range"] == "0:255" and prov["encoding"] == "uint8"


def test_float_ranges_inferred_declared_or_refused(tmp_path):
    pix = _pix()
    ref = torch.from_numpy(pix).float() / 127.5 - 1
    np.savez(tmp_path / "unit.npz", images=pix.astype(np.float32) / 255.0)       # torchvision ToTensor's range
    with pytest.raises(BadInput, match="cannot be told apart; give --records-range 0:1 or -1:1"):
        load_records(tmp_path / "unit.npz")
    x, _, prov = load_records(tmp_path / "unit.npz", records_range="0:1")
    assert torch.allclose(x, ref, atol=1e-5) and prov["range"] == "0:1" and "declared" in prov["range_basis"]
    np.savez(tmp_path / "f255.npz", images=pix.astype(np.float64))
    x, _, prov = load_records(tmp_path / "f255.npz")
    assert torch.allclose(x, ref, atol=1e-5) and prov["range"] == "0:255" and "inferred" in prov["range_basis"]
    np.savez(tmp_path / "sym.npz", images=ref.numpy())
    x, _, prov = load_records(tmp_path / "sym.npz")
    assert torch.equal(x, ref) and prov["range"] == "-1:1"
    with pytest.raises(BadInput, match=r"--records-range 0:1 but the float images span \[-1, 1\]"):
        load_records(tmp_path / "sym.npz", records_range="0:1")
    np.savez(tmp_path / "u8.npz", images=pix)
    with pytest.raises(BadInput, match="uint8 images hold 0..255; --records-range 0:1 does not apply"):
        load_records(tmp_path / "u8.npz", records_range="0:1")
    with pytest.raises(BadInput, match="--records-range '0:2'"):
        load_records(tmp_path / "u8.npz", records_range="0:2")


def test_npy_of_images_is_images_not_indices(tmp_path):
    pix = _pix(c=1)
    np.save(tmp_path / "imgs.npy", pix)
    x, y, prov = load_records(tmp_path / "imgs.npy", image_shape=(1, 8, 8))
    assert y is None and prov["kind"] == "npy-images" and torch.equal(x, torch.from_numpy(pix).float() / 127.5 - 1)
    np.save(tmp_path / "idx.npy", np.array([3, 1]))
    _, y, prov = load_records(tmp_path / "idx.npy", dataset="digits")
    assert prov["kind"] == "dataset-indices" and prov["range"] == "-1:1" and len(y) == 2


@pytest.fixture(scope="module")
def pipe(tmp_path_factory):
    from diffusers import DDPMPipeline, DDPMScheduler

    d = tmp_path_factory.mktemp("range") / "pipe"
    DDPMPipeline(unet=tiny_unet(0), scheduler=DDPMScheduler()).save_pretrained(str(d))
    return d


def _u8_nhwc(x):
    return np.round((x.numpy() + 1) * 127.5).clip(0, 255).astype(np.uint8).transpose(0, 2, 3, 1)


def test_cli_range_in_result_and_mixed_encodings_refused(tmp_path, pipe):
    (xm, _), (xn, _), _ = digits_split(12, 12, seed=3)
    base = ["attack", "--model", pipe, "--attack", "loss", "--preset", "test", "--device", "cpu", "--json",
            "--runs-dir", tmp_path / "runs"]
    np.savez(tmp_path / "m01.npz", images=((xm + 1) / 2).numpy())          # members in [0, 1]
    write_npz(tmp_path / "n.npz", xn)                                       # non-members in [-1, 1]
    code, _, err = cli(*base, "--members", tmp_path / "m01.npz", "--nonmembers", tmp_path / "n.npz")
    assert code == 2 and "cannot be told apart" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli(*base, "--members", tmp_path / "m01.npz", "--nonmembers", tmp_path / "n.npz",
                       "--records-range", "0:1")
    assert code == 2 and "n.npz: --records-range 0:1 but the float images span" in err
    np.savez(tmp_path / "m_u8.npz", images=_u8_nhwc(xm))
    code, _, err = cli(*base, "--members", tmp_path / "m_u8.npz", "--nonmembers", tmp_path / "n.npz")
    assert code == 2 and "encoded differently" in err and not (tmp_path / "runs").exists()
    np.savez(tmp_path / "n01.npz", images=((xn + 1) / 2).numpy())
    code, out, err = cli(*base, "--members", tmp_path / "m01.npz", "--nonmembers", tmp_path / "n01.npz",
                         "--records-range", "0:1")
    assert code == 0, err
    res = json.loads(out)
    assert res["records_range"]["range"] == "0:1" and res["records_range"]["requested"] == "0:1"
    from pathlib import Path

    on_disk = json.loads((Path(res["scores_path"]).parent / "result.json").read_text())
    assert on_disk["records_range"]["encoding"] == "float"
    assert on_disk["split_check"]["shift"] is False and 0 <= on_disk["split_check"]["auc"] <= 1
    code, out, _ = cli(*[a for a in base if a != "--json"], "--members", tmp_path / "m01.npz", "--nonmembers",
                       tmp_path / "n01.npz", "--records-range", "0:1")
    assert code == 0 and "range 0:1 (float; --records-range 0:1)" in out  # the table says which range was used
    code, _, err = cli("attack", "--method", "centralized", "--attack", "loss", "--records-range", "0:1")
    assert code == 2 and "--records-range" in err and "need --model" in err


def test_attack_model_runs_the_shift_check(tmp_path, pipe):
    """Every attack --model runs the member/non-member shift check; its result is in result.json, and a
    split by class is flagged (a warning and a stderr line; the run itself exits 0)."""
    from privbench import load_dataset

    x, y = load_dataset("digits")
    write_npz(tmp_path / "low.npz", x[y < 5][:40])
    write_npz(tmp_path / "high.npz", x[y >= 5][:40])
    code, out, err = cli("attack", "--model", pipe, "--attack", "loss", "--preset", "test", "--device", "cpu",
                         "--json", "--runs-dir", tmp_path / "runs", "--members", tmp_path / "low.npz",
                         "--nonmembers", tmp_path / "high.npz")
    assert code == 0, err
    res = json.loads(out)
    sc = res["split_check"]
    assert sc["shift"] and sc["ci95"][0] > 0.6 and sc["n_members"] == 40 and "not evidence of leakage" in err
    assert any("not evidence of leakage" in w for w in res["warnings"])
    code, out, err = cli("report", tmp_path / "runs", "--out", tmp_path / "rep", "--json")
    assert code == 0, err
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "Member/non-member shift check" in page and "shift: not evidence of leakage" in page
    assert "SHIFT: not evidence of leakage" in (tmp_path / "rep" / "tables.md").read_text()
    assert "True" in (tmp_path / "rep" / "split_check.csv").read_text()


def test_raw_sklearn_digits_are_not_read_as_eight_bit(tmp_path, pipe):
    """sklearn's raw digits are floats in 0..16: read as 0..255 every record is near black and a memorising model's
    leak disappears, so ``auto`` refuses them in one line that names the fix; a declared 0:255 is the user's word."""
    from sklearn.datasets import load_digits

    raw = load_digits().images[:24, None].astype(np.float64)            # N×1×8×8, 0..16
    np.savez(tmp_path / "m.npz", images=raw[:12])
    np.savez(tmp_path / "n.npz", images=raw[12:])
    with pytest.raises(BadInput, match="divide by 16 and give --records-range 0:1"):
        load_records(tmp_path / "m.npz")
    _, _, prov = load_records(tmp_path / "m.npz", records_range="0:255")
    assert prov["range"] == "0:255"
    code, _, err = cli("attack", "--model", pipe, "--attack", "loss", "--preset", "test", "--device", "cpu",
                       "--runs-dir", tmp_path / "runs", "--members", tmp_path / "m.npz", "--nonmembers",
                       tmp_path / "n.npz")
    assert code == 2 and "--records-range" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
