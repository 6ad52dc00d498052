"""The Python API of the workflow (privbench.audit, report, check, bench, account): the commands' own code paths,
results as paths or privbench.attack objects, and one headline ε lower bound that reads the same in the audit
output, the report (HTML, CSV, LaTeX) and the API."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from markupsafe import escape
from report_fakes import write_result

import privbench
from privbench import api
from privbench.cli import main
from privbench.core.errors import BadInput
from privbench.metrics.roc import membership_metrics
from privbench.reports.collect import read_result

ROOT = Path(__file__).resolve().parents[2]


def _model(tmp_path: Path) -> Path:
    """One model (run folder ``model-run``) attacked by pia and loss: one family of 4 bounds."""
    rng = np.random.default_rng(0)
    n = 150
    labels = np.r_[np.ones(n, int), np.zeros(n, int)]
    run = tmp_path / "model-run"
    for attack, shift in (("pia", 1.5), ("loss", 0.7)):
        p = write_result(run / "attacks" / attack, rng.normal(size=2 * n) + shift * labels, labels, attack=attack)
        data = json.loads(p.read_text())
        data["run_dir"] = str(run)  # both attacks on the model of this run
        p.write_text(json.dumps(data))
    return run


def test_one_headline_reads_the_same_in_audit_report_and_api(tmp_path):
    run = _model(tmp_path)
    a = privbench.audit([run])
    h = a.headline
    assert h["family_size"] == 4 and h["bound_confidence"] == pytest.approx(1 - 0.05 / 4)
    assert h["epsilon_lower_bound"] == max(b["epsilon_lower_bound"] for b in h["bounds"]) > 0
    assert h["model"] == "fake/model" and "family-wise" in h["statement"] and "0.95" in h["statement"]
    # the details: each attack's bounds at 95 % alone, every one of them carrying the same headline
    assert len(a.audits) == 2 and all(x["headline"] == h for x in a.audits)

    cli = CliRunner().invoke(main, ["audit", str(run)])
    assert cli.exit_code == 0, cli.output
    assert cli.output.strip() == a.text.strip() and h["statement"] in cli.output
    js = json.loads(CliRunner().invoke(main, ["audit", str(run), "--json"]).output)
    assert [x["headline"] for x in js] == [h, h]

    out = tmp_path / "report"
    files = api.report([run], out)
    assert out / "index.html" in files
    sbs = pd.read_csv(out / "side_by_side.csv")
    assert len(sbs) == 1
    assert sbs["eps_lb"][0] == pytest.approx(h["epsilon_lower_bound"], rel=1e-5)
    assert sbs["eps_lb_statement"][0] == h["statement"]
    assert sbs["eps_lb"][0] == pytest.approx(max(sbs["eps_lb_cp"][0], sbs["eps_lb_one_run"][0]), rel=1e-5)
    aud = pd.read_csv(out / "audit.csv")
    assert aud["headline_eps_lb"].tolist() == pytest.approx([h["epsilon_lower_bound"]] * 2, rel=1e-5)
    page = (out / "index.html").read_text()
    assert str(escape(h["statement"])) in page  # as Jinja escapes it
    shown = f"{h['epsilon_lower_bound']:.2f}"
    tex = "\n".join(p.read_text() for p in (out / "tex").glob("*.tex"))
    assert shown in tex and shown in page


def test_results_may_be_what_privbench_attack_returns(tmp_path):
    from privbench.runs.external import InMemoryResult

    run = _model(tmp_path)
    mem = []
    for attack in ("pia", "loss"):
        r = read_result(run / "attacks" / attack / "result.json")
        s, y = r.load_scores()
        # privbench.attack's results carry the metrics of their scores (the fakes' are made up; written results are
        # verified against their scores)
        mem.append(InMemoryResult(replace(r.res, metrics=membership_metrics(s, y, bootstrap=0, seed=0)), s, y))
    from_paths, from_memory = privbench.audit([run]).headline, privbench.audit(mem).headline
    for key in ("epsilon_lower_bound", "attack", "bound", "family_size", "delta"):
        assert from_memory[key] == from_paths[key]
    assert all("privbench-results-" not in x["result"] for x in privbench.audit(mem).audits)  # no temporary path
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - {method: fake, target: model, attack: pia, metric: auc, max: 0.4}\n")
    res = privbench.check(mem, gates)
    assert not res.ok and len(res.breaches) == 1 and "privbench-results-" not in res.breaches[0]
    files = privbench.report(mem, tmp_path / "rep", ["csv"])
    assert (tmp_path / "rep" / "results" / "in-memory").is_dir() and tmp_path / "rep" / "side_by_side.csv" in files


def test_check_returns_breaches_and_raises_on_bad_gates(tmp_path):
    run = _model(tmp_path)
    ok = tmp_path / "ok.yaml"
    ok.write_text("gates:\n  - {method: fake, target: model, attack: pia, metric: auc, max: 0.9}\n")
    res = privbench.check([run], ok)
    assert res.ok and res.n_checked == 1 and res.breaches == []
    assert res.to_json() == {"ok": True, "n_checked": 1, "breaches": [], "optional_unmatched": []}
    bad = tmp_path / "bad.yaml"
    bad.write_text("gates: [ {method: fake\n")
    with pytest.raises(BadInput, match="bad.yaml"):
        privbench.check([run], bad)
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("gates:\n  - {method: fake, target: model, attack: pia, metric: nope, max: 1}\n")
    with pytest.raises(BadInput, match="unknown metric"):
        privbench.check([run], unknown)
    with pytest.raises(BadInput, match="neither a path"):
        privbench.check([42], ok)


def test_account_is_the_command():
    got = privbench.account("dpsgd", noise_multiplier=1.0, sample_rate=0.01, steps=100)
    cli = CliRunner().invoke(main, ["account", "dpsgd", "--noise-multiplier", "1.0", "--sample-rate", "0.01",
                                    "--steps", "100", "--json"])
    assert json.loads(cli.output)["epsilon"] == pytest.approx(got["epsilon"])
    ldp = privbench.account("ldp", clip=1.0, t0=500)
    assert ldp["epsilon"] and json.loads(CliRunner().invoke(main, ["account", "ldp", "--clip", "1", "--t0", "500",
                                                                   "--json"]).output)["epsilon"] == ldp["epsilon"]
    with pytest.raises(BadInput, match="choose from dpsgd, ldp"):
        privbench.account("rdp")
    with pytest.raises(BadInput, match="settings:"):
        privbench.account("dpsgd", noise_multiplier=1.0, sample_rate=0.01, steps=100, clip=1)
    with pytest.raises(BadInput, match="--noise-multiplier"):
        privbench.account("dpsgd", sample_rate=0.01, steps=100)


@pytest.mark.parametrize("name, argv", [
    ("audit", ["audit", "RUN"]),
    ("report", ["report", "RUN", "--out", "OUT"]),
    ("check", ["check", "--gates", "GATES", "RUN"]),
    ("bench", ["bench", "--suite", "tiny", "--out", "OUT"]),
    ("account", ["account", "dpsgd", "--noise-multiplier", "1", "--sample-rate", "0.01", "--steps", "10"]),
    ("account", ["account", "ldp", "--clip", "1", "--t0", "500"]),
])
def test_every_command_calls_its_api_function(tmp_path, monkeypatch, name, argv):
    """The commands parse options and print; the work is the API function's (the same code path)."""
    called = []

    def fake(*args, **kwargs):
        called.append((args, kwargs))
        raise BadInput("stop here")

    monkeypatch.setattr(api, name, fake)
    subs = {"RUN": str(tmp_path), "OUT": str(tmp_path / "out"), "GATES": str(tmp_path / "g.yaml")}
    r = CliRunner().invoke(main, [subs.get(a, a) for a in argv])
    assert called and r.exit_code == 2 and "stop here" in r.output


