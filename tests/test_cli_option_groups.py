"""The commands' option groups (privbench/cli_options.py): each group reaches its command as one frozen object,
the outside-model options become one OutsideSpec, the CLI imports the library only through ``lib()``, and no
function of the library takes more than twelve parameters."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from privbench import cli_options
from privbench.bench.executor_options import ExecutorOptions
from privbench.cli import main
from privbench.core.errors import BadInput

ROOT = Path(__file__).resolve().parents[1]
MAX_PARAMETERS = 12


def _parameters(fn: ast.FunctionDef) -> int:
    a = fn.args
    n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
    return n - (bool(a.args) and a.args[0].arg in ("self", "cls"))


def test_no_function_of_the_library_takes_more_than_twelve_parameters():
    long = []
    for path in sorted((ROOT / "privbench").rglob("*.py")):
        rel = path.relative_to(ROOT / "privbench").as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _parameters(node) > MAX_PARAMETERS:
                long.append(f"{rel}:{node.name} ({_parameters(node)})")
    assert not long, long


def test_the_cli_imports_the_library_through_lib_only():
    """No import statement inside a function of cli.py or cli_options.py: a command loads what it uses through
    ``lib()`` (one documented reason instead of one comment per import)."""
    inner = []
    for name in ("cli.py", "cli_options.py"):
        tree = ast.parse((ROOT / "privbench" / name).read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner += [f"{name}:{n.lineno}" for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert inner == []
    assert cli_options.lib("runs.store").__name__ == "privbench.runs.store"


def _capture_outside(monkeypatch) -> list:
    calls = []

    def fake(spec, attack, *, seed, runs_dir, strict):
        calls.append((spec, attack, seed, runs_dir, strict))
        raise BadInput("stop here")

    monkeypatch.setattr(cli_options.lib("runs.external"), "attack_external", fake)
    return calls


def test_the_model_options_reach_the_runner_as_one_spec(tmp_path, monkeypatch):
    calls = _capture_outside(monkeypatch)
    model = tmp_path / "my-ddpm"
    model.mkdir()
    m, n = tmp_path / "m.npz", tmp_path / "n.npz"
    for p in (m, n):
        np.savez(p, images=np.zeros((2, 1, 8, 8), np.float32))
    r = CliRunner().invoke(main, ["attack", "--model", str(model), "--members", str(m), "--nonmembers", str(n),
                                  "--attack", "pia,extract", "--seed", "3", "--records-range", "0:1", "--no-ema",
                                  "--claimed-epsilon", "8", "--claimed-delta", "1e-5", "--claim-basis", "DP-SGD",
                                  "--set", "attack.t=100", "--embedding", "emb.pt", "--runs-dir", str(tmp_path)])
    assert r.exit_code == 2 and "stop here" in r.stderr, r.output
    spec, attack, seed, runs_dir, strict = calls[0]
    assert (attack, seed, runs_dir, strict) == ("pia", 3, str(tmp_path), False)  # several attacks: not strict
    assert spec.model_path == str(model) and spec.target_name == "my-ddpm"  # the folder names the target
    assert (spec.members_spec, spec.nonmembers_spec, spec.records_range, spec.use_ema) == (str(m), str(n), "0:1",
                                                                                          False)
    assert spec.claim["claimed_epsilon"] == 8 and spec.claim["claim_basis"] == "DP-SGD"
    assert spec.sets[0] == "attack.t=100" and spec.sets[1].startswith("attack.extract_embedding=")
    assert spec.sets[1].endswith("emb.pt") and spec.preset == "tiny" and spec.device == "auto"
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.preset = "test"


@pytest.mark.parametrize("args, needle", [
    (["--method", "pfdm", "--model", "m"], "not both"),
    (["--method", "pfdm", "--arch", "pytorch-ddpm"], "need --model"),
    (["--method", "pfdm", "--records-range", "0:1"], "need --model"),
    (["--model", "m", "--download"], "--config and --download do not apply to --model"),
    ([], "give --method NAME"),
])
def test_a_method_and_an_outside_model_do_not_mix(tmp_path, monkeypatch, args, needle):
    calls = _capture_outside(monkeypatch)
    for command in ("attack", "run"):
        r = CliRunner().invoke(main, [command, "--attack", "pia", "--runs-dir", str(tmp_path), *args])
        assert r.exit_code == 2 and needle in r.stderr, r.output
    assert calls == []


def test_the_bench_executor_options_are_one_value(monkeypatch):
    seen = []

    def fake(suite, **kw):
        assert suite == "tiny"
        seen.append(kw["executor"])
        raise BadInput("stop here")

    monkeypatch.setattr(cli_options.lib("api"), "bench", fake)
    r = CliRunner().invoke(main, ["bench", "--suite", "tiny", "--executor", "slurm", "--slurm-partition", "gpu",
                                  "--retries", "2", "--cpus-per-task", "4"])
    assert r.exit_code == 2 and "stop here" in r.stderr
    assert seen == [ExecutorOptions("slurm", jobs=1, retries=2, cpus_per_task=4, address=None,
                                    slurm={"partition": "gpu", "gpus_per_task": 0, "time_train_min": 1440,
                                           "time_cell_min": 240, "cluster": "slurm"})]
    with pytest.raises(BadInput, match="--address: only with --executor ray"):
        ExecutorOptions("local", address="auto").checked_retries()
    assert ExecutorOptions("ray").retries is None and ExecutorOptions("local").checked_retries() == 0
