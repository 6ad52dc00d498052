"""``--dataset PATH``: any method trains on the user's records (.npz or image folder), the member / non-member
split drawn from them; the dataset name is content-addressed so a changed file is a new target."""
from __future__ import annotations

import numpy as np
import torch
from click.testing import CliRunner

from privbench.cli import main


def write_records(path, n=48, seed=1, classes=4):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    x = (rng.integers(0, 64, size=(n, 8, 8, 3)) + y[:, None, None, None] * 48).astype(np.uint8)
    np.savez(path, images=x, labels=y)
    return x, y


def test_records_register_as_a_content_addressed_dataset(tmp_path):
    from privbench.data.base import dataset_info, load_dataset
    from privbench.data.user_records import is_records_path, register_records

    x, y = write_records(tmp_path / "a.npz")
    name = register_records(str(tmp_path / "a.npz"))
    assert name.startswith("records-") and register_records(str(tmp_path / "a.npz")) == name
    info = dataset_info(name)
    assert (info.channels, info.size, info.num_classes) == (3, 8, 4)
    got_x, got_y = load_dataset(name)
    assert torch.equal(got_y, torch.as_tensor(y).long())
    assert torch.allclose(got_x, torch.as_tensor(x).permute(0, 3, 1, 2).float() / 127.5 - 1)
    write_records(tmp_path / "b.npz", seed=2)                          # other pixels: another dataset
    assert register_records(str(tmp_path / "b.npz")) != name
    assert is_records_path(str(tmp_path / "a.npz")) and not is_records_path("digits")


def test_bad_records_are_one_line_exit_2(tmp_path):
    (tmp_path / "idx.npy").write_bytes(b"")
    for arg in (str(tmp_path / "missing.npz"), str(tmp_path / "idx.npy")):
        r = CliRunner().invoke(main, ["train", "--method", "centralized", "--dataset", arg, "--preset", "test",
                                      "--runs-dir", str(tmp_path / "runs")])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_method_trains_on_the_users_records(tmp_path):
    """centralized, test preset: the run is named by the records' content, and its member / non-member split is
    drawn from the file's records (disjoint, within the file); asking for more records than the file has is
    exit 2."""
    from privbench.data.splits import member_split
    from privbench.data.user_records import register_records

    x, _ = write_records(tmp_path / "mine.npz")
    args = ["train", "--method", "centralized", "--dataset", str(tmp_path / "mine.npz"), "--preset", "test",
            "--set", "data.n_members=16", "--set", "data.n_nonmembers=16", "--runs-dir", str(tmp_path / "runs")]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    name = register_records(str(tmp_path / "mine.npz"))
    run_dir = next((tmp_path / "runs").iterdir())
    assert name in run_dir.name and f"dataset: {name}" in (run_dir / "config.yaml").read_text()
    split = member_split(len(x), 16, 16, 0)
    assert not set(split.members) & set(split.nonmembers) and max(split.members + split.nonmembers) < len(x)
    too_many = [a.replace("data.n_members=16", "data.n_members=40") for a in args]
    r = CliRunner().invoke(main, too_many)
    assert r.exit_code == 2 and "exceeds the dataset's 48 records" in r.output, r.output


def test_a_suite_names_the_users_records_by_path(tmp_path):
    """``datasets: [mine.npz]`` in a suite (relative to the suite's folder) trains and attacks on the records, as
    ``--dataset PATH``; a path that does not exist is one line, exit 2; Ray/Slurm are refused before any cluster."""
    import json

    import yaml

    folder = tmp_path / "suites"
    folder.mkdir()
    write_records(folder / "mine.npz", n=64)
    suite = {"name": "mine", "preset": "test", "device": "cpu", "datasets": ["mine.npz"], "seeds": [0],
             "attacks": ["loss"], "fid": False, "samples": False,
             "set": {"data.n_members": 24, "data.n_nonmembers": 24},
             "methods": {"centralized": {"targets": ["model"]}}}
    (folder / "mine.yaml").write_text(yaml.safe_dump(suite))
    r = CliRunner().invoke(main, ["bench", "--suite", str(folder / "mine.yaml"), "--runs-dir", str(tmp_path / "runs"),
                                  "--out", str(tmp_path / "bench"), "--json"])
    assert r.exit_code == 0, r.output
    cells = json.loads(r.stdout)["cells"]
    assert cells and all(c["status"] == "done" and c["dataset"].startswith("records-") for c in cells)
    from privbench.data.user_records import register_records

    assert cells[0]["dataset"] == register_records(str(folder / "mine.npz"))
    r = CliRunner().invoke(main, ["bench", "--suite", str(folder / "mine.yaml"), "--runs-dir", str(tmp_path / "runs"),
                                  "--executor", "slurm"])
    assert r.exit_code == 2 and "local executor" in r.stderr, r.output
    suite["datasets"] = ["missing.npz"]
    (folder / "bad.yaml").write_text(yaml.safe_dump(suite))
    r = CliRunner().invoke(main, ["bench", "--suite", str(folder / "bad.yaml"), "--runs-dir", str(tmp_path / "r2")])
    assert r.exit_code == 2 and "missing.npz: no such file or folder" in r.stderr and "Traceback" not in r.output
