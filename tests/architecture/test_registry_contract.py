"""The registry contract: every registered attack runs on an analytic fake target, every method trains on the
`test` preset and yields its declared targets, every accountant answers the standard setting; and adding an
attack is one file (a toy attack dropped into a copy of the package runs through attack, bench, report, check)."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from privbench.core.registry import ACCOUNTANTS, ATTACKS, METHODS

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests" / "attacks"))
from attack_fakes import fake_target, memorizing_eps  # noqa: E402


def _records(n=16):
    from privbench.attacks.base import Records
    from privbench.data.base import load_dataset

    x, y = load_dataset("digits")
    idx = torch.arange(2 * n)
    labels = torch.cat([torch.ones(n), torch.zeros(n)]).long()
    return Records(x[idx], y[idx], labels, idx)


def _fake_references(recs, ac, n=4):
    """Online reference models: each memorises a seeded random half of the evaluation records (plus a population
    of other digits for the attacks that need one)."""
    from privbench.attacks.base import Records
    from privbench.attacks.references import ReferenceModels
    from privbench.data.base import load_dataset

    g = np.random.default_rng(0)
    masks = np.zeros((n, len(recs)), dtype=bool)
    targets = []
    for r in range(n):
        masks[r, g.permutation(len(recs))[: len(recs) // 2]] = True
        targets.append(fake_target(memorizing_eps(recs.x[torch.as_tensor(masks[r])], ac)))
    x, y = load_dataset("digits")
    pop_idx = torch.arange(100, 164)
    population = Records(x[pop_idx], y[pop_idx], torch.zeros(64, dtype=torch.long), pop_idx)
    return ReferenceModels(targets=targets, in_masks=masks, mode="online", pool=recs, pool_in=masks,
                           population=population, seeds=list(range(n)))


@pytest.mark.parametrize("name", ATTACKS.names())
def test_every_attack_runs_on_an_analytic_target(name):
    from privbench.attacks.base import MEMBERSHIP, AttackEnv
    from privbench.core.config import build_config
    from privbench.metrics.roc import auc
    from privbench.runs.attack import make_attack

    if getattr(ATTACKS.get(name).factory, "requires_text", False):
        pytest.skip(f"{name} needs captions (a text-to-image target); tests/latent runs it end to end")
    cfg = build_config("centralized", "digits", "test", 0, [("sample.sampler", "ddim"), ("sample.ddim_steps", "5"),
                                                            ("attack.batch_size", "16")])
    recs = _records()
    members = recs.x[recs.labels == 1]
    ac = torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64).neg().add(1).cumprod(0).float()
    target = fake_target(memorizing_eps(members, ac))
    attack = make_attack(cfg, name, strict=False)
    env = AttackEnv(cfg=cfg, seed=0, train_data=(members, recs.y[recs.labels == 1]),
                    train_index=recs.index[recs.labels == 1].tolist())
    if attack.needs_references:
        if not target.white_box and attack.threat_model.get("queries", "").startswith("white-box"):
            pytest.skip(f"{name} is white-box (gradients of a network); tests/attacks/test_attacks_sota.py runs it "
                        "end to end on trained reference models")
        env.references = _fake_references(recs, ac)
    out = attack.run(target, recs, env)
    if attack.kind == MEMBERSHIP:
        s = np.asarray(out.scores)
        assert s.shape == (len(recs),) and np.isfinite(s).all()
        # a model that memorised the members exactly: every sound membership score separates them
        assert auc(s, recs.labels.numpy()) > 0.75, name
    else:
        assert out.metrics and all(math.isfinite(v) for v in out.metrics.values() if isinstance(v, float))


@pytest.mark.parametrize("name", METHODS.names())
def test_every_method_trains_and_yields_its_targets(name, runs_dir):
    from helpers import train_cfg

    from privbench.runs import train as api

    cfg = train_cfg(name, "test")
    method = api.train(cfg, runs_dir, "cpu")
    assert method.default_target in method.target_names()
    x = torch.randn(3, *method.ctx.image_shape)
    y = torch.tensor([0, 1, 2])
    for t in method.target_names():
        tgt = method.load_target(t)
        xq, yq = tgt.query_inputs(x, y)  # what the network takes (a latent target: latents and caption rows)
        eps = tgt.predict_noise(xq, torch.tensor([0, 10, 100]), yq)
        assert eps.shape == xq.shape and torch.isfinite(eps).all(), t
        p = method.privacy(t)
        # a formal ε > 0, or no formal ε (null) with a conditional or claimed one (dpsad; privbench.privacy.claims)
        # — or ε = 0 with δ = 0 for a target that never reads a member (public-only), which then says so
        assert p is None or (p["basis"] and (p["epsilon"] > 0 if p["epsilon"] is not None
                                             else (p.get("conditional_epsilon") or p.get("claimed_epsilon")) > 0)
                             or (p["epsilon"] == 0 and p["delta"] == 0 and "by construction" in p["accountant"]
                                 and not method.private)), t
    # a private method's targets carry a guarantee; a non-private one claims nothing but a by-construction zero
    claims = [method.privacy(t) for t in method.target_names()]
    assert method.private == any(c is not None and c.get("epsilon") != 0 for c in claims)


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