def test_bench_refuses_bad_options_before_running():
    with pytest.raises(BadInput, match="--address"):
        privbench.bench("tiny", executor=api.ExecutorOptions(address="auto"))
    with pytest.raises(BadInput, match="--address"):
        api.bench("tiny", executor=api.ExecutorOptions(address="auto"))
    with pytest.raises(BadInput, match="executor: expected 'local', 'ray', 'slurm' or privbench.api.ExecutorOptions"):
        privbench.bench("tiny", executor=2)
    with pytest.raises(BadInput, match="--set 'nokey'"):  # a string is one pair, not a list of its characters
        privbench.bench("tiny", sets="nokey")
    for suite in (None, {"name": "x"}):
        with pytest.raises(BadInput, match="--suite: expected a suite name or a YAML path"):
            privbench.bench(suite)


@pytest.mark.parametrize("call,needle", [
    (lambda: privbench.load_target(None), "run_dir: expected a path"),
    (lambda: privbench.load_target(5), "run_dir: expected a path"),
    (lambda: privbench.report(["x"], None), "out: expected a path"),
    (lambda: privbench.check(["x"], {"pia": {"auc": {"max": 0.9}}}), "--gates: expected a gates file name or a YAML"),
])
def test_a_path_argument_that_is_not_one_is_bad_input(call, needle):
    with pytest.raises(BadInput, match=needle):
        call()


def test_import_stays_light_and_bench_is_both_the_function_and_the_package():
    code = ("import sys, privbench\n"
            "heavy = [m for m in ('torch', 'scipy', 'pandas', 'diffusers') if m in sys.modules]\n"
            "import privbench.bench.runner as runner\n"
            "from privbench.bench.suite import find_gates\n"
            "print(heavy, callable(privbench.bench), privbench.bench.runner is runner)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] True True"
