"""`privbench bench --jobs 2` (a local process pool) and `--executor slurm` (submitit; here its local executor, no
Slurm): the same grid, the same scores as one job at a time; a failing cell is retried then reported (exit 3); a
job that dies is submitted again; a rerun trains nothing (docs/benchmarks.md, "Many cores" and "Slurm")."""
from __future__ import annotations

import importlib
import importlib.util
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

#: submitit is looked up, not imported, here: its import reconfigures the process's logging (core/extras.py imports
#: it with that held back; a bare import in the test process would close the worker's capture file)
NEEDS_SUBMITIT = pytest.mark.skipif(importlib.util.find_spec("submitit") is None, reason="needs submitit")

HERE = Path(__file__).resolve().parent
PLUGINS = {"ray_test_attacks": ("boom", "flaky"), "pool_test_attacks": ("crash",)}


@pytest.fixture(scope="module")
def plugins():
    """The test attacks registered here and in every worker process (workers read PRIVBENCH_PLUGINS)."""
    old = {k: os.environ.get(k) for k in ("PYTHONPATH", "PRIVBENCH_PLUGINS", "PRIVBENCH_PROGRESS")}
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parents[1]), *filter(None, [old["PYTHONPATH"]])])
    os.environ["PRIVBENCH_PLUGINS"] = ",".join(PLUGINS)
    os.environ["PRIVBENCH_PROGRESS"] = "0"
    sys.path.insert(0, str(HERE))
    for mod in PLUGINS:  # (re)registers: another test file of this worker may have imported and unregistered it
        importlib.reload(sys.modules[mod]) if mod in sys.modules else importlib.import_module(mod)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        sys.path.remove(str(HERE))
        for names in PLUGINS.values():
            for name in names:
                ATTACKS._entries.pop(name, None)


def _suite(tmp_path, attacks, pfdm: bool = True) -> Path:
    """The shipped `test` suite without sample grids (each is a job: seconds here, minutes on a loaded machine)."""
    import yaml

    spec = read_yaml(SHIPPED / "suites" / "test.yaml", "test suite")
    spec["name"] = "pooltest"
    spec["samples"] = False
    spec["methods"]["centralized"]["attacks"] = attacks
    if not pfdm:
        del spec["methods"]["pfdm"]
    path = tmp_path / "pooltest.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _reference(tmp, pfdm: bool):
    suite = _suite(tmp, ["loss", "pia", "boom", "flaky"], pfdm=pfdm)
    return suite, run_suite(str(suite), runs_dir=str(tmp / "runs"), device="cpu", executor=ExecutorOptions(retries=1))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, plugins):
    """The grid run one cell at a time in this process (retries=1: flaky passes on its second attempt); two
    methods, so ``--jobs 2`` trains two targets at once."""
    del plugins  # requested for its side effect: the test attacks, registered here and in the workers
    return _reference(tmp_path_factory.mktemp("pool-ref"), pfdm=True)


@pytest.fixture(scope="module")
def reference_one(tmp_path_factory, plugins):
    """The same grid on the centralized target only: each Slurm job is a fresh process (seconds of imports each
    on a loaded machine), and one method exercises every kind of job (training, cell, retry)."""
    del plugins  # requested for its side effect: the test attacks, registered here and in the workers
    return _reference(tmp_path_factory.mktemp("pool-ref-one"), pfdm=False)


def _by_label(res: dict) -> dict:
    return {(c["method"], c["target"], c["kind"], c["attack"]): c for c in res["cells"]}


def _check_like_local(res: dict, local: dict, done: int = 5) -> None:
    assert res["counts"] == local["counts"] == {"done": done, "skipped": 0, "failed": 1, "pending": 0}
    cells, ref = _by_label(res), _by_label(local)
    boom = cells[("centralized", "model", "attack", "boom")]
    assert boom["status"] == "failed" and boom["attempts"] == 2
    assert boom["reason"] == "RuntimeError: boom: this test attack always fails"
    assert cells[("centralized", "model", "attack", "flaky")]["attempts"] == 2
    assert cells.keys() == ref.keys()
    for k, c in cells.items():
        assert c["status"] == ref[k]["status"], k
        assert c["summary"] == ref[k]["summary"], k  # the same scores' metrics


def _rerun_trains_nothing(args, out: Path) -> None:
    bench = json.loads((out / "bench.json").read_text())
    done_files = sorted(Path(t["run_dir"]) / "train_done.json" for t in bench["trainings"])
    stamps = [p.stat().st_mtime_ns for p in done_files]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 3, (r.stdout, r.stderr)  # boom fails again
    again = json.loads((out / "bench.json").read_text())
    assert [p.stat().st_mtime_ns for p in done_files] == stamps
    assert all(t["cached"] for t in again["trainings"])
    for k, c in _by_label(again).items():
        assert c["status"] == ("failed" if k[3] == "boom" else "done"), k


