"""Fast feedback: `check`, `report`, `audit` and `list` read results without importing torch or diffusers, and
bad records are refused before torch is imported (docs/cli.md §3). Each command runs in a fresh process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from privbench.runs.result_schema import AttackResult

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "diffusers")

PROBE = """
import json, sys
from privbench.cli import main
sys.argv = ["privbench", *{args!r}]
try:
    main()
    code = 0
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
print(json.dumps({{"code": code, "heavy": sorted(m for m in {heavy!r} if m in sys.modules)}}))
"""


def _probe(args: list[str], cwd: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PRIVBENCH_PLUGINS"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", PROBE.format(args=[str(a) for a in args], heavy=HEAVY)], cwd=cwd,
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.stdout.strip(), r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["stderr"] = r.stderr
    return out


def _outside_result(folder: Path, target: str, seed: int) -> None:
    """A result.json + scores.npz as `attack --model` writes them (docs/cli.md §5)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    labels = np.r_[np.ones(32, int), np.zeros(32, int)]
    scores = rng.normal(size=64) + labels
    np.savez(folder / "scores.npz", scores=scores, labels=labels, index=np.arange(64))
    res = AttackResult(method="external", target=target, attack="pia", dataset="external", preset="tiny", seed=0,
                       run_dir=str(folder), n_members=32, n_nonmembers=32, kind="membership",
                       metrics={"auc": 0.75, "asr": 0.7, "tpr_at_1pct_fpr": None, "tpr_at_0_1pct_fpr": None,
                                "ci95": {"auc": [0.6, 0.9]}},
                       privacy=None, scores_path=str(folder / "scores.npz"))
    (folder / "result.json").write_text(json.dumps(res.to_json()))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("light")
    _outside_result(root / "runs" / "external-a", "model-a", 0)
    _outside_result(root / "runs" / "external-b", "model-b", 1)
    (root / "gates.yaml").write_text("gates:\n  - {method: external, target: model-a, attack: pia, metric: auc, max: 0.99}\n")
    np.savez(root / "bad.npz", images=np.zeros((4, 5), np.float32))
    np.savez(root / "good.npz", images=np.zeros((4, 1, 8, 8), np.float32) - 0.5)
    (root / "model").mkdir()
    return root


@pytest.mark.parametrize("name, args, code", [
    ("list", ["list"], 0),
    ("check", ["check", "--gates", "gates.yaml", "runs"], 0),
    ("audit", ["audit", "runs"], 0),
    ("report", ["report", "runs", "--out", "report", "--format", "csv,markdown"], 0),
    ("attack, bad .npz", ["attack", "--model", "model", "--members", "bad.npz", "--nonmembers", "good.npz",
                          "--attack", "pia"], 2),
    ("run, bad .npz", ["run", "--model", "model", "--members", "good.npz", "--nonmembers", "bad.npz",
                       "--attack", "pia,loss"], 2),
    ("train --dataset bad.npz", ["train", "--method", "centralized", "--dataset", "bad.npz"], 2),
    ("check-split, bad .npz", ["check-split", "--members", "good.npz", "--nonmembers", "bad.npz"], 2),
    ("attack, missing records", ["attack", "--model", "model", "--members", "nothere.npz", "--nonmembers",
                                 "good.npz", "--attack", "pia"], 2),
])
def test_light_commands_do_not_import_torch(inputs, name, args, code):
    out = _probe(args, inputs)
    assert out["code"] == code, f"{name}: {out['stderr'][-1500:]}"
    assert out["heavy"] == [], f"`privbench {' '.join(args)}` imported {out['heavy']}"
    if code == 2:
        lines = [line for line in out["stderr"].splitlines() if line.startswith("privbench: error:")]
        assert len(lines) == 1 and ("bad.npz" in lines[0] or "nothere.npz" in lines[0]), out["stderr"]


def _own_run(root: Path, method: str, target: str, privacy: dict | None, seed: int) -> Path:
    """A run folder as `privbench train` + `attack` leave it: named METHOD-DATASET-HASH, with its config.yaml and
    an attack's result.json + scores.npz (docs/cli.md §5)."""
    run = root / f"{method}-digits-{seed:012x}"
    folder = run / "attacks" / f"loss-{target.replace(':', '')}-{seed:012x}"
    _outside_result(folder, target, seed)
    res = json.loads((folder / "result.json").read_text())
    res.update({"method": method, "attack": "loss", "dataset": "digits", "run_dir": str(run), "privacy": privacy})
    (folder / "result.json").write_text(json.dumps(res))
    (run / "config.yaml").write_text(f"method: {method}\ndataset: digits\npreset: tiny\nseed: 0\n"
                                     "data:\n  n_members: 32\n  n_nonmembers: 32\nclients:\n  n_clients: 2\n")
    return run


