"""`privbench bench`: a cached, resumable grid validated before it runs; the side-by-side table."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from privbench.bench.plan import plan
from privbench.bench.runner import run_suite
from privbench.bench.suite import load_suite
from privbench.cli import main
from privbench.core.errors import BadInput

SUITE = """
name: t
preset: test
device: cpu
datasets: [digits]
seeds: [0]
attacks: [pia]
fid: false
samples: false
methods:
  pfdm: {targets: [shared], attacks: [pia, loss]}
  centralized: {targets: [model], attacks: [pia, loss]}
"""


@pytest.mark.usefixtures("test_results")
def test_bench_runs_resumes_and_writes_the_table(tmp_path, report_runs_dir):
    suite = tmp_path / "t.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "bench"
    r = CliRunner().invoke(main, ["bench", "--suite", str(suite), "--out", str(out), "--runs-dir", str(report_runs_dir),
                                  "--json"])
    assert r.exit_code == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["counts"] == {"done": 4, "skipped": 0, "failed": 0, "pending": 0}
    bench = json.loads((out / "bench.json").read_text())
    assert bench["finished"] and bench["roles"] == {"pfdm": "private", "centralized": "baseline"}
    sbs = pd.read_csv(out / "side_by_side.csv")
    assert list(sbs["method"]) == ["pfdm", "centralized"]          # private first, then the baselines
    assert sbs.loc[0, "formal_epsilon"] == pytest.approx(8.774, abs=1e-3)
    assert {"pia_auc", "loss_auc", "eps_lb_cp", "fid_majority"} <= set(sbs.columns)
    # what the cells logged (a header per cell, the attacks' cache hits on the shared test targets) is in
    # bench.log, not on the terminal
    log = (out / "bench.log").read_text()
    assert log.count("--- ") == 4 and "centralized/model loss" in log and "cache hit" in log
    assert "cache hit" not in r.stderr and "--- " not in r.stderr

    # resume: remove one finished attack; only that cell runs again, the others are skipped as finished
    cell = next(c for c in bench["cells"] if c["method"] == "centralized" and c["attack"] == "loss")
    shutil.rmtree(Path(cell["result_path"]).parent)
    res2 = run_suite(str(suite), out=str(out), runs_dir=str(report_runs_dir), device="cpu")
    reasons = {(c["method"], c["attack"]): c["reason"] for c in res2["cells"]}
    assert reasons[("centralized", "loss")] is None                # recomputed
    assert all("earlier run" in v for k, v in reasons.items() if k != ("centralized", "loss"))
    assert Path(cell["result_path"]).is_file()

    # the bench directory renders into a report
    r = CliRunner().invoke(main, ["report", str(out), "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.stderr
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "suite t" in html and "pfdm" in html and "centralized" in html

    # 64 non-members resolve neither 1 % nor 0.1 % FPR: bench.json's summaries say n/a (null), as the tables do
    assert all(c["summary"]["tpr_at_1pct_fpr"] is None and c["summary"]["tpr_at_0_1pct_fpr"] is None
               for c in bench["cells"])
    # a finished cell whose result file is gone is said, not silently left out
    edited = tmp_path / "edited"
    shutil.copytree(out, edited)
    bench["cells"][0]["result_path"] = str(tmp_path / "gone" / "result.json")
    (edited / "bench.json").write_text(json.dumps(bench))
    r = CliRunner().invoke(main, ["report", str(edited), "--out", str(tmp_path / "rep2")])
    assert r.exit_code == 0 and "1 finished attack cell(s) have no result file" in r.stderr, r.stderr
    # a bench.json nested beyond what json parses is one line, exit 2
    (edited / "bench.json").write_text("[" * 100_000 + "]" * 100_000)
    for cmd in (["report", str(edited), "--out", str(tmp_path / "rep3")], ["audit", str(edited)]):
        r = CliRunner().invoke(main, cmd)
        assert r.exit_code == 2 and r.stderr.strip().endswith("bench.json: nested too deeply to read"), r.stderr


@pytest.mark.parametrize("extra,args,needle", [
    ("  centralized2: {}\n", [], "unknown method 'centralized2'"),
    ("colour: red\n", [], "unknown key"),
    ("", ["--set", "train.bogus=1"], "train.bogus"),
    ("  local: {targets: [global]}\n", [], "--target 'global'"),
    ("  local: {attacks: [pia, nosuch]}\n", [], "unknown attack 'nosuch'"),
    ("fid: {sampler: euler}\n", [], "fid.sampler"),
])
def test_bad_suites_exit_2_before_running(tmp_path, extra, args, needle):
    suite = tmp_path / "t.yaml"
    key = extra.split(":", 1)[0] + ":"  # a top-level key the extra line redefines replaces SUITE's (no duplicate key)
    base = "".join(line for line in SUITE.splitlines(keepends=True) if not line.startswith(key)) \
        if not extra.startswith(" ") else SUITE
    suite.write_text(base + extra)
    r = CliRunner().invoke(main, ["bench", "--suite", str(suite), "--runs-dir", str(tmp_path / "runs"), *args])
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert needle in r.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("name", ["privacy-utility", "privacy-utility-mnist"])
def test_the_privacy_utility_suites_plan_every_method_at_every_epsilon(name):
    spec, _ = load_suite(name)
    cells = plan(spec, preset=None, sets=[], runs_dir="/nonexistent-runs", device="cpu", validate_methods=False)
    got = {(c.variant or c.method, float(c.epsilon) if c.epsilon else c.epsilon, c.kind, c.seed) for c in cells}
    for m in ("dpdm", "dpdm-public", "dpdm-public-lora"):
        for e in (1.0, 4.0, 10.0, 32.0):
            assert {(m, e, "attack", 0), (m, e, "utility", 0)} <= got, (m, e)
        assert {(m, 10.0, "utility", s) for s in (0, 1, 2)} <= got, m
    for ref in ("centralized", "finetune", "public-only"):
        assert (ref, None, "utility", 0) in got, ref
    assert {("finetune", None, "utility", s) for s in (0, 1, 2)} <= got


def test_shipped_suites_load():
    for name in ("tiny", "paper"):
        spec, path = load_suite(name)
        assert path.name == f"{name}.yaml"
        assert {"pfdm", "dpdm", "dpsad", "centralized", "feddm", "local"} <= set(spec["methods"])
    spec, _ = load_suite("tiny-references")
    cells = plan(spec, preset=None, sets=[], runs_dir="/nonexistent-runs", device="cpu", validate_methods=False)
    # every membership attack, each reference-model attack in both pools
    assert {c.attack for c in cells} >= {"lira", "lira@online", "rmia", "rmia@online", "gsa", "gsa@online", "sima",
                                         "secmi", "secmi@paper", "secmi-nn", "pia", "pian", "loss",
                                         "lira@sima", "rmia@sima", "sima@mc", "qmia", "qmia@sima"}
    with pytest.raises(BadInput, match="available"):
        load_suite("nosuchsuite")


def test_tiny_suite_plans_every_method_and_attack(tmp_path):
    """The whole tiny grid validates (every name, key, target and attack) without training anything."""
    spec, _ = load_suite("tiny")
    cells = plan(spec, preset=None, sets=[], runs_dir=tmp_path / "runs", device="cpu", validate_methods=False)
    attacks = {c.attack for c in cells if c.kind == "attack"}
    assert attacks == {"loss", "secmi", "secmi@paper", "secmi-nn", "pia", "pian", "sima", "memorization",
                       "reconstruction", "lira", "rmia", "gsa"}
    # the reference-model attacks on the private targets with a formal or conditional epsilon
    assert {(c.method, c.target) for c in cells if c.attack == "lira"} == {("pfdm", "shared"), ("dpdm", "model"),
                                                                          ("dpsad", "student")}
    assert {c.method for c in cells} == {"pfdm", "dpdm", "dpsad", "centralized", "feddm", "local"}
    assert all(c.status == "pending" for c in cells)
    assert not (tmp_path / "runs").exists()


def test_paper_suite_plans(tmp_path, monkeypatch):
    """Every name, key, target and attack of the paper suite validates (datasets stubbed: no download here; the DP
    methods' noise calibration is left to the run)."""
    import torch

    import privbench.models.method as base

    monkeypatch.setattr(base.RunContext, "dataset",
                        property(lambda _self: (torch.zeros(10, 3, 32, 32), torch.zeros(10, dtype=torch.long))))
    spec, _ = load_suite("paper")
    cells = plan(spec, preset=None, sets=[], runs_dir=tmp_path / "runs", device="cpu", validate_methods=False)
    assert {(c.method, c.dataset) for c in cells} >= {("pfdm", "cifar10"), ("dpdm", "mnist"), ("dpsad", "celeba")}
    pf = next(c for c in cells if c.method == "pfdm")
    assert (pf.cfg.pfdm.clip, pf.cfg.pfdm.t0, pf.cfg.clients.n_clients, pf.cfg.dp.delta) == (10.0, 690, 10, 1e-5)
    sad = next(c for c in cells if c.method == "dpsad" and c.dataset == "celeba")
    assert sad.cfg.diffusion.num_timesteps == 500 and sad.cfg.data.resolution == 64


@pytest.mark.usefixtures("test_results")
def test_changed_sampling_settings_redraw_grids_and_fids(tmp_path, report_runs_dir):
    """A cached grid or FID drawn with other sampler settings is not reused (their cell ids and files say how
    they were drawn)."""
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE.replace("fid: false", "fid: {client: 0, n_per_class: 2, n_overall: 8, sampler: ddim}")
                     .replace("samples: false", "samples: {n: 4}")
                     .replace("  centralized: {targets: [model], attacks: [pia, loss]}\n", "")
                     .replace("attacks: [pia, loss]}", "attacks: [pia]}") + "set: {sample.sampler: ddim, sample.ddim_steps: 4}\n")
    runs = ["--suite", str(suite), "--runs-dir", str(report_runs_dir), "--out", str(tmp_path / "bench"), "--json"]
    cells = []
    for sets in ([], [], ["--set", "sample.ddim_steps=3"]):
        r = CliRunner().invoke(main, ["bench", *runs, *sets])
        assert r.exit_code == 0, r.stderr
        cells.append({c["kind"]: c for c in json.loads(r.stdout)["cells"]})
    assert "earlier run" in cells[1]["fid"]["reason"] and "earlier run" in cells[1]["samples"]["reason"]
    # other sampling settings: the FID goes to another file, the grid is redrawn, and each says how it was drawn
    assert cells[2]["fid"]["reason"] is None and cells[2]["samples"]["reason"] is None
    assert cells[2]["fid"]["result_path"] != cells[0]["fid"]["result_path"]
    assert json.loads(Path(cells[2]["fid"]["result_path"]).read_text())["sampler"] == "ddim"
    side = json.loads(Path(cells[2]["samples"]["result_path"]).with_suffix(".json").read_text())
    assert side["ddim_steps"] == 3 and side["sampler"] == "ddim"


@pytest.mark.parametrize("name", ["seeds-mnist", "seeds-mnist-quick", "clients-mnist"])
def test_the_seeds_suites_claims_select_one_row_each(name):
    """Each claim of the papers' suites names cells of exactly one grid row on each side (checked as `bench` checks
    it before anything trains), and the datasets are the real MNIST ones."""
    from privbench.bench.paper_claims import check_claims, parse_claims

    spec, _ = load_suite(name)
    cells = plan(spec, preset=None, sets=[], runs_dir="/nonexistent-runs", device="cpu", validate_methods=False)
    claims = parse_claims(spec["claims"])
    assert {c.id for c in claims} >= ({"minority-2-clients", "minority-8-clients"} if name == "clients-mnist"
                                      else {"t1-minority", "t1-majority", "attack-shared"})
    check_claims(claims, cells)
    assert {c.dataset for c in cells} <= {"mnist5k", "colored-mnist5k"}
