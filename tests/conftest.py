"""Shared fixtures. Trained targets are session-scoped so that slow tests train each one once."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("PRIVBENCH_PROGRESS", "0")


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory):
    """One run store for the whole session (cached runs are shared between tests)."""
    return tmp_path_factory.mktemp("runs")


from helpers import train_cfg  # noqa: E402


@pytest.fixture(scope="session")
def overfit_centralized(runs_dir):
    """The overfit centralized target of issue 3: tiny preset, 128 members (trained once per session)."""
    from privbench import api

    cfg = train_cfg("centralized", "tiny", data__n_members=128, data__n_nonmembers=128)
    return api.train(cfg, runs_dir, "cpu")
