"""An outside model is loaded strictly and within bounds, before any attack runs.

Every case is bad input: exit 2, one line naming what is wrong, nothing written. Cases: a folder missing 3 of its
114 tensors (diffusers would leave them uninitialised), a 600-byte config.json describing a 26-billion-parameter
UNet, a ckpt.pt with a zero-stride time table and a scheduler config with ``num_train_timesteps: 10**9`` (each
would allocate gigabytes; run here under an address-space limit), and a dangling ``scheduler_config.json`` (never
the default schedule instead).
"""
from __future__ import annotations

import os

import pytest
import torch
from fault_helpers import assert_one_line
from untrusted_files import attack_model, digits_records, nothing_written, run_bounded, unet_folder


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return digits_records(tmp_path_factory.mktemp("records"))


def _drop(*keys):
    def edit(sd):
        for k in keys:
            del sd[k]
    return edit


MISSING3 = ("conv_in.weight", "time_embedding.linear_1.bias", "up_blocks.0.resnets.0.conv1.weight")


@pytest.mark.parametrize("edit, needles", [
    (_drop(*MISSING3), ["3 missing"] + list(MISSING3)),
    (_drop("conv_out.bias"), ["1 missing", "conv_out.bias"]),
    (lambda sd: sd.update(extra_tensor=torch.zeros(3)), ["1 unexpected", "extra_tensor"]),
    (lambda sd: sd.update({"conv_in.weight": sd["conv_in.weight"].to(torch.int32)}),
     ["wrong type", "conv_in.weight int"]),
    (lambda sd: sd.update({"conv_in.weight": sd["conv_in.weight"][:8]}), ["wrong shape", "conv_in.weight"]),
    (lambda sd: sd.update({"conv_out.bias": torch.full_like(sd["conv_out.bias"], float("nan"))}),
     ["1 tensor(s) hold NaN or infinity (conv_out.bias)"]),
    (lambda sd: sd.update({"conv_in.weight": sd["conv_in.weight"].index_fill(0, torch.tensor([0]), float("inf"))}),
     ["1 tensor(s) hold NaN or infinity (conv_in.weight)"]),
], ids=["3-missing", "missing-bias", "extra", "int32", "shape", "nan", "inf"])
def test_weights_that_do_not_match_the_network_are_refused(tmp_path, records, edit, needles):
    model = unet_folder(tmp_path / "unet", edit_weights=edit)
    runs = tmp_path / "runs"
    line = assert_one_line(attack_model(model, *records, runs), 2)
    assert all(n in line for n in needles), line
    assert nothing_written(runs)


def test_whole_weights_still_load_and_attack(tmp_path, records):
    r = attack_model(unet_folder(tmp_path / "unet"), *records, tmp_path / "runs")
    assert r.code == 0, r


def test_a_huge_config_is_refused_before_allocation(tmp_path, records):
    """block_out_channels [10000, 10000]: 26 billion parameters (105 GB) if built."""
    model = unet_folder(tmp_path / "unet", edit_config=lambda c: c.update(block_out_channels=[10000, 10000],
                                                                          norm_num_groups=8))
    code, lines = run_bounded("attack", "--model", model, "--members", records[0], "--nonmembers", records[1],
                              "--attack", "loss", "--runs-dir", tmp_path / "runs", "--device", "cpu")
    assert code == 2 and len(lines) == 1, (code, lines)
    assert "26,201,050,001 parameters and buffers" in lines[0] and "at most 1,000,000,000" in lines[0], lines
    assert nothing_written(tmp_path / "runs")


def _ddpm_ckpt(path, edit):
    from privbench.models.pytorch_ddpm import PytorchDDPMUNet

    net = PytorchDDPMUNet(ch=32, ch_mult=[1, 2], attn=[1], num_res_blocks=1, in_channels=1,
                          img_size=8, T=100)
    sd = net.state_dict()
    edit(sd)
    torch.save({"net_model": sd, "ema_model": sd, "step": 1}, path)
    return path


