"""Bad input to ``attack --model`` / ``export``: exit 2, one line, no traceback, nothing written, no code run."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers import DDPMPipeline, DDPMScheduler
from ext_helpers import cli, digits_split, files_under, tiny_unet, write_npz, write_pickle_payload


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    DDPMPipeline(unet=tiny_unet(0), scheduler=DDPMScheduler()).save_pretrained(str(root / "pipe"))
    (xm, ym), (xn, yn), _ = digits_split(8, 8, seed=2)
    write_npz(root / "m.npz", xm, ym)
    write_npz(root / "n.npz", xn, yn)
    write_npz(root / "rgb.npz", xm.repeat(1, 3, 1, 1), ym)
    write_npz(root / "overlap.npz", torch.cat([xn[:3], xm[3:]]), ym)      # 3 non-members among the members
    (root / "empty_images").mkdir()
    (root / "empty_images" / "notes.txt").write_text("no images here")
    (root / "not_a_model").mkdir()
    (root / "not_a_model" / "readme.md").write_text("hello")
    # a diffusers folder whose only weights are a pickle (.bin) that would run code when unpickled
    DDPMPipeline(unet=tiny_unet(0), scheduler=DDPMScheduler()).save_pretrained(str(root / "bin_pipe"))
    for f in (root / "bin_pipe" / "unet").glob("*.safetensors"):
        f.unlink()
    return root


def _run(world, tmp_path, model, members="m.npz", nonmembers="n.npz", *extra):
    runs = tmp_path / "runs"
    args = ["attack", "--model", model, "--attack", "pia", "--runs-dir", runs, "--device", "cpu", *extra]
    if members:
        args += ["--members", world / members if not str(members).startswith("/") else members]
    if nonmembers:
        args += ["--nonmembers", world / nonmembers if not str(nonmembers).startswith("/") else nonmembers]
    before = files_under(world)
    code, out, err = cli(*args)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("privbench: error: "), err
    assert "Traceback" not in err and out == ""
    assert not runs.exists(), "nothing may be written for bad input"
    assert files_under(world) == before
    return lines[0]


def test_missing_path(world, tmp_path):
    assert "no such file or directory" in _run(world, tmp_path, tmp_path / "nope")


def test_folder_that_is_not_a_model(world, tmp_path):
    assert "not a model folder" in _run(world, tmp_path, world / "not_a_model")


@pytest.mark.parametrize("route", ["file", "arch", "bin-folder"])
def test_pickle_as_model_is_refused_and_never_runs(world, tmp_path, route):
    marker = tmp_path / "PWNED"
    if route == "bin-folder":
        write_pickle_payload(world / "bin_pipe" / "unet" / "diffusion_pytorch_model.bin", marker, torch_format=True)
        line = _run(world, tmp_path, world / "bin_pipe")
        assert "pickled weights" in line
    elif route == "file":
        p = write_pickle_payload(tmp_path / "model.pkl", marker)
        line = _run(world, tmp_path, p)
        assert "pickle" in line and "not a model folder" in line
    else:
        p = write_pickle_payload(tmp_path / "ckpt.pt", marker, torch_format=True)
        line = _run(world, tmp_path, p, "m.npz", "n.npz", "--arch", "pytorch-ddpm")
        assert "weights_only=True" in line
    assert not marker.exists(), "the payload ran"
    # the payload is live: unpickling it without weights_only would have created the marker
    if route == "arch":
        torch.load(tmp_path / "ckpt.pt", weights_only=False)
        assert marker.exists()


def test_wrong_channel_count(world, tmp_path):
    assert "3 channels, the model takes 1" in _run(world, tmp_path, world / "pipe", "rgb.npz")


def test_empty_image_folder(world, tmp_path):
    assert "no png/jpg images" in _run(world, tmp_path, world / "pipe", "empty_images")


def test_overlapping_members_and_nonmembers_count(world, tmp_path):
    line = _run(world, tmp_path, world / "pipe", "overlap.npz", "n.npz")
    assert "share 3 records" in line


def test_a_record_given_twice_in_one_set(world, tmp_path):
    """A repeated record would count twice in every rate and interval: by pixels, and by dataset index."""
    (xm, ym), _, _ = digits_split(8, 8, seed=2)
    write_npz(tmp_path / "twice.npz", torch.cat([xm, xm[:2]]), torch.cat([ym, ym[:2]]))
    line = _run(world, tmp_path, world / "pipe", str(tmp_path / "twice.npz"), "n.npz")
    assert "members" in line and "2 records repeat an earlier one" in line
    np.save(tmp_path / "idx.npy", np.array([3, 4, 5, 3]))
    np.save(tmp_path / "other.npy", np.array([10, 11, 12, 13]))
    line = _run(world, tmp_path, world / "pipe", str(tmp_path / "other.npy"), str(tmp_path / "idx.npy"),
                "--dataset", "digits")
    assert "non-members" in line and "1 record repeats an earlier one" in line


def test_overlap_by_dataset_index(world, tmp_path):
    np.save(tmp_path / "a.npy", np.array([1, 2, 3, 4, 5]))
    np.save(tmp_path / "b.npy", np.array([4, 5, 6, 7]))
    line = _run(world, tmp_path, world / "pipe", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"),
                "--dataset", "digits")
    assert "share 2 records" in line


@pytest.mark.parametrize("extra,needle", [
    (["--method", "centralized"], "not both"),
    (["--set", "model.dropout=0.2"], "only attack.*, sample.* and metrics.*"),
    (["--set", "attack.t=1000"], "attack.t=1000"),
    (["--scheduler-config", "/nonexistent/sched.json"], "file not found"),
    (["--attack", "extract", "--embedding", "/nonexistent/sscd.pt"], "attack.extract_embedding="),  # not dropped
    (["--target", "x" * 101], "expected 1..100 printable characters"),  # it is part of file names
    (["--target", "a\nb"], "--target 'a\\nb'"),  # a line break would split the one-line outputs
])
def test_other_refusals(world, tmp_path, extra, needle):
    assert needle in _run(world, tmp_path, world / "pipe", "m.npz", "n.npz", *extra)


def test_missing_records_and_split_misuse(world, tmp_path):
    assert "--members SPEC and --nonmembers SPEC" in _run(world, tmp_path, world / "pipe", None, None)
    np.savez(tmp_path / "split.npz", mia_train_idxs=np.arange(4), mia_eval_idxs=np.arange(4, 8))
    assert "pass it as --split" in _run(world, tmp_path, world / "pipe", str(tmp_path / "split.npz"), "n.npz")
    assert "drop --members" in _run(world, tmp_path, world / "pipe", "m.npz", "n.npz", "--split",
                                    tmp_path / "split.npz", "--dataset", "digits")
    code, out, err = cli("attack", "--method", "centralized", "--attack", "pia", "--members", world / "m.npz",
                         "--runs-dir", tmp_path / "r2")
    assert code == 2 and "need --model" in err and not (tmp_path / "r2").exists()


def test_in_memory_api_refusals(tmp_path):
    """privbench.wrap / attack / report: bad names, NaN images and an output path that is a file are one BadInput."""
    import privbench
    from privbench.core.errors import BadInput

    (xm, _), (xn, _), _ = digits_split(8, 8, seed=2)
    unet = tiny_unet(0)
    for name in ("", "x" * 101, "a\nb"):
        with pytest.raises(BadInput, match="expected 1..100 printable characters"):
            privbench.wrap(unet, DDPMScheduler(), name=name)
    tgt = privbench.wrap(unet, DDPMScheduler())
    bad = xm.clone()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(BadInput, match="members: images hold NaN or infinite values"):
        privbench.attack(tgt, bad, xn, "loss")
    with pytest.raises(BadInput, match="members: expected images N×C×H×W .* got a generator that is not an array"):
        privbench.attack(tgt, (x for x in xm), xn, "loss")
    with pytest.raises(BadInput, match="members: labels must be integers"):
        privbench.attack(tgt, (xm, torch.full((len(xm),), 0.5)), xn, "loss")
    r = privbench.attack(tgt, xm, xn, "loss", bootstrap=0)
    files = privbench.report([r], tmp_path / "rep", formats="csv,markdown")  # the command line's list
    suffixes = {f.suffix for f in files}
    assert {".csv", ".md"} <= suffixes and not {".html", ".tex"} & suffixes, files
    (tmp_path / "a_file").write_text("kept")
    with pytest.raises(BadInput, match="cannot create"):
        privbench.report([r], tmp_path / "a_file")
    assert (tmp_path / "a_file").read_text() == "kept"