def test_jobs_2_matches_one_job_at_a_time(tmp_path, reference):
    suite, local = reference
    out = tmp_path / "bench-jobs"
    args = ["bench", "--suite", str(suite), "--runs-dir", str(tmp_path / "runs"), "--out", str(out),
            "--jobs", "2", "--retries", "1", "--json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 3, (r.stdout, r.stderr)
    assert "centralized/model boom (digits, seed 0) failed (after 2 attempts)" in r.stderr
    res = json.loads(r.stdout)
    _check_like_local(res, local)
    bench = json.loads((out / "bench.json").read_text())
    assert bench["pool"]["jobs"] == 2 and bench["pool"]["threads_per_job"] >= 1
    assert {t["status"] for t in bench["trainings"]} == {"done"}
    _rerun_trains_nothing(args, out)


@pytest.mark.slow
@NEEDS_SUBMITIT
def test_slurm_executor_through_submitit_local(tmp_path, reference_one):
    suite, local = reference_one
    out = tmp_path / "bench-slurm"
    args = ["bench", "--suite", str(suite), "--runs-dir", str(tmp_path / "runs"), "--out", str(out),
            "--executor", "slurm", "--slurm-cluster", "local", "--slurm-time-cell", "30", "--json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 3, (r.stdout, r.stderr)
    _check_like_local(json.loads(r.stdout), local, done=3)
    bench = json.loads((out / "bench.json").read_text())
    assert bench["executor"] == "slurm" and bench["retries"] == 1
    assert bench["slurm"]["cluster"] == "local" and bench["slurm"]["time_cell_min"] == 30
    assert (out / "submitit").is_dir()
    _rerun_trains_nothing(args, out)


@pytest.mark.slow
@NEEDS_SUBMITIT
@pytest.mark.usefixtures("plugins")
def test_slurm_job_that_dies_is_submitted_again(tmp_path):
    suite = _suite(tmp_path, ["crash"], pfdm=False)
    out = tmp_path / "bench-crash"
    r = CliRunner().invoke(main, ["bench", "--suite", str(suite), "--runs-dir", str(tmp_path / "runs"), "--out",
                                  str(out), "--executor", "slurm", "--slurm-cluster", "local", "--json"])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    crash = _by_label(json.loads(r.stdout))[("centralized", "model", "attack", "crash")]
    assert crash["status"] == "done"


def test_bad_pool_options_are_bad_input(tmp_path):
    with pytest.raises(BadInput, match="--jobs"):
        run_suite("test", runs_dir=str(tmp_path / "runs"), executor=ExecutorOptions("ray", jobs=2))
    r = CliRunner().invoke(main, ["bench", "--suite", "test", "--runs-dir", str(tmp_path / "runs"),
                                  "--jobs", "0"])
    assert r.exit_code == 2
    assert not (tmp_path / "runs").exists()


def test_a_shared_pretraining_is_trained_by_one_job_while_the_others_wait_outside_the_pool(monkeypatch):
    """Runs that share a cached training (the public pre-training of train.init=public) are not submitted together:
    the first of each shared training goes first, the others only once it finished (no worker sits idle on the
    pre-training's lock); runs that share nothing are submitted at once."""
    import concurrent.futures as cf
    from types import SimpleNamespace

    from privbench.bench import pool_executor as pe

    events = []

    class FIFO(pe.PoolExecutor):
        """One worker, jobs in submission order: ``wait`` runs the oldest job."""
        def submit(self, fn, *args):
            f = cf.Future()
            f.job = (fn, args)
            events.append(("submit", args[0].run_dir if fn is pe.train_job else args[0].label()))
            return f

        def wait(self, futures):
            f = futures[0]
            fn, args = f.job
            events.append(("done", args[0].run_dir if fn is pe.train_job else args[0].label()))
            f.set_result({"status": "done"})
            return [f]

    def cell(run, shared=()):
        c = SimpleNamespace(status="pending", external=None, run_dir=run, method="m", dataset="d", seed=0,
                            kind="fid", shared=tuple(shared), label=lambda run=run: f"cell {run}")
        c.cfg = c  # train_job's first argument: the fake's events read its run_dir
        return c

    monkeypatch.setattr(pe, "train_job", lambda *a: None)
    monkeypatch.setattr(pe, "cell_job", lambda *a: None)
    cells = [cell("plain-1"), cell("a1", ["pre-A"]), cell("a2", ["pre-A"]), cell("b1", ["pre-B"]),
             cell("a3", ["pre-A"]), cell("ab", ["pre-A", "pre-B"]), cell("plain-2")]
    pb = SimpleNamespace(update=lambda *_args: None, set_postfix_str=lambda *_args: None)
    FIFO(retries=0, threads=1).run(cells, runs=".", device="cpu", n_samples=0, fcfg=None, log_path="bench.log",
                                   write=lambda: None, pb=pb, report_failure=lambda *_args: None)
    trains = [(e, r) for e, r in events if not r.startswith("cell")]
    # owners of each shared training first, then the runs that share nothing; nothing held is in the pool yet
    assert trains[:4] == [("submit", "a1"), ("submit", "b1"), ("submit", "plain-1"), ("submit", "plain-2")]
    order = [r for e, r in trains]
    for held, owners in (("a2", ["a1"]), ("a3", ["a1"]), ("ab", ["a1", "b1"])):
        submitted = trains.index(("submit", held))
        assert all(trains.index(("done", o)) < submitted for o in owners), (held, order)
    assert sorted(r for e, r in trains if e == "done") == sorted(c.run_dir for c in cells)  # every run trained
    assert all(c.status == "done" for c in cells)  # and every cell ran
