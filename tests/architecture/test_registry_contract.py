"""The registry contract: every registered attack runs on an analytic fake target, every method trains on the
`test` preset and yields its declared targets, every accountant answers the standard setting; and adding an
attack is one file (a toy attack dropped into a copy of the package runs through attack, bench, report, check)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from privbench.core.registry import ACCOUNTANTS, ATTACKS, METHODS
from privbench.testing import CheckSkipped, check_attack, check_method

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("name", ATTACKS.names())
def test_every_attack_runs_on_an_analytic_target(name):
    """privbench.testing.check_attack — the check a plug-in author runs on their own attack class."""
    try:
        check_attack(ATTACKS.get(name).factory)
    except CheckSkipped as e:  # text-to-image only (tests/latent), or white-box with references
        pytest.skip(str(e))


@pytest.mark.parametrize("name", METHODS.names())
def test_every_method_trains_and_yields_its_targets(name, runs_dir):
    """privbench.testing.check_method — the check a plug-in author runs on their own method class."""
    check_method(METHODS.get(name).factory, runs_dir)


def test_the_shipped_checks_fail_a_broken_class():
    """check_attack refuses an unregistered class and one whose scores do not separate a memoriser's members."""
    from privbench.attacks.base import Attack, AttackOutput
    from privbench.attacks.loss import LossAttack

    class Unregistered(Attack):
        name = "not-registered"

    with pytest.raises(AssertionError, match="not registered"):
        check_attack(Unregistered)

    class Backwards(LossAttack):  # registered under the name of loss for the check, scores negated
        def run(self, target, records, env=None):
            out = super().run(target, records, env)
            return AttackOutput(scores=-np.asarray(out.scores), nfe_per_record=out.nfe_per_record)

    entry = ATTACKS._entries["loss"]
    ATTACKS._entries["loss"] = type(entry)(entry.name, Backwards, entry.description)
    Backwards.name = "loss"
    try:
        with pytest.raises(AssertionError, match="AUC"):
            check_attack(Backwards)
    finally:
        ATTACKS._entries["loss"] = entry


@pytest.mark.parametrize("name", ACCOUNTANTS.names())
def test_every_accountant_answers_the_standard_setting(name):
    acc = ACCOUNTANTS.get(name).factory
    if acc.kind == "dpsgd":
        eps = acc.epsilon(1.0, 0.01, 1000, 1e-5)  # sigma = 1, q = 0.01, 1000 steps: PRV/PLD ~1.3, RDP ~2.1
        assert eps > 1.0 and eps < 2.5, (name, eps)
    else:
        eps = acc.epsilon(10.0, 11.1246, 1e-5)    # PFDM's default upload: C = 10, t0 = 690
        assert 8.0 < eps < 11.0, (name, eps)


