"""Fixtures of the fault suite: one pristine trained run (with one attack result) and private copies to damage."""
from __future__ import annotations

import shutil

import pytest
from fault_helpers import TEST, cli


@pytest.fixture(scope="session")
def pristine(tmp_path_factory):
    """A trained centralized run (test preset) with one loss attack: (runs dir, run dir, attack folder)."""
    runs = tmp_path_factory.mktemp("pristine")
    r = cli("attack", *TEST, "--attack", "loss", "--runs-dir", runs)
    assert r.code == 0, r
    run_dir = next(p for p in runs.iterdir() if p.is_dir())
    out_dir = next((run_dir / "attacks").iterdir())
    return runs, run_dir, out_dir


@pytest.fixture
def store(pristine, tmp_path):
    """A private copy of the pristine store: (runs dir, run dir, attack folder)."""
    runs, run_dir, out_dir = pristine
    dst = tmp_path / "runs"
    shutil.copytree(runs, dst)
    rd = dst / run_dir.name
    return dst, rd, rd / "attacks" / out_dir.name
