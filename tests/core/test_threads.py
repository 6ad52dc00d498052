"""--threads: the default divides the cores this process may use among concurrent privbench workers."""
from __future__ import annotations

import os

import pytest
import torch

from privbench.core import threads
from privbench.core.errors import BadInput


@pytest.fixture(autouse=True)
def _restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_default_divides_available_cores_among_workers(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 8)
    monkeypatch.setenv("PRIVBENCH_WORKERS", "3")
    assert threads.configure_threads() == 2 == torch.get_num_threads()
    monkeypatch.setenv("PRIVBENCH_WORKERS", "16")  # more workers than cores: never 0 threads
    assert threads.configure_threads() == 1 == torch.get_num_threads()
    monkeypatch.delenv("PRIVBENCH_WORKERS")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # torchrun's processes of this node share its cores
    assert threads.configure_threads() == 2


def test_explicit_count_and_omp_num_threads_win(monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 8)
    monkeypatch.setenv("PRIVBENCH_WORKERS", "8")
    assert threads.configure_threads(3) == 3 == torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert threads.configure_threads() == 2 == torch.get_num_threads()


def test_available_cores_is_this_process_affinity():
    if hasattr(os, "sched_getaffinity"):
        assert threads.available_cores() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("bad", ["0", "-1", "two"])
def test_bad_worker_count_is_bad_input(monkeypatch, bad):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("PRIVBENCH_WORKERS", bad)
    with pytest.raises(BadInput, match="PRIVBENCH_WORKERS"):
        threads.configure_threads()


def test_cli_threads_option(tmp_path):
    """Every command that trains/attacks/samples takes --threads and applies it before working."""
    from click.testing import CliRunner

    from privbench.cli import main

    for cmd in ("train", "sample", "attack", "run"):
        r = CliRunner().invoke(main, [cmd, "--help"])
        assert "--threads" in r.output, cmd
    r = CliRunner().invoke(main, ["train", "--method", "centralized", "--preset", "test", "--threads", "0",
                                  "--runs-dir", str(tmp_path)])
    assert r.exit_code == 2 and "--threads" in r.output
