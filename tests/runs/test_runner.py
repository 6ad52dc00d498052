"""The attack runner's shape: one attack step under runs/, and a native run that trains the Method it holds
(ensure_trained) once (the parameter limit of every function: tests/test_cli_option_groups.py)."""
from __future__ import annotations

import ast
import json
from pathlib import Path

from helpers import train_cfg

RUNS = Path(__file__).resolve().parents[2] / "privbench" / "runs"


def test_one_call_of_attack_run_under_runs():
    calls = [(p.name, n.lineno) for p in sorted(RUNS.glob("*.py")) for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "run"]
    assert len(calls) == 1, f"Attack.run is called from more than one place: {calls}"


def test_ensure_trained_trains_the_held_method_once(tmp_path):
    from privbench.runs.store import run_dir_for
    from privbench.runs.train import ensure_trained, make_method

    cfg = train_cfg()
    method = make_method(cfg, run_dir_for(cfg, tmp_path), "cpu")
    assert ensure_trained(method) is True
    run_dir = method.ctx.run_dir
    done = json.loads((run_dir / "train_done.json").read_text())
    assert (run_dir / "split.json").is_file()  # written by write_split, attacks read it
    assert ensure_trained(method) is False    # a cache hit: nothing retrained, nothing rewritten
    assert ensure_trained(make_method(cfg, run_dir, "cpu")) is False
    assert json.loads((run_dir / "train_done.json").read_text()) == done
