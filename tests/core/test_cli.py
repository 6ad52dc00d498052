"""The CLI contract: exit codes, one-line errors, --json on stdout."""
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from privbench.cli import main


def cli(*args, cwd=None):
    """The installed entry point, in a process of its own."""
    return subprocess.run([sys.executable, "-m", "privbench.cli", *args], capture_output=True, text=True, cwd=cwd)


def invoke(*args):
    """The same command in this process (the import of torch and diffusers is paid once per test worker, not once a
    call); an exception that escaped the CLI's handling would be its exit code 1 here, as it would be there."""
    r = CliRunner().invoke(main, list(args))
    return subprocess.CompletedProcess(args, r.exit_code, r.stdout, r.stderr)


def test_version_and_list():
    r = cli("--version")
    assert r.returncode == 0 and "privbench" in r.stdout
    r = cli("list", "methods")
    assert r.returncode == 0 and "centralized" in r.stdout
    r = cli("list", "datasets")
    assert "digits" in r.stdout and "colored-digits" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["train", "--method", "nope"], "unknown method"),
    (["train", "--method", "centralized", "--set", "train.steps=-5"], "train.steps"),
    (["train", "--method", "centralized", "--set", "train.steps=abc"], "integer"),
    (["train", "--method", "centralized", "--set", "train.bogus=1"], "unknown key"),
    (["train", "--method", "centralized", "--dataset", "mnist"], "--data-root"),
    (["train", "--method", "centralized", "--dataset", "mnist", "--data-root", "/nonexistent"], "/nonexistent"),
    (["train", "--method", "centralized", "--config", "/nonexistent.yaml"], "not found"),
    (["train", "--method", "centralized", "--preset", "huge"], "huge"),
])
def test_bad_input_exit_2(tmp_path, args, needle):
    r = invoke(*args, "--runs-dir", str(tmp_path / "runs"))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_train_json_and_sample_npz(tmp_path):
    runs = str(tmp_path / "runs")
    r = invoke("train", "--method", "centralized", "--preset", "test", "--runs-dir", runs, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["method"] == "centralized" and out["targets"] == ["model"]
    r = invoke("sample", "--method", "centralized", "--preset", "test", "--runs-dir", runs, "--n", "6", "--class", "3",
            "--out", str(tmp_path / "g.png"), "--npz", str(tmp_path / "s.npz"), "--json")
    assert r.returncode == 0, r.stderr
    import numpy as np

    d = np.load(tmp_path / "s.npz")
    assert d["images"].shape == (6, 1, 8, 8) and d["images"].dtype == np.float32
    assert d["images"].min() >= -1 and d["images"].max() <= 1 and (d["labels"] == 3).all()
    assert (tmp_path / "g.png").stat().st_size > 0
    r = invoke("sample", "--method", "centralized", "--preset", "test", "--runs-dir", runs, "--class", "12")
    assert r.returncode == 2 and "--class" in r.stderr
