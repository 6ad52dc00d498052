"""Audit a model privbench did not train, through the CLI: a memorizing diffusers DDPMPipeline vs. the same
architecture at random initialisation; the run directory feeds audit, report and check."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from ext_helpers import cli

GATES = """gates:
  - {method: external, target: model, attack: pia, metric: auc, max: 0.75}
"""


def _attack(model, members, nonmembers, runs, *extra):
    # --target: one name for both models, so that one gate checks each (the default is the model's folder name)
    code, out, err = cli("attack", "--model", model, "--members", members, "--nonmembers", nonmembers,
                         "--attack", "pia", "--runs-dir", runs, "--device", "cpu", "--json", "--target", "model",
                         *extra)
    assert code == 0, err
    return json.loads(out)


def test_memorizing_pipeline_leaks_random_init_does_not_and_check_gates_it(memorized, tmp_path):
    runs = tmp_path / "runs"
    m = memorized
    leak = _attack(m["pipeline"], m["members"], m["nonmembers"], runs)
    null = _attack(m["random"], m["members"], m["nonmembers"], runs)
    auc, ci = leak["metrics"]["auc"], leak["metrics"]["ci95"]["auc"]
    null_ci = null["metrics"]["ci95"]["auc"]
    assert auc >= 0.9 and ci[0] > 0.75, leak["metrics"]            # clearly above chance
    assert null_ci[0] <= 0.5 <= null_ci[1], null["metrics"]         # random init: the CI contains 0.5
    assert ci[0] > null_ci[1], "the trained model's CI lies above the untrained one's"
    # an ordinary run directory: result.json, scores.npz (aligned, members first), roc.png, provenance
    run = Path(leak["run_dir"])
    assert run.name.startswith("external-") and run.parent == runs
    for f in ("result.json", "scores.npz", "roc.png", "provenance.json"):
        assert (run / f).is_file(), f
    z = np.load(run / "scores.npz")
    assert list(z["labels"]) == [1] * 32 + [0] * 32 and np.allclose(z["scores"], leak_scores(leak))
    prov = leak["provenance"]["model"]
    assert prov["format"] == "diffusers-pipeline" and prov["prediction_type"] == "epsilon"
    assert prov["scheduler"]["source"].endswith("scheduler/scheduler_config.json")
    assert len(prov["weights_sha256"]) == 64 and leak["privacy"] is None
    # the same request reuses the run; another attack setting is another run
    again = _attack(m["pipeline"], m["members"], m["nonmembers"], runs)
    assert again["run_dir"] == leak["run_dir"] and again["metrics"] == leak["metrics"]
    other = _attack(m["pipeline"], m["members"], m["nonmembers"], runs, "--set", "attack.t=100")
    assert other["run_dir"] != leak["run_dir"]
    # check: the gate holds for the untrained model and is breached (exit 1) by the memorizing one
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES)
    code, out, err = cli("check", "--gates", gates, null["run_dir"])
    assert code == 0, err
    code, out, err = cli("check", "--gates", gates, leak["run_dir"])
    assert code == 1 and "BREACH" in err and "auc" in err
    loose = tmp_path / "loose.yaml"
    loose.write_text(GATES.replace("max: 0.75", "max: 1.0"))
    assert cli("check", "--gates", loose, leak["run_dir"])[0] == 0
    # audit and report read the run like any other
    code, out, err = cli("audit", "--json", leak["run_dir"])
    assert code == 0, err
    assert json.loads(out)["target"] == "model"
    code, out, err = cli("report", leak["run_dir"], "--out", tmp_path / "report")
    assert code == 0, err
    assert (tmp_path / "report" / "index.html").is_file() or any((tmp_path / "report").glob("*.html"))


def leak_scores(res):
    return np.load(res["scores_path"])["scores"]


def test_memorization_samples_through_the_models_own_scheduler(memorized, tmp_path):
    m = memorized
    code, out, err = cli("attack", "--model", m["pipeline"], "--members", m["members"], "--nonmembers",
                         m["nonmembers"], "--attack", "memorization", "--set", "attack.n_samples=6",
                         "--runs-dir", tmp_path, "--device", "cpu", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["kind"] == "memorization" and res["metrics"]["n_generated"] == 6
    assert res["figures"]["n_training_records"] == 32          # compared with the members
    z = np.load(res["scores_path"])
    assert z["ratio"].shape == (6,) and (z["ratio"] > 0).all()
