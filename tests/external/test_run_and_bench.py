"""``privbench run --model`` and a suite's ``external:`` targets in ``privbench bench``."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from ext_helpers import cli, digits_split, files_under, tiny_unet, write_npz


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny untrained diffusers pipeline and 24 + 24 digits records beside it (fast: nothing is trained)."""
    from diffusers import DDPMPipeline, DDPMScheduler

    root = tmp_path_factory.mktemp("extrun")
    (xm, ym), (xn, yn), _ = digits_split(24, 24, seed=1)
    DDPMPipeline(unet=tiny_unet(0), scheduler=DDPMScheduler(num_train_timesteps=1000)).save_pretrained(
        str(root / "pipe"))
    write_npz(root / "members.npz", xm, ym)
    write_npz(root / "nonmembers.npz", xn, yn)
    return root


def _ext_args(root: Path) -> list:
    return ["--model", root / "pipe", "--members", root / "members.npz", "--nonmembers", root / "nonmembers.npz"]


def _scores(result_json: str | Path) -> np.ndarray:
    with np.load(json.loads(Path(result_json).read_text())["scores_path"]) as z:
        return z["scores"]


def test_run_model_writes_a_report_prints_its_path_and_matches_attack_model(model, tmp_path):
    code, out, err = cli("run", *_ext_args(model), "--attack", "pia", "--runs-dir", tmp_path / "a", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["method"] == "external" and res["target"] == "pipe" and res["attack"] == "pia"  # its folder's name
    page = Path(res["report"]["rendered"][[p.endswith("index.html") for p in res["report"]["rendered"]].index(True)])
    assert page.is_file() and page.parent == Path(res["run_dir"]) / "report"
    assert (Path(res["run_dir"]) / "report.md").is_file()
    # the human output ends with the report's path
    code, out, err = cli("run", *_ext_args(model), "--attack", "pia", "--runs-dir", tmp_path / "a")
    assert code == 0, err
    assert out.rstrip().splitlines()[-1] == f"report: {page}"
    assert "attack cache hit" in err
    # the same attack through `attack --model`, in another run store: recomputed, equal scores
    code, out, err = cli("attack", *_ext_args(model), "--attack", "pia", "--runs-dir", tmp_path / "b", "--json")
    assert code == 0, err
    other = json.loads(out)
    assert Path(other["run_dir"]).name == Path(res["run_dir"]).name  # same inputs, same external-<hash>
    np.testing.assert_array_equal(_scores(Path(other["run_dir"]) / "result.json"),
                                  _scores(Path(res["run_dir"]) / "result.json"))
    assert other["metrics"]["auc"] == res["metrics"]["auc"]


def test_reference_model_attacks_are_refused_before_anything_is_written(model, tmp_path):
    for command in ("attack", "run"):
        code, out, err = cli(command, *_ext_args(model), "--attack", "lira", "--runs-dir", tmp_path / "r")
        assert code == 2 and err.count("\n") == 1 and "reference models" in err
    assert not (tmp_path / "r").exists()


def test_run_refuses_method_and_model_together(model, tmp_path):
    code, out, err = cli("run", "--method", "centralized", *_ext_args(model), "--attack", "pia",
                         "--runs-dir", tmp_path / "r")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--method" in err and "--model" in err
    code, out, err = cli("run", "--attack", "pia", "--members", model / "members.npz", "--runs-dir", tmp_path / "r")
    assert code == 2 and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def _suite(folder: Path, model_root: Path, entry: str | None = None, name: str = "ext") -> Path:
    """A suite in ``folder`` naming the model and records by paths relative to the suite file."""
    folder.mkdir(parents=True, exist_ok=True)
    rel = Path("..") / model_root.name if folder.parent == model_root.parent else model_root
    entry = entry or (f"{{model: {rel}/pipe, members: {rel}/members.npz, nonmembers: {rel}/nonmembers.npz, "
                      f"attacks: [pia, loss]}}")
    p = folder / "suite.yaml"
    p.write_text(f"name: {name}\npreset: tiny\ndevice: cpu\nseeds: [0]\nset: {{train.steps: 10}}\n"
                 f"external:\n  my-model: {entry}\n")
    return p


def test_suite_external_target_runs_through_bench_and_reruns_from_cache(model, tmp_path):
    suite = _suite(model.parent / f"{model.name}-suite", model)
    runs = tmp_path / "runs"
    code, out, err = cli("bench", "--suite", suite, "--runs-dir", runs, "--json")
    assert code == 0, err
    res = json.loads(out)
    cells = res["cells"]
    assert [(c["kind"], c["method"], c["target"], c["attack"], c["role"], c["status"]) for c in cells] == [
        ("attack", "external", "my-model", "pia", "external", "done"),
        ("attack", "external", "my-model", "loss", "external", "done")]
    with open(res["tables"]["side_by_side.csv"]) as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 1  # both attacks on one row: one model under test
    row = rows[0]
    assert (row["role"], row["method"], row["target"]) == ("external", "external", "my-model")
    assert float(row["pia_auc"]) == pytest.approx(cells[0]["summary"]["auc"])
    assert float(row["loss_auc"]) == pytest.approx(cells[1]["summary"]["auc"])
    with open(res["tables"]["results.csv"]) as fh:
        assert {(r["role"], r["target"], r["attack"]) for r in csv.DictReader(fh)} == {
            ("external", "my-model", "pia"), ("external", "my-model", "loss")}
    before = sorted(p.name for p in runs.iterdir())

    # a rerun finds every cell finished; a fresh bench folder finds the runs cached
    code, out, err = cli("bench", "--suite", suite, "--runs-dir", runs, "--json")
    assert code == 0, err
    assert {c["reason"] for c in json.loads(out)["cells"]} == {"finished in an earlier run of this bench"}
    code, out, err = cli("bench", "--suite", suite, "--runs-dir", runs, "--out", tmp_path / "fresh", "--json")
    assert code == 0, err
    assert {c["reason"] for c in json.loads(out)["cells"]} == {"cached"}
    assert sorted(p.name for p in runs.iterdir()) == before
    # the bench's cells are `privbench attack --model`'s runs: the same request is a cache hit
    code, out, err = cli("attack", *_ext_args(model), "--attack", "pia", "--target", "my-model",
                         "--runs-dir", runs, "--json")
    assert code == 0 and "attack cache hit" in err
    assert json.loads(out)["run_dir"] == cells[0]["run_dir"]
    # and the report renders the bench
    code, out, err = cli("report", res["out"], "--out", tmp_path / "report", "--format", "html,csv")
    assert code == 0, err
    assert "my-model" in (tmp_path / "report" / "index.html").read_text()


@pytest.mark.parametrize("entry, says", [
    ("{{model: missing/pipe, members: {M}, nonmembers: {N}}}", "no such file or directory"),
    ("{{model: {P}, members: {M}, nonmembers: {N}, atacks: [pia]}}", "unknown key(s) atacks"),
    ("{{model: {P}, members: {M}, nonmembers: {M}}}", "share 24 records"),
    ("{{model: {P}, members: {M}}}", "give 'members' and 'nonmembers'"),
    ("{{model: {P}, members: {M}, nonmembers: {N}, attacks: [reconstruction]}}", "reconstructs records"),
    ("{{model: {P}, members: {M}, nonmembers: {N}, set: {{train.steps: 3}}}}", "only attack.*, sample.* and metrics.*"),
    ("{{model: {P}, members: {M}, nonmembers: {N}, attacks: [lira]}}", "needs reference models"),
])
def test_bad_external_entries_are_one_line_exit_2_and_write_nothing(model, tmp_path, entry, says):
    entry = entry.format(P=model / "pipe", M=model / "members.npz", N=model / "nonmembers.npz")
    suite = _suite(tmp_path / "s", model, entry)
    runs = tmp_path / "runs"
    code, out, err = cli("bench", "--suite", suite, "--runs-dir", runs)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and says in err, err
    assert not runs.exists()
    assert files_under(tmp_path / "s") == [suite]


def test_bad_external_name_is_refused(model, tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"name: x\nexternal:\n  ../up: {{model: {model / 'pipe'}, members: {model / 'members.npz'}, "
                     f"nonmembers: {model / 'nonmembers.npz'}}}\n")
    code, out, err = cli("bench", "--suite", suite, "--runs-dir", tmp_path / "runs")
    assert code == 2 and err.count("\n") == 1 and "not a valid name" in err
    assert not (tmp_path / "runs").exists()
