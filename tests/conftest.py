"""Shared fixtures. Trained targets are session-scoped so that slow tests train each one once."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("PRIVBENCH_PROGRESS", "0")

# `make test` runs two pytest-xdist workers on CI's 2 cores: one thread each (and in every child process they
# start), or the two processes' OpenMP threads fight for the same cores and every step slows down many times
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER:
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

#: test files that share a session-trained target run on one worker, one after the other (the overfit
#: centralized target trains for minutes; two workers would both wait for it)
SHARED_GROUPS = {"tests/attacks/test_attack_overfit_slow.py": "overfit", "tests/models/test_pfdm.py": "overfit",
                 "tests/core/test_sample_quality.py": "overfit"}

#: the units that take longest (most near a minute on CI's 2 cores), queued first: a worker takes the next unit when it
#: runs out, so a long unit near the end of the queue would keep one worker busy while the other has nothing left
LONG_FIRST = ("tests/latent/test_latent_audit.py", "tests/architecture/test_registry_contract.py",
              "tests/bench/test_pool_executors.py", "tests/external/test_external_references.py",
              "tests/reports/test_bench_suite.py", "tests/models/test_ddp.py", "tests/reports/test_privacy_utility.py",
              "tests/privacy/test_accountant_plugin.py", "tests/models/test_dpsad.py", "overfit",
              "tests/reports/test_report_browser.py", "tests/faults/test_caption_bounds.py",
              "tests/faults/test_orphaned_workers.py", "tests/models/test_dpdm.py")


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with SHARED_GROUPS: a file is one unit (its module and session fixtures are computed once),
    the files of a shared group are one unit, and the units of LONG_FIRST are queued first. (Not ``--dist loadgroup``
    with markers: xdist 3.8 marks a group by rewriting ``item._nodeid``, which pytest 9.2 does not read, so every test
    would be its own unit and both workers would compute every file's fixtures.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileGroupScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return SHARED_GROUPS.get(path, path)

        def _assign_work_unit(self, node) -> None:
            if not getattr(self, "_long_first", False):  # once, when the queue is complete: the long units first
                self._long_first = True
                rank = {unit: i for i, unit in enumerate(LONG_FIRST)}
                units = sorted(self.workqueue.items(), key=lambda kv: rank.get(kv[0], len(rank)))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return FileGroupScheduling(config, log)


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory):
    """One run store for the whole session (cached runs are shared between tests and xdist workers)."""
    from helpers import shared_tmp

    return shared_tmp(tmp_path_factory, "runs")


from helpers import train_cfg  # noqa: E402


@pytest.fixture(scope="session")
def overfit_centralized(runs_dir):
    """The overfit centralized target: tiny preset, 128 members (trained once per session)."""
    from privbench.runs import train as api

    # 1500 steps (≈ 750 epochs of the 128 members at batch 64) overfit enough for the attacks to separate members
    # clearly (PIA AUC near 0.95) while keeping the training to a few CPU minutes.
    cfg = train_cfg("centralized", "tiny", data__n_members=128, data__n_nonmembers=128, train__steps=1500)
    return api.train(cfg, runs_dir, "cpu")


#: ``PRIVBENCH_TEST_TIMES=FILE``: append "seconds nodeid" per test phase as the run goes (a partial or killed run
#: still tells where the time goes; ``--durations`` prints only at the end)
_TIMES = os.environ.get("PRIVBENCH_TEST_TIMES")


def pytest_runtest_logreport(report):
    # under xdist the controller sees each worker's report again (with ``node`` set): written once, by the worker
    if _TIMES and report.duration >= 0.5 and not hasattr(report, "node"):
        with open(_TIMES, "a") as f:
            f.write(f"{report.duration:.1f} {report.when} {report.nodeid}\n")


@pytest.fixture
def privbench_log():
    """What the library logged on ``privbench.*`` (INFO and up) during the test, one message per line — the
    in-process view of the lines the CLI prints on stderr (the CLI's handler may stop propagation to the root
    logger, so caplog alone can miss them)."""
    import logging

    class _Lines(logging.Handler):
        def __init__(self):
            super().__init__(logging.INFO)
            self.lines: list[str] = []

        def emit(self, record):
            self.lines.append(record.getMessage())

        @property
        def text(self) -> str:
            return "\n".join(self.lines)

    own = logging.getLogger("privbench")
    h, old = _Lines(), own.level
    own.addHandler(h)
    own.setLevel(logging.INFO)
    try:
        yield h
    finally:
        own.removeHandler(h)
        own.setLevel(old)
