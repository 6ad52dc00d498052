"""The member/non-member shift check: a model-free classifier's cross-fitted AUC, a label-permutation test of it
against 0.5 (exact type-I, measured here on synthetic features), the AUC it detects with 80 % power (measured at
that AUC), and the material flag (CI lower bound > 0.6) on a split by class."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from scipy.stats import norm

from privbench import load_dataset
from privbench.cli import main
from privbench.core.errors import BadInput
from privbench.metrics.split_shift import SHIFT_AUC_BOUND, shift_test, split_shift
from privbench.metrics.split_shift import verdict as split_verdict

N, D, P = 32, 8, 199   # synthetic splits: 32 + 32 records, 8 Gaussian features, 199 permutations (p ≤ 0.05 exact)
LABELS = np.r_[np.ones(N), np.zeros(N)].astype(np.int64)


def _synthetic(seed: int, shift: float) -> np.ndarray:
    f = np.random.default_rng(seed).standard_normal((2 * N, D))
    f[:N] += shift
    return f


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def test_class_split_is_a_material_shift(digits):
    x, y = digits
    r = split_shift(x[y < 5][:64], x[y >= 5][:64], bootstrap=200)
    assert r["shift"] and r["material"] and r["ci95"][0] > SHIFT_AUC_BOUND and r["p_value"] == 1 / 1001
    assert r["verdict"].startswith("material member/non-member shift") and "not evidence of leakage" in r["verdict"]
    assert r == split_shift(x[y < 5][:64], x[y >= 5][:64], bootstrap=200)  # deterministic


def test_type_one_error_over_1000_null_splits():
    """No shift: p ≤ 0.05 in at most 66 of 1000 splits (the binomial 99 % upper limit of an exact 5 % test; measured
    53). A Mann–Whitney p-value of the same cross-fitted AUC, which ignores what cross-fitting adds to its spread,
    exceeds that limit: the bound can fail."""
    ps, naive = [], []
    mw_sd = np.sqrt((2 * N + 1) / (12 * N * N))
    for seed in range(1000):
        r = shift_test(_synthetic(seed, 0.0), LABELS, seed=seed, permutations=P, bootstrap=0)
        ps.append(r["p_value"])
        naive.append(norm.sf((r["auc"] - 0.5) / mw_sd))
    ps = np.array(ps)
    assert (ps <= 0.05).sum() <= 66 and (ps <= 0.5).mean() == pytest.approx(0.5, abs=0.05)
    assert (np.array(naive) <= 0.05).sum() > 66


def test_power_at_the_detectable_auc_is_at_least_80_percent():
    """A mean shift whose mean out-of-fold AUC is the AUC the check says it detects (measured: 0.738 vs 0.737) is
    detected in at least 80 % of 300 splits (measured 88 %); a null split's verdict names that AUC."""
    res = [shift_test(_synthetic(10_000 + seed, 0.42), LABELS, seed=seed, permutations=P, bootstrap=0)
           for seed in range(300)]
    detectable = np.mean([r["detectable_auc"] for r in res])
    assert abs(np.mean([r["auc"] for r in res]) - detectable) <= 0.005
    assert np.mean([r["shift"] for r in res]) >= 0.8
    r = shift_test(_synthetic(0, 0.0), LABELS, permutations=P, bootstrap=100)
    r["verdict"] = split_verdict(r)
    assert not r["shift"] and f"detectable: AUC >= {r['detectable_auc']:.3f} at 80 % power" in r["verdict"]
    assert f"p = {r['p_value']:.3g}" in r["verdict"]


def test_rescaled_copy_is_a_shift(digits):
    """A set quantised or scaled differently from the other is told apart without the model."""
    x, _ = digits
    p = np.random.default_rng(0).permutation(len(x))[:128]
    r = split_shift(x[p[:64]], (x[p[64:]] * 0.9).clamp(-1, 1), bootstrap=200)
    assert r["shift"]


def test_bad_shapes_sizes_and_permutations(digits):
    x, _ = digits
    with pytest.raises(BadInput, match="one C×H×W shape"):
        split_shift(x[:10], torch.zeros(10, 3, 8, 8))
    with pytest.raises(BadInput, match="at least 5 members"):
        split_shift(x[:4], x[4:20])
    with pytest.raises(BadInput, match="--permutations 18: expected an integer >= 19"):
        split_shift(x[:10], x[10:20], permutations=18)


def _documented_keys() -> set[str]:
    """The keys docs/cli.md §4.10 lists for check-split's JSON object."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    body = text.split("### 4.10 `check-split`", 1)[1].split("\n`{", 1)[1].split("}`", 1)[0]
    body = re.sub(r"\[.*?\]", "", body.replace("\n", " "))
    return {re.split(r"[:\s]", k.strip())[0] for k in body.split(",")}


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
                   "--json", "--permutations", "199"])
    res = json.loads(r.stdout)
    assert r.exit_code == 0 and res["shift"] is False and res["material"] is False and res["records_range"] == "0:255"
    assert res["permutations"] == 199 and res["p_value"] > 0.05 and set(res) == _documented_keys()
    r = run(main, ["check-split", "--members", str(tmp_path / "a.npz"), "--nonmembers", str(tmp_path / "a.npz")])
    assert r.exit_code == 2 and "share 64 records" in r.stderr
    r = run(main, ["check-split", "--members", str(tmp_path / "a.npz")])
    assert r.exit_code == 2 and "needs --members SPEC and --nonmembers SPEC" in r.stderr
