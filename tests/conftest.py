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
    from privbench.runs import train as api

    # 1500 steps (≈ 750 epochs of the 128 members at batch 64) overfit enough for PIA AUC ≈ 0.95 and loss
    # AUC ≈ 0.85 at t = 200 while keeping the training to a few CPU minutes (issue 3).
    cfg = train_cfg("centralized", "tiny", data__n_members=128, data__n_nonmembers=128, train__steps=1500)
    return api.train(cfg, runs_dir, "cpu")
