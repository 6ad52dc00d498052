"""``check`` and ``report`` believe a result only once its files agree with it, and gates (and
every command) key on attack labels such as ``secmi@paper``."""
from __future__ import annotations

import json

import numpy as np
import pytest
from fault_helpers import assert_one_line, cli

GATE = "gates:\n  - {method: centralized, target: model, attack: loss, metric: auc, max: 1.0}\n"


def _gates(tmp_path, text=GATE):
    p = tmp_path / "gates.yaml"
    p.write_text(text)
    return p


def test_an_untouched_result_passes(store, tmp_path):
    runs, _, _ = store
    r = cli("check", "--gates", _gates(tmp_path), runs)
    assert r.code == 0, r
    assert "all 1 gate checks hold" in r.out


def test_an_edited_metric_is_exit_2_naming_result_json(store, tmp_path):
    """Lowering metrics.auc below a gate does not pass it: the recomputed AUC disagrees (exit 2)."""
    runs, run_dir, out_dir = store
    for f in (out_dir / "result.json", run_dir / "result.json"):  # the attack folder's file and the run's copy
        d = json.loads(f.read_text())
        d["metrics"]["auc"] = 0.01
        f.write_text(json.dumps(d))
    gates = _gates(tmp_path, "gates:\n  - {method: centralized, target: model, attack: loss, metric: auc, "
                             "max: 0.05}\n")
    line = assert_one_line(cli("check", "--gates", gates, runs), 2, "result.json")
    assert "metrics.auc" in line and "edited" in line
    line = assert_one_line(cli("report", runs, "--out", tmp_path / "rep", "--format", "csv"), 2, "metrics.auc")
    assert not (tmp_path / "rep" / "side_by_side.csv").exists()


def test_an_edited_confidence_interval_is_exit_2(store, tmp_path):
    runs, run_dir, out_dir = store
    f = out_dir / "result.json"
    d = json.loads(f.read_text())
    d["metrics"]["ci95"]["auc"] = [0.0, 0.05]
    f.write_text(json.dumps(d))
    (run_dir / "result.json").unlink()  # only the attack folder's file
    assert_one_line(cli("check", "--gates", _gates(tmp_path), runs), 2, "metrics.ci95.auc")


def test_replaced_scores_are_exit_2_naming_scores_npz(store, tmp_path):
    """Negated scores under the same name: a different SHA-256 from the one result.json records."""
    runs, run_dir, out_dir = store
    for d in (out_dir, run_dir):
        p = d / "scores.npz"
        with np.load(p) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["scores"] = -arrays["scores"]
        with open(p, "wb") as fh:
            np.savez(fh, **arrays)
    line = assert_one_line(cli("check", "--gates", _gates(tmp_path), runs), 2, "scores.npz")
    assert "SHA-256" in line
    assert_one_line(cli("report", runs, "--out", tmp_path / "rep"), 2, "scores.npz")
    assert_one_line(cli("audit", runs), 2, "scores.npz")


def test_a_missing_scores_file_is_exit_2(store, tmp_path):
    runs, run_dir, out_dir = store
    (out_dir / "scores.npz").unlink()
    (run_dir / "result.json").unlink()
    assert_one_line(cli("check", "--gates", _gates(tmp_path), runs), 2, "scores.npz")



@pytest.mark.parametrize("target", ["a" * 400, "a\nb"], ids=["400-characters", "line-break"])
def test_a_target_name_no_file_or_line_can_hold_is_exit_2(store, tmp_path, target):
    """A target name is part of the report's file names and of one-line outputs."""
    runs, run_dir, out_dir = store
    for f in (out_dir / "result.json", run_dir / "result.json"):
        d = json.loads(f.read_text())
        d["target"] = target
        f.write_text(json.dumps(d))
    line = assert_one_line(cli("report", runs, "--out", tmp_path / "rep"), 2, "target")
    assert "expected 1..100 printable characters" in line
    assert_one_line(cli("audit", runs), 2, "expected 1..100 printable characters")


# ---------------------------------------------------------------------------------------------- labels

def _labelled(store, label):
    """The pristine loss result relabelled as a variant (``label``), hashes kept: a result of that variant."""
    runs, run_dir, out_dir = store
    (run_dir / "result.json").unlink()
    f = out_dir / "result.json"
    d = json.loads(f.read_text())
    d["label"] = label
    f.write_text(json.dumps(d))
    return runs


def test_gates_key_on_labels_not_base_names(store, tmp_path):
    runs = _labelled(store, "loss@paper")
    exact = _gates(tmp_path, "gates:\n  - {method: centralized, target: model, attack: loss@paper, metric: auc, "
                             "max: 1.0}\n")
    r = cli("check", "--gates", exact, runs)
    assert r.code == 0, r
    base = _gates(tmp_path, GATE)  # attack: loss is the default variant, not loss@paper
    assert_one_line(cli("check", "--gates", base, runs), 2, "matched none")


@pytest.fixture(scope="module")
def random_pipeline(tmp_path_factory):
    """An untrained diffusers DDPMPipeline (8×8, 1 channel) and 16 + 16 digits records."""
    import torch
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    from privbench import load_dataset

    root = tmp_path_factory.mktemp("labelled")
    torch.manual_seed(0)
    unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=1, block_out_channels=(16, 32), layers_per_block=1,
                       down_block_types=("DownBlock2D",) * 2, up_block_types=("UpBlock2D",) * 2, norm_num_groups=8)
    DDPMPipeline(unet=unet.eval(), scheduler=DDPMScheduler(num_train_timesteps=1000)).save_pretrained(root / "m")
    x, _ = load_dataset("digits")
    np.savez(root / "mem.npz", images=x[:16].numpy())
    np.savez(root / "non.npz", images=x[16:32].numpy())
    return root


def test_attack_model_takes_a_variant_label(random_pipeline, tmp_path):
    """``attack --model … --attack secmi@paper`` is a known attack; the result carries the label
    and a gate on that label checks it."""
    root = random_pipeline
    r = cli("attack", "--model", root / "m", "--members", root / "mem.npz", "--nonmembers", root / "non.npz",
            "--attack", "secmi@paper", "--runs-dir", tmp_path / "runs", "--device", "cpu", "--json",
            "--set", "attack.bootstrap=0")
    assert r.code == 0, r
    res = json.loads(r.out)
    assert res["label"] == "secmi@paper" and res["attack_config"]["secmi_offset"] == "paper"
    gates = _gates(tmp_path, "gates:\n  - {method: external, target: m, attack: secmi@paper, metric: auc, "
                             "max: 1.0}\n")
    assert cli("check", "--gates", gates, tmp_path / "runs").code == 0
    assert_one_line(cli("attack", "--model", root / "m", "--members", root / "mem.npz", "--nonmembers",
                        root / "non.npz", "--attack", "secmi@nope", "--runs-dir", tmp_path / "r2"), 2, "secmi@nope")
    assert not (tmp_path / "r2").exists()
