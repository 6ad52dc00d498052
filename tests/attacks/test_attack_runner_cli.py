"""Runner and CLI glue: result.json/scores.npz per docs/cli.md §5–§6, caching, bad input (exit 2, before any training)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import train_cfg

from privbench.cli import main
from privbench.core.errors import BadInput

CLI_KEYS = {"method", "target", "attack", "dataset", "preset", "seed", "run_dir", "n_members", "n_nonmembers",
            "metrics", "privacy", "scores_path"}
METRIC_KEYS = {"auc", "asr", "tpr_at_1pct_fpr", "tpr_at_0_1pct_fpr", "ci95"}


def _cli(args, runs_dir):
    return CliRunner().invoke(main, [*args, "--preset", "test", "--runs-dir", str(runs_dir), "--device", "cpu"])


@pytest.mark.parametrize("args,needle", [
    (["attack", "--method", "centralized", "--attack", "nope"], "unknown attack 'nope'"),
    (["attack", "--method", "centralized", "--attack", "pia", "--target", "shared"], "--target 'shared'"),
    (["attack", "--method", "centralized", "--attack", "pia", "--set", "attack.t=1000"], "attack.t=1000"),
    (["attack", "--method", "centralized", "--attack", "pia", "--set", "attack.t=-1"], "attack.t"),
    (["attack", "--method", "centralized", "--attack", "loss", "--set", "attack.sweep=[50,1000]"], "attack.sweep"),
    (["attack", "--method", "centralized", "--attack", "secmi", "--set", "attack.secmi_t=995"], "secmi_t"),
    (["attack", "--method", "centralized", "--attack", "secmi", "--set", "attack.secmi_t=105"], "multiple"),
    (["attack", "--method", "centralized", "--attack", "reconstruction", "--set", "attack.recon_t0=1001"], "t0=1001"),
    (["run", "--method", "centralized", "--attack", "nope"], "unknown attack"),
    (["run", "--method", "centralized", "--attack", "pian", "--set", "diffusion.num_timesteps=100"], "attack.t=200"),
])
def test_bad_input_exits_2_with_one_line_before_training(tmp_path, args, needle):
    res = _cli(args, tmp_path)
    assert res.exit_code == 2, res.output
    err = res.stderr if hasattr(res, "stderr") else res.output
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err
    assert not any(tmp_path.iterdir()), "nothing may be written before validation"


def test_run_attack_writes_cli_schema_and_caches(runs_dir, privbench_log):
    from privbench.reports.text import format_table
    from privbench.runs.attack import run_attack

    cfg = train_cfg(attack__sweep=[50, 100, 200, 300])
    res = run_attack(cfg, "pia", None, runs_dir=runs_dir, device="cpu").to_json()
    assert CLI_KEYS <= set(res) and METRIC_KEYS <= set(res["metrics"])
    assert res["target"] == "model" and res["privacy"] is None and res["n_members"] == 64
    assert set(res["metrics"]["ci95"]) >= {"auc", "tpr_at_1pct_fpr"}
    assert res["calibrated"]["direction"] in (1, -1)
    # sweep: every t, the best labelled as an oracle choice, separate from the fixed-t metrics
    assert [r["t"] for r in res["sweep"]["per_t"]] == [50, 100, 200, 300]
    assert res["sweep"]["best"]["selection"] == "oracle (chosen on evaluation labels)"
    assert res["attack_config"]["t"] == 200
    # scores.npz aligned with the split (members first, then non-members)
    z = np.load(res["scores_path"])
    from privbench.runs import train as api

    method = api.make_method(cfg, res["run_dir"], "cpu")
    split = method.ctx.split
    assert z["index"].tolist() == list(split.members) + list(split.nonmembers)
    assert z["labels"].tolist() == [1] * 64 + [0] * 64
    assert z["scores"].shape == (128,) and np.allclose(z["sweep_t200"], z["scores"])
    from privbench.metrics.roc import auc

    assert abs(auc(z["scores"], z["labels"]) - res["metrics"]["auc"]) < 1e-12
    out_dir = __import__("pathlib").Path(res["scores_path"]).parent
    assert (out_dir / "roc.png").stat().st_size > 0 and out_dir.name.startswith("pia-model-")
    # the run directory's top-level copy
    top = json.loads((out_dir.parents[1] / "result.json").read_text())
    assert top["copy_of"] == str(out_dir / "result.json") and top["metrics"] == res["metrics"]
    assert (out_dir.parents[1] / "scores.npz").exists()
    # cached: same attack hash → reused without recomputation
    mtime = (out_dir / "result.json").stat().st_mtime_ns
    privbench_log.lines.clear()
    again = run_attack(cfg, "pia", "model", runs_dir=runs_dir, device="cpu").to_json()
    assert "attack cache hit" in privbench_log.text
    assert again["metrics"] == res["metrics"] and (out_dir / "result.json").stat().st_mtime_ns == mtime
    # another setting → another result directory
    other = run_attack(train_cfg(attack__t=100), "pia", None, runs_dir=runs_dir, device="cpu").to_json()
    assert other["scores_path"] != res["scores_path"]
    table = format_table([res, other], detailed=True)
    assert "AUC" in table and "oracle" in table and "pia" in table


def test_cli_attack_json_and_run_table(runs_dir):
    res = _cli(["attack", "--method", "centralized", "--attack", "secmi", "--json",
                "--set", "attack.secmi_offset=official"], runs_dir)
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert CLI_KEYS <= set(obj) and obj["figures"]["offset"] == "official"
    assert obj["figures"]["queries_per_record"] == 11
    res = _cli(["run", "--method", "centralized", "--attack", "loss"], runs_dir)
    assert res.exit_code == 0, res.output
    assert "AUC" in res.stdout and "centralized/model" in res.stdout and "loss" in res.stdout
    run_dirs = [p for p in runs_dir.iterdir() if p.name.startswith("centralized-digits-")]
    assert any((p / "report.md").exists() for p in run_dirs)


def test_memorization_and_reconstruction_through_the_runner(runs_dir):
    from privbench.reports.text import format_table
    from privbench.runs.attack import run_attack

    cfg = train_cfg(sample__sampler="ddim", attack__n_samples=16)
    mem = run_attack(cfg, "memorization", None, runs_dir=runs_dir, device="cpu").to_json()
    assert set(mem["metrics"]) == {"memorized_fraction", "n_generated"} and mem["metrics"]["n_generated"] == 16
    assert any(k.startswith("memorization-") for k in mem["artifacts"])
    rec = run_attack(train_cfg(attack__recon_t0=100, sample__ddim_steps=5), "reconstruction", None,
                     runs_dir=runs_dir, device="cpu").to_json()
    assert {"psnr", "ssim", "reid_rate", "reid_chance"} <= set(rec["metrics"])
    assert rec["metrics"]["reid_rate"] > 0.9 and rec["figures"]["uploads"] == "simulated"
    z = np.load(rec["scores_path"])
    assert "labels" not in z.files  # not a membership test
    text = format_table([mem, rec], detailed=True)
    assert "memorized" in text and "re-id" in text


def test_make_attack_validates_before_anything():
    from privbench.runs.attack import make_attack

    with pytest.raises(BadInput, match="unknown attack"):
        make_attack(train_cfg(), "nope")
    with pytest.raises(BadInput, match=r"\[0, 1000\)"):
        make_attack(train_cfg(attack__t=1000), "loss")
    make_attack(train_cfg(attack__t=999), "loss")
    make_attack(train_cfg(attack__t=0), "pia")