@pytest.mark.parametrize("command", [["audit", "own"], ["report", "own", "--out", "own-report", "--format", "csv"]])
def test_report_and_audit_of_privbench_runs_do_not_import_torch(tmp_path, command):
    """privbench's own runs — a DP-SGD method with a formal epsilon, federated methods (whose classes derive from
    bases in modules that register nothing) — are ordered, audited and reported from their files alone."""
    formal = {"epsilon": 10.0, "delta": 1e-5, "basis": "DP-SGD, PRV accountant, add/remove-one record",
              "accountant": "prv", "noise_multiplier": 4.0, "sample_rate": 0.25, "steps": 1000}
    for seed, (method, target, privacy) in enumerate((("dpdm", "model", formal), ("feddm", "global", None),
                                                      ("local", "client:0", None), ("local", "client:1", None))):
        _own_run(tmp_path / "own", method, target, privacy, seed)
    out = _probe(command, tmp_path)
    assert out["code"] == 0, out["stderr"][-1500:]
    assert out["heavy"] == [], f"`privbench {' '.join(command)}` imported {out['heavy']}"
    if command[0] == "report":
        rows = (tmp_path / "own-report" / "results.csv").read_text().splitlines()
        assert len(rows) == 5 and all(f"{seed:012x}" in "".join(rows) for seed in range(4))


def test_the_precheck_and_the_full_read_agree_on_shapes(tmp_path):
    """The header check refuses what the loader refuses, with the same line (one copy of the rules)."""
    from privbench.core.errors import BadInput
    from privbench.data.records_check import precheck_records
    from privbench.data.records_io import load_records

    cases = {"flat": np.zeros((4, 5), np.float32), "nhwc-float": np.zeros((2, 8, 8, 3), np.float32),
             "int16": np.zeros((2, 1, 8, 8), np.int16), "u8-2d": np.zeros((2, 8), np.uint8),
             "u8-5ch": np.zeros((2, 5, 8, 5), np.uint8)}
    for name, arr in cases.items():
        path = tmp_path / f"{name}.npz"
        np.savez(path, images=arr)
        with pytest.raises(BadInput) as pre:
            precheck_records(path)
        with pytest.raises(BadInput) as full:
            load_records(path)
        assert str(pre.value) == str(full.value), name
    np.savez(tmp_path / "labels.npz", images=np.zeros((3, 1, 8, 8), np.float32) - 0.5, labels=np.zeros(2, int))
    with pytest.raises(BadInput, match="labels must be a 1-D array of 3 entries"):
        precheck_records(tmp_path / "labels.npz")
    np.savez(tmp_path / "ok.npz", images=np.zeros((3, 1, 8, 8), np.float32) - 0.5, labels=np.zeros(3, int))
    precheck_records(tmp_path / "ok.npz")


def test_the_light_copies_agree_with_their_sources():
    """The result kinds readable without torch are the attacks' own; the report attributes read from the sources
    are the imported classes' (report order, privacy, references, target order, coinciding notes)."""
    from privbench.attacks import base
    from privbench.core import constants, registry
    from privbench.core.registry_source import Unresolvable, attribute_owner, class_attribute, read_builtins

    assert (constants.MEMBERSHIP, constants.MEMORIZATION, constants.RECONSTRUCTION) == (
        base.MEMBERSHIP, base.MEMORIZATION, base.RECONSTRUCTION)
    reader = read_builtins(registry.BUILTIN_MODULES)
    registry.load_builtins()
    checked = 0
    for var, attrs in (("METHODS", ("report_order", "private", "target_order", "provenance_keys",
                                    "coinciding_note")), ("ATTACKS", ("report_order", "needs_references"))):
        for e in getattr(registry, var):
            for attr in attrs:
                try:
                    static = class_attribute(reader, var, e.name, attr)
                except Unresolvable:
                    continue  # read by importing the class, so nothing to compare
                assert static == getattr(e.factory, attr), (var, e.name, attr)
                checked += 1
    assert checked >= 40
    # the class that defines each hook a report asks about, read from the sources for every built-in method (bases
    # in modules that register nothing, e.g. the federated and DP-SGD bases, included), is the imported class's
    for e in registry.METHODS:
        for attr in ("target_rank", "target_kind", "upload_mechanism"):
            owner = next(c.__name__ for c in e.factory.__mro__ if attr in vars(c))
            assert attribute_owner(reader, "METHODS", e.name, attr) == owner, (e.name, attr)
