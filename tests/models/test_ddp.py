"""Several processes, one model: `torchrun -m privbench train` (gloo, 2 CPU processes) equals one process.

The torchrun runs go through the real CLI (privbench/__main__.py → cli.train → distributed.init_from_env →
api.train), so the lock/rank-0 handling of the run directory is exercised too. Each run trains the test
preset for 20 steps; the single-process reference runs in this process.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import train_cfg

from privbench.core.distributed import shard
from privbench.runs import train as api

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(runs_dir: Path, method: str, *sets: str, nproc: int = 2) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PRIVBENCH_PROGRESS": "0"}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr",
           "127.0.0.1", "--master-port", str(_free_port()), "-m", "privbench", "train", "--method", method,
           "--preset", "test", "--device", "cpu", "--runs-dir", str(runs_dir), "--json"]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=str(runs_dir.parent))
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "checkpoints" / "model.safetensors"))


def max_abs_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def test_shard_slices_are_disjoint_and_cover_in_rank_order():
    for n in (0, 1, 5, 16, 17):
        for w in (1, 2, 3, 4):
            cuts = [shard(n, r, w) for r in range(w)]
            assert cuts[0][0] == 0 and cuts[-1][1] == n
            assert all(cuts[r][1] == cuts[r + 1][0] for r in range(w - 1))
            sizes = [hi - lo for lo, hi in cuts]
            assert max(sizes) - min(sizes) <= 1


def test_ddp_plain_loop_equals_one_process_and_resumes(tmp_path):
    """centralized, 20 steps: 2 DDP processes (the second run resumes from the first's step-10 checkpoint)
    reach the single-process weights; one log, written by rank 0."""
    cfg = train_cfg("centralized", "test", train__steps=20)
    single = api.train(cfg, tmp_path / "single", "cpu")
    # DDP, interrupted at step 10: a 10-step DDP run's checkpoint becomes the 20-step run's, which resumes
    first = json.loads(torchrun(tmp_path / "first", "centralized", "train.steps=10").stdout)
    target = api.run_dir_for(cfg, tmp_path / "ddp")
    shutil.copytree(Path(first["run_dir"]) / "checkpoints", target / "checkpoints")
    out = json.loads(torchrun(tmp_path / "ddp", "centralized", "train.steps=20").stdout)
    assert Path(out["run_dir"]) == target
    log = (target / "log.txt").read_text()
    assert "resumed from checkpoint at step 10/20" in log
    assert log.count("step 20/20") == 1  # rank 0 alone logs
    assert json.loads((target / "train_done.json").read_text())["world_size"] == 2
    diff = max_abs_diff(weights(single.ctx.run_dir), weights(target))
    print(f"DDP (2 gloo processes) vs one process, plain loop, 20 steps: max |Δw| = {diff:.2e}")
    assert diff < 1e-4
    # the logged global-batch loss (all-reduced over ranks) is the single-process one: Adam and the grad-norm
    # clip hide a constant factor on the gradient from the weights, not from the loss
    assert losses_logged(target)[-2:] == losses_logged(single.ctx.run_dir)[-2:]


def losses_logged(run_dir: Path) -> list[str]:
    return [line.split(" loss ")[1].split()[0] for line in (run_dir / "log.txt").read_text().splitlines()
            if " loss " in line]


@pytest.mark.slow
def test_ddp_dp_sgd_equals_one_process(tmp_path):
    """dpdm (Poisson sampling of the global batch, per-record clipping on each rank, the noise drawn once on
    rank 0 from the step generator, one all-reduce): the weights equal the single-process run's, and the
    privacy accounting file is the same."""
    cfg = train_cfg("dpdm", "test")
    single = api.train(cfg, tmp_path / "single", "cpu")
    out = json.loads(torchrun(tmp_path / "ddp", "dpdm").stdout)
    run = Path(out["run_dir"])
    assert run.name == single.ctx.run_dir.name
    diff = max_abs_diff(weights(single.ctx.run_dir), weights(run))
    print(f"DDP (2 gloo processes) vs one process, DP-SGD loop, 20 steps: max |Δw| = {diff:.2e}")
    assert diff < 1e-5
    a = json.loads((single.ctx.ckpt_dir / "privacy-model.json").read_text())
    b = json.loads((run / "checkpoints" / "privacy-model.json").read_text())
    assert a == b  # same plan (σ, q, steps, δ), same accounted ε


@pytest.mark.slow
def test_ddp_dp_sgd_secure_noise_runs(tmp_path):
    """dp.noise_source=secure under torchrun: rank 0 draws the Poisson sample, the seed of the step's draws and
    the noise, and broadcasts them; the run finishes with one log and one accounting file."""
    out = json.loads(torchrun(tmp_path / "ddp", "dpdm", "dp.noise_source=secure", "train.steps=5").stdout)
    run = Path(out["run_dir"])
    assert all(torch.isfinite(w).all() for w in weights(run).values())
    assert json.loads((run / "checkpoints" / "privacy-model.json").read_text())["plan"]["noise_source"] == "secure"
    assert (run / "log.txt").read_text().count("step 5/5") == 1


def test_other_commands_refuse_torchrun(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from privbench.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    r = CliRunner().invoke(main, ["sample", "--method", "centralized", "--preset", "test", "--runs-dir",
                                  str(tmp_path)])
    assert r.exit_code == 2 and "only `privbench train`" in r.output
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("batch", [1])
def test_global_batch_smaller_than_world_is_bad_input(batch, monkeypatch):
    from privbench.core import distributed
    from privbench.core.errors import BadInput

    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    with pytest.raises(BadInput, match="torchrun processes"):
        distributed.check_global_batch(batch)
