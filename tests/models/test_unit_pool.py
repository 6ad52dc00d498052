"""PFDM's clients and server trained in parallel processes (models/unit_pool.py): the same checkpoints, bit for
bit, as one after another; a dead process falls back to training here; when processes are used at all."""
from __future__ import annotations

import pytest
from helpers import train_cfg
from safetensors.torch import load_file

from privbench.core import threads
from privbench.models import unit_pool
from privbench.runs import train as api
from privbench.runs.store import run_dir_for


def _weights(run_dir):
    ckpts = sorted((run_dir / "checkpoints").glob("*.safetensors"))
    return {p.name: load_file(str(p)) for p in ckpts}


def _train(runs_dir, processes, monkeypatch, method="pfdm"):
    monkeypatch.setattr(unit_pool, "processes_for", lambda _ctx, units: processes if len(units) > 1 else 1)
    cfg = train_cfg(method, "test", seed=3)
    api.train(cfg, runs_dir, "cpu")
    return run_dir_for(cfg, runs_dir)


def _assert_same(a, b, units=("shared", "client")):
    wa, wb = _weights(a), _weights(b)
    assert sorted(wa) == sorted(wb) and all(any(k.startswith(u) for k in wa) for u in units)
    for name in wa:
        assert sorted(wa[name]) == sorted(wb[name])
        for k in wa[name]:
            assert wa[name][k].equal(wb[name][k]), f"{name}:{k} differs"
    if "shared" in units:
        ua, ub = load_file(str(a / "uploads.safetensors")), load_file(str(b / "uploads.safetensors"))
        assert sorted(ua) == sorted(ub) and all(ua[k].equal(ub[k]) for k in ua)


@pytest.fixture(scope="module")
def sequential_pfdm(tmp_path_factory):
    """The pfdm test-preset run trained one unit after another (what both pfdm tests compare with)."""
    with pytest.MonkeyPatch.context() as mp:
        return _train(tmp_path_factory.mktemp("seq"), 1, mp)


def test_clients_and_server_in_two_processes_give_the_sequential_checkpoints(sequential_pfdm, tmp_path,
                                                                              monkeypatch):
    seq = sequential_pfdm
    par = _train(tmp_path / "par", 2, monkeypatch)
    assert "independent trainings in 2 processes" in (par / "log.txt").read_text()
    assert "processes" not in (seq / "log.txt").read_text()
    _assert_same(seq, par)


@pytest.mark.slow  # the same pool as pfdm's (tested above in make test); local's own units, two more spawns
def test_local_clients_in_two_processes_give_the_sequential_checkpoints(tmp_path, monkeypatch):
    seq = _train(tmp_path / "seq", 1, monkeypatch, "local")
    par = _train(tmp_path / "par", 2, monkeypatch, "local")
    assert "independent trainings in 2 processes" in (par / "log.txt").read_text()
    _assert_same(seq, par, units=("client",))


def test_a_dead_pool_process_leaves_the_units_to_this_process(sequential_pfdm, tmp_path, monkeypatch):
    import unit_pool_dying

    seq = sequential_pfdm
    monkeypatch.setattr(unit_pool, "_train_unit_in_process", unit_pool_dying.die)
    par = _train(tmp_path / "par", 2, monkeypatch)
    assert "a training process failed" in (par / "log.txt").read_text()
    _assert_same(seq, par)


@pytest.mark.parametrize("configured,explicit,params,workers,cores,want", [
    (2, False, 10_000, "", 2, 2),           # the default count, a small model, 2 cores: one process per core
    (16, False, 10_000, "", 16, 5),         # never more processes than units
    (2, True, 10_000, "", 2, 1),            # --threads / OMP_NUM_THREADS given: the user's count, here
    (None, False, 10_000, "", 2, 1),        # a library user who never configured threads
    (2, False, 3_000_000, "", 2, 1),        # a large model trains on every thread, one unit at a time
    (2, False, 10_000, "2", 2, 1),          # inside a bench worker (--jobs 2)
    (1, False, 10_000, "", 1, 1),           # one core
])
def test_parallel_processes_rule(monkeypatch, configured, explicit, params, workers, cores, want):
    monkeypatch.setattr(threads, "_configured", configured)
    monkeypatch.setattr(threads, "_explicit", explicit)
    monkeypatch.setattr(threads, "available_cores", lambda: cores)
    monkeypatch.setenv("PRIVBENCH_WORKERS", workers)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert threads.parallel_processes(5, params) == want
