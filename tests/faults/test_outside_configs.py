"""Config values of an outside model that got past the parameter count: each is exit 2 with one line naming the
component's config.json, the key and the bound, before anything is built or written.

Cases: ``norm_num_groups`` 0 (a division by zero in the builder) or -8 in a diffusers UNet2DModel folder or a
pipeline's UNet; a text-to-image UNet's ``sample_size`` "abc", 0 or -4; a VAE ``scaling_factor`` "abc" or 0 (never
silently taken as 1); a UNet with ``layers_per_block: 200000``, below 10**9 parameters but a module count that
would build until memory runs out."""
from __future__ import annotations

import pytest
from fault_helpers import TEST, assert_one_line, cli, entries
from untrusted_files import attack_model, digits_records, unet_folder

pytest.importorskip("transformers")

from untrusted_t2i import PEAK_LIMIT_KB, edited, run_measured, tiny_pipeline


@pytest.fixture(scope="module")
def t2i(tmp_path_factory):
    return tiny_pipeline(tmp_path_factory.mktemp("t2i"))


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return digits_records(tmp_path_factory.mktemp("records"))


@pytest.mark.parametrize("groups,needle", [
    (0, "config.json norm_num_groups=0; expected an integer in 1..4096"),
    (-8, "config.json norm_num_groups=-8; expected an integer in 1..4096"),
    (3, "config.json norm_num_groups=3 does not divide block_out_channels [16, 32]"),
    ("8", "config.json norm_num_groups='8'; expected an integer"),
])
def test_unet_folder_norm_groups(tmp_path, records, groups, needle):
    model = unet_folder(tmp_path / "unet", edit_config=lambda c: c.update(norm_num_groups=groups))
    assert_one_line(attack_model(model, *records, tmp_path / "runs"), 2, needle)
    assert entries(tmp_path / "runs") == []


def test_set_norm_groups_zero(tmp_path):
    r = cli("train", *TEST, "--set", "model.norm_num_groups=0", "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "model.norm_num_groups")
    assert entries(tmp_path / "runs") == []


CASES = [
    ("unet", {"norm_num_groups": 0}, "(unet/): config.json norm_num_groups=0; expected an integer in 1..4096"),
    ("unet", {"norm_num_groups": -8}, "(unet/): config.json norm_num_groups=-8"),
    ("vae", {"norm_num_groups": 0}, "(vae/): config.json norm_num_groups=0"),
    ("unet", {"sample_size": "abc"}, "(unet/): config.json sample_size='abc'; expected an integer (or a pair) in "
                                     "1..1024"),
    ("unet", {"sample_size": 0}, "(unet/): config.json sample_size=0; expected an integer (or a pair) in 1..1024"),
    ("unet", {"sample_size": -4}, "(unet/): config.json sample_size=-4"),
    ("unet", {"sample_size": [4, "x"]}, "(unet/): config.json sample_size=[4, 'x']"),
    ("unet", {"sample_size": ...}, "(unet/): config.json has no sample_size"),
    ("vae", {"scaling_factor": "abc"}, "(vae/): config.json scaling_factor='abc'; expected a finite number > 0"),
    ("vae", {"scaling_factor": 0}, "(vae/): config.json scaling_factor=0; expected a finite number > 0"),
    ("vae", {"scaling_factor": -0.18}, "(vae/): config.json scaling_factor=-0.18"),
    ("vae", {"scaling_factor": None}, "(vae/): config.json scaling_factor=None"),
    ("unet", {"block_out_channels": [32] * 9, "down_block_types": ["DownBlock2D"] * 9,
              "up_block_types": ["UpBlock2D"] * 9}, "(unet/): config.json block_out_channels=[32, 32"),
]


@pytest.mark.parametrize("component,values,needle", CASES, ids=[f"{c}-{'-'.join(v)}-{i}" for i, (c, v, _) in
                                                                 enumerate(CASES)])
def test_pipeline_config_values(tmp_path, t2i, component, values, needle):
    model = edited(t2i["pipe"], tmp_path / "m", component, **values)
    line = assert_one_line(attack_model(model, t2i["members"], t2i["nonmembers"], tmp_path / "runs"), 2, needle)
    assert str(model) in line
    assert entries(tmp_path / "runs") == []


def test_the_unchanged_pipeline_attacks(tmp_path, t2i):
    r = attack_model(t2i["pipe"], t2i["members"], t2i["nonmembers"], tmp_path / "runs")
    assert r.code == 0, r


@pytest.mark.parametrize("where,values,needle", [
    ("unet2d", {"layers_per_block": 200_000}, "residual and attention blocks (layers_per_block=200000"),
    ("unet", {"layers_per_block": 200_000}, "residual and attention blocks (layers_per_block=200000"),
    ("text_encoder", {"num_hidden_layers": 200_000}, "num_hidden_layers=200000; expected an integer in 1..256"),
])
def test_many_small_modules_are_refused_before_any_is_built(tmp_path, t2i, records, where, values, needle):
    """Below 10**9 parameters, but a module count no diffusion model has: refused from the config's numbers,
    the refusing process's peak resident memory bounded (:data:`untrusted_t2i.PEAK_LIMIT_KB`)."""
    if where == "unet2d":
        model = unet_folder(tmp_path / "unet", edit_config=lambda c: c.update(values))
        members, nonmembers = records
    else:
        model = edited(t2i["pipe"], tmp_path / "m", where, **values)
        members, nonmembers = t2i["members"], t2i["nonmembers"]
    code, lines, peak_kb = run_measured("attack", "--model", model, "--members", members, "--nonmembers",
                                        nonmembers, "--attack", "loss", "--runs-dir", tmp_path / "runs",
                                        "--device", "cpu")
    assert code == 2 and len(lines) == 1 and needle in lines[0], (code, lines)
    assert 0 < peak_kb < PEAK_LIMIT_KB, peak_kb
    print(f"peak resident memory refusing {where} {values}: {peak_kb / 1024:.0f} MB")
    assert entries(tmp_path / "runs") == []
