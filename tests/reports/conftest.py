"""Fixtures of the report/audit/gate tests: real results of the test preset (trained once per session)."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers import train_cfg


@pytest.fixture(scope="session")
def report_runs_dir(tmp_path_factory):
    """A run store of its own: other test packages add attacks to the shared store's runs."""
    from helpers import shared_tmp

    return shared_tmp(tmp_path_factory, "report_runs")


@pytest.fixture(scope="session")
def test_results(report_runs_dir):
    """Real result.json files: centralized (model) with pia and loss, pfdm (shared) with pia; test preset."""
    from privbench.runs.attack import run_attack

    out = {}
    for method, attack in (("centralized", "pia"), ("centralized", "loss"), ("pfdm", "pia")):
        res = run_attack(train_cfg(method, "test"), attack, None, runs_dir=report_runs_dir, device="cpu").to_json()
        out[(method, attack)] = Path(res["scores_path"]).parent / "result.json"
    return out
