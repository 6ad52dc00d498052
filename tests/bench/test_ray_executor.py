"""`privbench bench --executor ray`: each training and cell a Ray task on a local 2-CPU cluster; a failing cell is
retried, then reported as the local executor reports it; a rerun reuses the cache; the scores equal the local
executor's (docs/benchmarks.md, "The Ray executor")."""
from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from privbench.bench.executor_options import ExecutorOptions
from privbench.bench.runner import run_suite
from privbench.bench.suite import SHIPPED
from privbench.cli import main
from privbench.core.errors import BadInput
from privbench.core.registry import ATTACKS
from privbench.core.yamlio import read_yaml

HERE = Path(__file__).resolve().parent


def _suite(tmp_path, attacks=("loss", "pia", "boom", "flaky")) -> Path:
    """The shipped `test` suite's centralized target (one training: every Ray task runs the same code for every
    method) with plug-in attacks added, without sample grids."""
    import yaml

    spec = read_yaml(SHIPPED / "suites" / "test.yaml", "test suite")
    spec["name"] = "raytest"
    spec["samples"] = False
    del spec["methods"]["pfdm"]
    spec["methods"]["centralized"]["attacks"] = list(attacks)
    path = tmp_path / "raytest.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_without_ray_the_ray_executor_is_one_line_exit_2(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError, as when it is not installed
    with pytest.raises(BadInput, match=r"pip install 'privbench\[ray\]'"):
        run_suite("test", runs_dir=str(tmp_path / "runs"), executor=ExecutorOptions("ray"))
    r = CliRunner().invoke(main, ["bench", "--suite", "test", "--runs-dir", str(tmp_path / "runs"),
                                  "--executor", "ray"])
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert r.stderr.strip().splitlines() == [
        "privbench: error: --executor ray needs the optional package ray, which is not installed: "
        "pip install 'privbench[ray]'"]
    assert not (tmp_path / "runs").exists()
    r = CliRunner().invoke(main, ["bench", "--suite", "test", "--address", "auto"])
    assert r.exit_code == 2 and "--address: only with --executor ray" in r.stderr


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of 2 CPUs whose workers load the plug-in attacks (its env is the workers' env)."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'privbench[ray]')")
    old = {k: os.environ.get(k) for k in ("PYTHONPATH", "PRIVBENCH_PLUGINS", "PRIVBENCH_PROGRESS")}
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parents[1]), *filter(None, [old["PYTHONPATH"]])])
    os.environ["PRIVBENCH_PLUGINS"] = "ray_test_attacks"
    os.environ["PRIVBENCH_PROGRESS"] = "0"
    sys.path.insert(0, str(HERE))
    # registers boom and flaky here too (the driver plans the grid); reloaded when another test file of this worker
    # (test_pool_executors) imported it and unregistered its attacks
    if "ray_test_attacks" in sys.modules:
        importlib.reload(sys.modules["ray_test_attacks"])
    else:
        importlib.import_module("ray_test_attacks")

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        sys.path.remove(str(HERE))
        for name in ("boom", "flaky"):  # the other tests see the registered attacks only
            ATTACKS._entries.pop(name, None)


def _by_label(res: dict) -> dict:
    return {(c["method"], c["target"], c["kind"], c["attack"]): c for c in res["cells"]}


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_ray_bench_trains_attacks_and_reports_a_failure_like_local(tmp_path):
    """The small Ray grid of `make test`: one training task and two cell tasks (one fails), no retries; the
    retries, the flaky cell and the rerun are the slow test below (`make test-all`)."""
    suite = _suite(tmp_path, ("loss", "boom"))
    local = run_suite(str(suite), runs_dir=str(tmp_path / "local"), device="cpu", executor=ExecutorOptions(retries=0))
    out = tmp_path / "bench-ray"
    r = CliRunner().invoke(main, ["bench", "--suite", str(suite), "--runs-dir", str(tmp_path / "ray"), "--out",
                                  str(out), "--executor", "ray", "--retries", "0", "--json"])
    assert r.exit_code == 3, (r.stdout, r.stderr)
    assert ("privbench bench: centralized/model boom (digits, seed 0) failed: RuntimeError: boom: this test attack "
            "always fails") in r.stderr
    res = json.loads(r.stdout)
    assert res["counts"] == local["counts"] == {"done": 1, "skipped": 0, "failed": 1, "pending": 0}
    cells, ref = _by_label(res), _by_label(local)
    assert cells.keys() == ref.keys()
    for k, c in cells.items():
        assert c["status"] == ref[k]["status"] and c["summary"] == ref[k]["summary"], k
    bench = json.loads((out / "bench.json").read_text())
    assert bench["executor"] == "ray" and {t["status"] for t in bench["trainings"]} == {"done"}


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_ray_bench_retries_reports_failures_reuses_the_cache_and_matches_local(tmp_path):
    suite = _suite(tmp_path)
    # the local executor: the reference (retries=1 too, so the flaky cell passes on its second attempt there too)
    local = run_suite(str(suite), runs_dir=str(tmp_path / "local"), device="cpu", executor=ExecutorOptions(retries=1))

    out = tmp_path / "bench-ray"
    args = ["bench", "--suite", str(suite), "--runs-dir", str(tmp_path / "ray"), "--out", str(out),
            "--executor", "ray", "--retries", "1", "--json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 3, (r.stdout, r.stderr)              # a failed cell: exit 3, as locally
    assert "privbench bench: centralized/model boom (digits, seed 0) failed (after 2 attempts): RuntimeError: " \
           "boom: this test attack always fails" in r.stderr
    assert "1 bench cell(s) failed" in r.stderr
    res = json.loads(r.stdout)
    bench = json.loads((out / "bench.json").read_text())
    assert bench["executor"] == "ray" and bench["ray"]["cpus"] == 2 and bench["retries"] == 1
    assert res["counts"] == local["counts"] == {"done": 3, "skipped": 0, "failed": 1, "pending": 0}
    cells, ref = _by_label(res), _by_label(local)
    boom = cells[("centralized", "model", "attack", "boom")]
    assert boom["status"] == "failed" and boom["attempts"] == 2            # retried once, then reported
    assert boom["reason"] == ref[("centralized", "model", "attack", "boom")]["reason"] == \
        "RuntimeError: boom: this test attack always fails"
    flaky = cells[("centralized", "model", "attack", "flaky")]
    assert flaky["status"] == "done" and flaky["attempts"] == 2            # failed once, passed on the retry
    # the same grid, the same scores as the local executor
    assert cells.keys() == ref.keys()
    for k, c in cells.items():
        assert c["status"] == ref[k]["status"], k
        assert c["summary"] == ref[k]["summary"], k
    trained = {t["method"]: t for t in bench["trainings"]}
    assert {t["status"] for t in trained.values()} == {"done"} and not any(t["cached"] for t in trained.values())

    # a rerun: nothing is retrained, finished cells are reused; the failed one runs (and fails) again
    done_files = sorted(Path(t["run_dir"]) / "train_done.json" for t in bench["trainings"])
    stamps = [p.stat().st_mtime_ns for p in done_files]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 3, (r.stdout, r.stderr)
    again = json.loads((out / "bench.json").read_text())
    assert [p.stat().st_mtime_ns for p in done_files] == stamps
    assert [t["run_dir"] for t in again["trainings"]] == [trained["centralized"]["run_dir"]]
    assert again["trainings"][0]["cached"] is True                       # only the failed cell's run was asked
    for k, c in _by_label(again).items():
        if k[3] == "boom":
            assert c["status"] == "failed" and c["attempts"] == 2
        else:
            assert c["status"] == "done" and "earlier run" in c["reason"], k
