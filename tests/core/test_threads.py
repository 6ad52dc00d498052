"""--threads: the default divides the cores this process may use among concurrent privbench workers."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


_POLICY_PROBE = ("import os, sys\n{pre}from privbench.cli import main\n"
                 "main(['list', 'presets'], standalone_mode=False)\n"
                 "print(os.environ.get('OMP_WAIT_POLICY', '-'), 'torch' in sys.modules)")


def test_passive_wait_on_a_busy_machine_only():
    """The rule: PASSIVE when others use at least half the cores (or the look is impossible); an idle machine, a
    user's policy or spin count, or a torch already loaded: left alone."""
    def pick(env, torch_loaded, share):
        return threads.wait_policy_for(env, torch_loaded, lambda: share)

    def never():
        raise AssertionError("looked at the machine although nothing was left to choose")

    assert pick({}, False, 0.9) == "PASSIVE" and pick({}, False, threads.BUSY_SHARE) == "PASSIVE"
    assert pick({}, False, None) == "PASSIVE"  # no /proc/stat: the safe choice
    assert pick({}, False, 0.1) is None
    assert threads.wait_policy_for({"OMP_WAIT_POLICY": "ACTIVE"}, False, never) is None
    assert threads.wait_policy_for({"GOMP_SPINCOUNT": "0"}, False, never) is None
    assert threads.wait_policy_for({}, True, never) is None
    share = threads.cpu_share_in_use(0.05)
    assert share is None or 0.0 <= share <= 1.0


@pytest.mark.parametrize("user, torch_first, expected", [("ACTIVE", False, "ACTIVE False"),
                                                         (None, True, "- True")])
def test_passive_wait_policy_unless_the_user_set_one(user, torch_first, expected):
    """The command line decides the wait policy before torch loads; a user's policy (or a torch already
    loaded, whose OpenMP runtime has read the environment) is left alone."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    if user:
        env["OMP_WAIT_POLICY"] = user
    code = _POLICY_PROBE.format(pre="import torch\n" if torch_first else "")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[-2] == expected


def test_import_privbench_writes_no_environment_and_does_not_sleep():
    """A library import has no side effect: the wait-policy look (a sleep on /proc/stat) is the command line's."""
    code = ("import json, os, time\nslept = []\ntime.sleep = slept.append\nbefore = dict(os.environ)\n"
            "import privbench\nprint(json.dumps([dict(os.environ) == before, slept]))")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[-2] == "[true, []]"


def _model(n_params: int) -> torch.nn.Module:
    return torch.nn.Linear(n_params - 1, 1)  # n_params - 1 weights and one bias


def test_small_model_gets_one_thread_by_default(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("PRIVBENCH_WORKERS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    assert threads.configure_threads() == 4
    assert threads.fit_threads_to_model(_model(threads.SMALL_MODEL_PARAMS)) == 4  # at the bound: kept
    assert threads.fit_threads_to_model(_model(threads.SMALL_MODEL_PARAMS - 1)) == 1 == torch.get_num_threads()


def test_given_thread_count_is_kept_for_a_small_model(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    threads.configure_threads(3)
    assert threads.fit_threads_to_model(_model(10)) == 3 == torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's OMP_NUM_THREADS is a given count too
    threads.configure_threads()
    assert threads.fit_threads_to_model(_model(10)) == 2


def test_small_model_rule_reaches_the_denoiser(monkeypatch):
    """The UNet factory applies the rule: the test preset's UNet (41k parameters) runs on one thread."""
    from privbench.core.config import build_config
    from privbench.models.unet import build_denoiser

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    threads.configure_threads()
    cfg = build_config("centralized", preset="test")
    build_denoiser(cfg.model, 1, 8, 10)
    assert torch.get_num_threads() == 1
