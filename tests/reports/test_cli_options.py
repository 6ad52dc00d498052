"""Command-line options: --json on list/report/check, --version with the commit, shipped suites and gates by name,
sample --sampler/--steps (PFDM: DDIM in both stages), run printing its report, bench --inception-weights, and one
clear line naming the extra when an optional package is missing."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from helpers import train_cfg
from report_fakes import write_result

from privbench.cli import main

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_list_json():
    r = invoke("list", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert set(d) == {"methods", "attacks", "datasets", "presets"}
    assert {"pfdm", "centralized"} <= {e["name"] for e in d["methods"]}
    assert all(e["description"] for e in d["attacks"])
    keys = json.loads(invoke("list", "keys", "--json").stdout)["keys"]
    assert any(k["name"] == "sample.ddim_steps" and k["type"] == "int" for k in keys)


def test_version_names_the_commit_in_a_checkout():
    r = invoke("--version")
    assert r.exit_code == 0 and r.stdout.startswith("privbench, version ")
    if (ROOT / ".git").exists():
        assert re.search(r"\(commit [0-9a-f]{12}", r.stdout), r.stdout


def test_report_json_and_format_choice(tmp_path):
    y = np.r_[np.ones(40), np.zeros(40)]
    write_result(tmp_path / "runs" / "a", y + np.random.default_rng(0).normal(size=80), y)
    r = invoke("report", tmp_path / "runs", "--out", tmp_path / "rep", "--format", "markdown,csv", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["out"] == str(tmp_path / "rep")
    assert {Path(p).name for p in d["files"]} >= {"tables.md", "side_by_side.csv"}
    assert all(Path(p).is_file() for p in d["files"])
    assert not (tmp_path / "rep" / "index.html").exists() and not (tmp_path / "rep" / "tables.tex").exists()
    r = invoke("report", tmp_path / "runs", "--out", tmp_path / "rep", "--format", "latex,docx")
    assert r.exit_code == 2 and "docx" in r.stderr and "latex" in r.stderr


def test_check_json(tmp_path):
    y = np.r_[np.ones(40), np.zeros(40)]
    res = write_result(tmp_path / "runs" / "a", y + np.random.default_rng(0).normal(size=80), y,
                       metrics={"auc": 0.7})
    gates = tmp_path / "g.yaml"
    gates.write_text("gates:\n  - {method: fake, target: model, attack: pia, metric: auc, max: 0.9}\n"
                     "  - {method: other, target: model, attack: pia, metric: auc, max: 0.9, optional: true}\n")
    r = invoke("check", "--gates", gates, res, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["ok"], d["n_checked"], d["breaches"]) == (True, 1, [])
    assert len(d["optional_unmatched"]) == 1 and "other/model" in d["optional_unmatched"][0]
    gates.write_text("gates:\n  - {method: fake, target: model, attack: pia, metric: auc, max: 0.5}\n")
    r = invoke("check", "--gates", gates, res, "--json")
    d = json.loads(r.stdout)
    assert r.exit_code == 1 and d["ok"] is False and len(d["breaches"]) == 1 and "0.7" in d["breaches"][0]


def test_shipped_suites_and_gates_are_package_data(tmp_path, monkeypatch):
    import privbench
    from privbench.bench.suite import find_gates, load_suite
    from privbench.reports.gates import load_gates

    monkeypatch.chdir(tmp_path)                     # not the repository: found inside the package
    pkg = Path(privbench.__file__).parent
    for name in ("tiny", "paper", "test"):
        spec, path = load_suite(name)
        assert path.parent == pkg / "bench" / "suites" and spec["name"] == name
    assert find_gates("tiny") == pkg / "bench" / "gates" / "tiny.yaml" and len(load_gates("tiny")) >= 10
    spec, _ = load_suite("test")
    assert spec["preset"] == "test" and 1 <= len(spec["methods"]) <= 2 and 1 <= len(spec["attacks"]) <= 2
    # a suite of the working directory's benchmarks/suites comes first
    (tmp_path / "benchmarks" / "suites").mkdir(parents=True)
    (tmp_path / "benchmarks" / "suites" / "test.yaml").write_text("name: mine\nmethods: {centralized: {}}\n")
    assert load_suite("test")[0]["name"] == "mine"
    r = invoke("check", "--gates", "nosuchgates", tmp_path)
    assert r.exit_code == 2 and "available: tiny" in r.stderr


# ------------------------------------------------------------------------------------------ sampling

def test_sample_steps_need_ddim(tmp_path):
    r = invoke("sample", "--method", "centralized", "--preset", "test", "--steps", "5", "--runs-dir", tmp_path)
    assert r.exit_code == 2 and "--sampler ddim" in r.stderr
    assert not any(tmp_path.iterdir())                  # refused before anything was written
    r = invoke("sample", "--method", "centralized", "--preset", "test", "--sampler", "euler")
    assert r.exit_code == 2


def test_pfdm_pipeline_ddim_runs_steps_calls_per_stage(tmp_path, report_runs_dir, test_results):
    """`sample --sampler ddim --steps N` on PFDM's pipeline: N calls of the shared model, then N of the client's
    (instead of T + t0 DDPM calls)."""
    del test_results  # requested for its side effect: the test runs in report_runs_dir
    from privbench.runs import train as api

    method = api.train(train_cfg("pfdm", "test"), report_runs_dir, "cpu")
    tgt = method.load_target("pipeline:0")
    shared, client = tgt.stages
    calls = {"shared": 0, "client": 0}
    shared.model.register_forward_hook(lambda *a: calls.__setitem__("shared", calls["shared"] + 1))
    client.model.register_forward_hook(lambda *a: calls.__setitem__("client", calls["client"] + 1))
    images, _ = tgt.sample(4, seed=0, sampler="ddim", ddim_steps=7, batch_size=4)
    assert calls == {"shared": 7, "client": 7} and images.shape[0] == 4 and images.isfinite().all()

    out = tmp_path / "grid.png"
    r = invoke("sample", "--method", "pfdm", "--preset", "test", "--target", "pipeline:0", "--n", "4", "--sampler",
               "ddim", "--steps", "3", "--runs-dir", report_runs_dir, "--out", out, "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_prints_the_path_of_its_report(report_runs_dir, test_results):
    del test_results  # requested for its side effect: the test runs in report_runs_dir
    r = invoke("run", "--method", "centralized", "--attack", "loss", "--preset", "test", "--runs-dir",
               report_runs_dir, "--device", "cpu")
    assert r.exit_code == 0, r.output
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("report: ")][-1]
    page = Path(line.removeprefix("report: "))
    assert page.name == "index.html" and page.is_file()


# ------------------------------------------------------------------------------------------ FID, extras

SUITE = """
name: f
preset: test
methods: {centralized: {targets: [model], attacks: [loss]}}
samples: false
"""


def test_bench_inception_weights_are_checked_before_anything_runs(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE + "fid: false\n")
    r = invoke("bench", "--suite", suite, "--inception-weights", tmp_path / "w.pth", "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 2 and "computes no FID" in r.stderr
    suite.write_text(SUITE + "fid: {n_per_class: 2, n_overall: 0}\n")
    r = invoke("bench", "--suite", suite, "--inception-weights", tmp_path / "w.pth", "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 2 and "w.pth: file not found" in r.stderr
    assert not (tmp_path / "runs").exists()


def test_fid_settings_hash_names_the_extractor(tmp_path):
    """Records with Inception weights never reuse the default extractor's cache (and the default keeps its hash)."""
    from privbench.bench.plan import plan
    from privbench.bench.suite import fid_settings

    w = tmp_path / "pt_inception.pth"
    w.write_bytes(b"x")
    spec = {"name": "f", "preset": "test", "methods": {"centralized": {"targets": ["model"], "attacks": ["loss"]}},
            "fid": {"n_per_class": 2}, "samples": False}
    base = [c for c in plan(spec, preset=None, sets=[], runs_dir=tmp_path, device="cpu", validate_methods=False)
            if c.kind == "fid"][0]
    spec["fid"]["inception_weights"] = str(w)
    assert fid_settings(spec)["inception_weights"] == str(w)
    incep = [c for c in plan(spec, preset=None, sets=[], runs_dir=tmp_path, device="cpu", validate_methods=False)
             if c.kind == "fid"][0]
    assert base.settings_hash != incep.settings_hash and base.result_path != incep.result_path