def run_cli(args, cwd, env, ok=(0,)):
    """``python -m privbench ARGS`` in a fresh process; its exit code must be one of ``ok``."""
    r = subprocess.run([sys.executable, "-m", "privbench", *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode in ok, (args, r.stdout[-2000:], r.stderr[-2000:])
    return r


def run_cli_session(commands, cwd, env) -> list[dict]:
    """``commands`` (lists of CLI args) run one after the other in ONE fresh process (tests/architecture/
    cli_session.py); each result {args, code, stdout, stderr}."""
    spec = Path(cwd) / "commands.json"
    spec.write_text(json.dumps([[str(a) for a in c] for c in commands]))
    r = subprocess.run([sys.executable, str(HERE / "cli_session.py"), str(spec)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _codes(results, *expected) -> None:
    for res, ok in zip(results, expected):
        assert res["code"] == ok, (res["args"], res["stdout"][-2000:], res["stderr"][-2000:])


def test_a_new_attack_is_one_file(tmp_path):
    """Copy the package, drop tests/architecture/toy/toy_attack.py into its attacks/ folder and touch nothing else:
    the toy attack is listed, runs through `attack`, `bench`, `report` and `check`."""
    work = tmp_path / "src"
    shutil.copytree(ROOT / "privbench", work / "privbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "tests" / "architecture" / "toy" / "toy_attack.py", work / "privbench" / "attacks" / "toy.py")
    env = {**os.environ, "PYTHONPATH": str(work), "OMP_NUM_THREADS": "1", "PRIVBENCH_PROGRESS": "0"}
    runs = tmp_path / "runs"

    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\npreset: test\ndevice: cpu\nfid: false\nsamples: false\n"
                     "methods:\n  centralized: {targets: [model], attacks: [toy, pia]}\n")
    gates, breach = tmp_path / "g.yaml", tmp_path / "breach.yaml"
    gates.write_text("gates:\n  - {method: centralized, target: model, attack: toy, metric: auc, max: 1.0}\n")
    breach.write_text("gates:\n  - {method: centralized, target: model, attack: toy, metric: auc, max: -0.5}\n")
    res = run_cli_session([
        ["list", "attacks"],
        ["attack", "--method", "centralized", "--attack", "toy", "--preset", "test", "--runs-dir", runs,
         "--set", "attack.toy_t=50", "--json"],
        ["bench", "--suite", suite, "--runs-dir", runs, "--out", tmp_path / "bench"],
        ["report", tmp_path / "bench", "--out", tmp_path / "rep"],
        ["check", "--gates", gates, tmp_path / "bench"],
        ["check", "--gates", breach, tmp_path / "bench"]], tmp_path, env)
    _codes(res, 0, 0, 0, 0, 0, 1)
    assert "toy" in res[0]["stdout"]
    attack = json.loads(res[1]["stdout"])
    assert attack["attack"] == "toy" and 0.0 <= attack["metrics"]["auc"] <= 1.0
    assert attack["attack_config"]["toy_t"] == 50
    sbs = (tmp_path / "bench" / "side_by_side.csv").read_text()
    assert "toy_auc" in sbs.splitlines()[0]
    assert "toy" in (tmp_path / "rep" / "index.html").read_text()
    assert "BREACH" in res[5]["stderr"]


def test_a_plugin_package_registers_through_its_entry_point(tmp_path):
    """A third-party package (outside privbench's tree) declares the toy attack under the `privbench.attacks`
    entry point; once pip-installed (offline, into a target folder on PYTHONPATH) it is listed, runs from the CLI
    and from a bench suite, and `check` gates it — with privbench itself untouched."""
    pkg = tmp_path / "pkg"
    (pkg / "privbench_toy_plugin").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "architecture" / "toy" / "toy_attack.py", pkg / "privbench_toy_plugin" / "__init__.py")
    (pkg / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "privbench-toy-plugin"\nversion = "0.1"\n\n'
        '[project.entry-points."privbench.attacks"]\ntoy = "privbench_toy_plugin:ToyAttack"\n\n'
        '[tool.setuptools]\npackages = ["privbench_toy_plugin"]\n')
    site_dir = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k != "PRIVBENCH_PLUGINS"}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", OMP_NUM_THREADS="1", PRIVBENCH_PROGRESS="0")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(site_dir), str(pkg)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert list(site_dir.glob("privbench_toy_plugin-0.1.dist-info/entry_points.txt"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(site_dir)])
    runs = tmp_path / "runs"
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\npreset: test\ndevice: cpu\nfid: false\nsamples: false\n"
                     "methods:\n  centralized: {targets: [model], attacks: [toy]}\n")
    gates = tmp_path / "g.yaml"
    gates.write_text("gates:\n  - {method: centralized, target: model, attack: toy, metric: auc, max: -0.5}\n")
    res = run_cli_session([
        ["list", "attacks"],
        ["attack", "--method", "centralized", "--attack", "toy", "--preset", "test", "--runs-dir", runs, "--json"],
        ["bench", "--suite", suite, "--runs-dir", runs, "--out", tmp_path / "bench"],
        ["check", "--gates", gates, tmp_path / "bench"]], tmp_path, env)
    _codes(res, 0, 0, 0, 1)
    assert "toy" in res[0]["stdout"] and "failed to load" not in res[0]["stderr"]
    attack = json.loads(res[1]["stdout"])
    assert attack["attack"] == "toy" and 0.0 <= attack["metrics"]["auc"] <= 1.0
    assert "toy_auc" in (tmp_path / "bench" / "side_by_side.csv").read_text().splitlines()[0]
    assert "BREACH" in res[3]["stderr"]
    # without the installed package on the path the attack is unknown: exit 2, one line
    env["PYTHONPATH"] = str(ROOT)
    r = run_cli(["attack", "--method", "centralized", "--attack", "toy", "--preset", "test", "--runs-dir", str(runs)],
                tmp_path, env, ok=(2,))
    assert "toy" in r.stderr and "Traceback" not in r.stderr
