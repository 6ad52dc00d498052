"""The attack runner's shape: one attack step under runs/, no long parameter chains, and a native run that trains
the Method it holds (ensure_trained) once."""
from __future__ import annotations

import ast
import json
from pathlib import Path

from helpers import train_cfg

RUNS = Path(__file__).resolve().parents[2] / "privbench" / "runs"
MAX_PARAMETERS = 12


def _functions():
    for path in sorted(RUNS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.name, node


def test_one_call_of_attack_run_under_runs():
    calls = [(p.name, n.lineno) for p in sorted(RUNS.glob("*.py")) for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "run"]
    assert len(calls) == 1, f"Attack.run is called from more than one place: {calls}"


def test_no_function_under_runs_takes_more_than_twelve_parameters():
    long = []
    for name, fn in _functions():
        a = fn.args
        n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
        n -= bool(a.args) and a.args[0].arg in ("self", "cls")
        if n > MAX_PARAMETERS:
            long.append(f"{name}:{fn.name} ({n})")
    assert not long, long


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