def test_missing_extras_name_the_extra(tmp_path, monkeypatch):
    """Without torch-fidelity (opacus, dp-accounting) a command that needs it exits 2 with one line naming the
    extra, before anything is written."""
    for mod in ("torch_fidelity", "opacus", "dp_accounting"):
        monkeypatch.setitem(sys.modules, mod, None)     # `import mod` raises ImportError
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE + "fid: {n_per_class: 2}\n")
    r = invoke("bench", "--suite", suite, "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 2 and "pip install 'privbench[fid]'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
    r = invoke("account", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "0.01", "--steps", "100")
    assert r.exit_code == 2 and "pip install 'privbench[dp]'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = invoke("account", "dpsgd", "--epsilon", "5", "--sample-rate", "0.01", "--steps", "100", "--accountant", "pld")
    assert r.exit_code == 2 and "privbench[dp]" in r.stderr


def test_text_tables_say_na_for_a_tpr_the_nonmember_count_cannot_resolve():
    """The bench/attack text tables print "n/a" for a TPR at an FPR below 1/(non-members), as the report does."""
    from privbench.reports.text import _tpr

    m = {"tpr_at_0_1pct_fpr": 0.667, "tpr_at_1pct_fpr": 0.667}
    assert _tpr(m, "tpr_at_0_1pct_fpr", 256) == "n/a"
    assert _tpr(m, "tpr_at_0_1pct_fpr", 1000) == "0.667"
    assert _tpr(m, "tpr_at_1pct_fpr", 256) == "0.667"
    assert _tpr(m, "tpr_at_1pct_fpr", 99) == "n/a"