@pytest.mark.parametrize("edit, needle, bounded", [
    # a 1-element storage claiming a 10^8 × 32 table (12.8 GB): in a subprocess with an address-space limit
    (lambda sd: sd.update({"time_embedding.timembedding.0.weight": torch.zeros(1).expand(10 ** 8, 32)}),
     "zero or overlapping strides", True),
    (lambda sd: sd.update({"time_embedding.timembedding.0.weight": torch.zeros(200_000, 32)}), "T=200,000 rows",
     False),
    (lambda sd: sd.pop("tail.2.bias"), "1 missing: tail.2.bias", False),
    (lambda sd: sd.update(extra=torch.zeros(2)), "1 unexpected: extra", False),
], ids=["zero-stride", "too-many-timesteps", "missing", "extra"])
def test_pytorch_ddpm_checkpoints_are_bounded_and_strict(tmp_path, records, edit, needle, bounded):
    ckpt = _ddpm_ckpt(tmp_path / "ckpt.pt", edit)
    runs = tmp_path / "runs"
    if bounded:
        code, lines = run_bounded("attack", "--model", ckpt, "--arch", "pytorch-ddpm", "--members", records[0],
                                  "--nonmembers", records[1], "--attack", "loss", "--runs-dir", runs,
                                  "--device", "cpu")
        assert code == 2 and len(lines) == 1 and needle in lines[0], (code, lines)
    else:
        assert_one_line(attack_model(ckpt, *records, runs, "--arch", "pytorch-ddpm"), 2, needle)
    assert nothing_written(runs)


def test_a_huge_schedule_is_refused_before_allocation(tmp_path, records):
    model = unet_folder(tmp_path / "unet")
    (model / "scheduler_config.json").write_text('{"_class_name": "DDPMScheduler", "num_train_timesteps": '
                                                 '1000000000}')
    code, lines = run_bounded("attack", "--model", model, "--members", records[0], "--nonmembers", records[1],
                              "--attack", "loss", "--runs-dir", tmp_path / "runs", "--device", "cpu")
    assert code == 2 and len(lines) == 1 and "num_train_timesteps=1000000000" in lines[0], (code, lines)


@pytest.mark.parametrize("extra, needle", [
    ('"trained_betas": [0.1, 0.1, 0.1]', "trained_betas must be a list of num_train_timesteps=1000 betas, got 3"),
    ('"trained_betas": 0.1', "trained_betas must be a list of num_train_timesteps=1000 betas, got float"),
    ('"rescale_betas_zero_snr": true', "(rescale_betas_zero_snr: zero terminal SNR, alphas_cumprod = 0 at the last"),
])
def test_a_schedule_the_attacks_cannot_use_is_refused(tmp_path, records, extra, needle):
    model = unet_folder(tmp_path / "unet")
    (model / "scheduler_config.json").write_text('{"_class_name": "DDPMScheduler", ' + extra + '}')
    runs = tmp_path / "runs"
    assert_one_line(attack_model(model, *records, runs), 2, needle)
    assert nothing_written(runs)


@pytest.mark.parametrize("size", ['"abc"', "0", "-8", "100000", "[8]", "true"])
def test_sample_size_is_validated(tmp_path, records, size):
    model = unet_folder(tmp_path / "unet")
    text = (model / "config.json").read_text()
    (model / "config.json").write_text(text.replace('"sample_size": 8', f'"sample_size": {size}'))
    runs = tmp_path / "runs"
    line = assert_one_line(attack_model(model, *records, runs), 2, "sample_size")
    assert "1..1024" in line
    assert nothing_written(runs)


@pytest.mark.parametrize("key, value", [("in_channels", 0), ("out_channels", -3), ("in_channels", "1")])
def test_channel_counts_are_validated(tmp_path, records, key, value):
    """Channel counts are checked from config.json, before a network is built (torch warns on a zero one)."""
    model = unet_folder(tmp_path / "unet", edit_config=lambda c: c.update({key: value}))
    runs = tmp_path / "runs"
    line = assert_one_line(attack_model(model, *records, runs), 2, f"{key}={value!r}")
    assert "expected an integer in 1..4096" in line
    assert nothing_written(runs)


def test_records_are_not_upscaled_beyond_the_stated_factor(tmp_path, records):
    """8×8 records on a model of side 64 (8×): the scores would say nothing about the model."""
    model = unet_folder(tmp_path / "unet", edit_config=lambda c: c.update(sample_size=64))
    runs = tmp_path / "runs"
    line = assert_one_line(attack_model(model, *records, runs), 2, "upscal")
    assert "8x8" in line and "64x64" in line and "at most 4x" in line
    assert nothing_written(runs)


@pytest.mark.parametrize("kind", ["dangling", "directory", "fifo", "deep"])
def test_an_unreadable_scheduler_config_is_an_error_not_the_default(tmp_path, records, kind):
    model = unet_folder(tmp_path / "unet")
    own = model / "scheduler_config.json"
    if kind == "dangling":  # a Hugging Face cache snapshot whose blob is missing
        own.symlink_to(tmp_path / "blobs" / "missing")
    elif kind == "directory":
        own.mkdir()
    elif kind == "fifo":
        os.mkfifo(own)
    else:
        own.write_text("[" * 100_000 + "]" * 100_000)
    runs = tmp_path / "runs"
    assert "scheduler_config.json" in assert_one_line(attack_model(model, *records, runs), 2)
    assert nothing_written(runs)
