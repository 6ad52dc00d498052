"""Issue 19.7: the member/non-member shift check (a model-free classifier's cross-validated AUC with a 95 % CI)
finds a split by class and stays quiet on seeded i.i.d. splits."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from privbench import load_dataset
from privbench.cli import main
from privbench.core.errors import BadInput
from privbench.metrics.split_shift import SHIFT_AUC_BOUND, split_shift


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def test_class_split_is_a_shift(digits):
    x, y = digits
    r = split_shift(x[y < 5][:64], x[y >= 5][:64], bootstrap=200)
    assert r["shift"] and r["ci95"][0] > SHIFT_AUC_BOUND and "not evidence of leakage" in r["verdict"]
    assert r == split_shift(x[y < 5][:64], x[y >= 5][:64], bootstrap=200)  # deterministic


def test_iid_splits_pass_in_at_least_95_of_100_seeds(digits):
    x, y = digits
    shifts = 0
    for seed in range(100):
        p = np.random.default_rng(seed).permutation(len(y))[:64]
        shifts += split_shift(x[p[:32]], x[p[32:]], seed=seed, bootstrap=200)["shift"]
    assert shifts <= 5


def test_rescaled_copy_is_a_shift(digits):
    """A set quantised or scaled differently from the other is told apart without the model."""
    x, _ = digits
    p = np.random.default_rng(0).permutation(len(x))[:128]
    r = split_shift(x[p[:64]], (x[p[64:]] * 0.9).clamp(-1, 1), bootstrap=200)
    assert r["shift"]


def test_bad_shapes_and_sizes(digits):
    x, _ = digits
    with pytest.raises(BadInput, match="one C×H×W shape"):
        split_shift(x[:10], torch.zeros(10, 3, 8, 8))
    with pytest.raises(BadInput, match="at least 5 members"):
        split_shift(x[:4], x[4:20])


def test_cli_check_split_exit_codes(tmp_path, digits):
    x, y = digits
    u8 = np.round((x.numpy() + 1) * 127.5).astype(np.uint8)
    np.savez(tmp_path / "low.npz", images=u8[(y < 5).numpy()][:64])
    np.savez(tmp_path / "high.npz", images=u8[(y >= 5).numpy()][:64])
    p = np.random.default_rng(1).permutation(len(y))
    np.savez(tmp_path / "a.npz", images=u8[p[:64]])
    np.savez(tmp_path / "b.npz", images=u8[p[64:128]])
    run = CliRunner().invoke
    r = run(main, ["check-split", "--members", str(tmp_path / "low.npz"), "--nonmembers", str(tmp_path / "high.npz")])
    assert r.exit_code == 1 and "SHIFT" in r.stderr and "not evidence of leakage" in r.stderr
    r = run(main, ["check-split", "--members", str(tmp_path / "a.npz"), "--nonmembers", str(tmp_path / "b.npz"),
                   "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["shift"] is False and json.loads(r.stdout)["records_range"] == "0:255"
    r = run(main, ["check-split", "--members", str(tmp_path / "a.npz"), "--nonmembers", str(tmp_path / "a.npz")])
    assert r.exit_code == 2 and "share 64 records" in r.stderr
    r = run(main, ["check-split", "--members", str(tmp_path / "a.npz")])
    assert r.exit_code == 2 and "needs --members SPEC and --nonmembers SPEC" in r.stderr
