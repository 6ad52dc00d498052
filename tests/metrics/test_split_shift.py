"""The member/non-member shift check: a model-free classifier's cross-fitted AUC, a label-permutation test of it
against 0.5 (exact type-I, checked here on synthetic features), the AUC it detects with 80 % power (checked at
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
from privbench.metrics.split_shift import SHIFT_AUC_BOUND, caption_features, shift_test, shift_tests, split_shift
from privbench.metrics.split_shift import verdict as split_verdict
from privbench.metrics.split_verdict import flagged

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
    """No shift: p ≤ 0.05 in at most 66 of 1000 splits (the binomial 99 % upper limit of an exact 5 % test). A
    Mann–Whitney p-value of the same cross-fitted AUC, which ignores what cross-fitting adds to its spread,
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
    """A mean shift whose mean out-of-fold AUC is the AUC the check says it detects (within 0.005) is detected in
    at least 80 % of 300 splits; a null split's verdict names that AUC."""
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
    np.savez(tmp_path / "big.npz", images=np.repeat(np.repeat(u8[p[128:192]], 2, axis=-1), 2, axis=-2))
    r = run(main, ["check-split", "--members", str(tmp_path / "big.npz"), "--nonmembers", str(tmp_path / "b.npz")])
    assert r.exit_code == 2 and "members are 1×16×16 (C×H×W) and non-members 1×8×8" in r.stderr


WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _numbered(labels, numbers) -> list[str]:
    """Per-record captions of a fine-tuning set: the class, then the record's number in words."""
    return [f"a picture of the digit {WORDS[int(lab)]} number {WORDS[i // 10 % 10]} {WORDS[i % 10]}"
            for lab, i in zip(labels, numbers, strict=True)]


def _captioned_pair(tmp_path, digits, numbers_m, numbers_n, *, seed=1, n=32):
    """Two .npz record sets drawn from one random split of digits (the same pixel distribution), with captions."""
    x, y = digits
    u8 = np.round((x.numpy() + 1) * 127.5).astype(np.uint8)
    p = np.random.default_rng(seed).permutation(len(y))
    m, nm = p[:n], p[n:2 * n]
    np.savez(tmp_path / "m.npz", images=u8[m], captions=np.array(_numbered(y[m], numbers_m)))
    np.savez(tmp_path / "n.npz", images=u8[nm], captions=np.array(_numbered(y[nm], numbers_n)))
    return str(tmp_path / "m.npz"), str(tmp_path / "n.npz")


def test_captions_alone_separating_the_sets_is_a_shift(tmp_path, digits):
    """Members numbered 0-31 and non-members 32-63 in their captions, pixels from one random split: the captions
    tell the sets apart and the pixels do not; check-split says so (exit 1) and names the captions."""
    m, n = _captioned_pair(tmp_path, digits, range(32), range(32, 64))
    r = CliRunner().invoke(main, ["check-split", "--members", m, "--nonmembers", n, "--json"])
    res = json.loads(r.stdout)
    sets = res["feature_sets"]
    assert r.exit_code == 1 and "SHIFT:" in r.stderr and "the captions alone tell the sets apart" in r.stderr
    assert sets["captions"]["shift"] and sets["captions"]["auc"] > 0.9 and sets["captions"]["p_value"] <= 0.05
    assert not sets["pixels"]["shift"] and not sets["pixels"]["material"] and sets["pixels"]["p_value"] > 0.05
    assert res["features"] == "captions" and "captions" in res["detected_by"] and "pixels" not in res["detected_by"]
    assert res["auc"] == sets["captions"]["auc"] and res["n_features"] == sets["captions"]["n_features"]
    assert res["members"]["captions"] == "given with the records" and res["shift"]
    assert set(res) == _documented_keys() | {"features", "feature_sets", "detected_by"}
    # the pixels of the same records alone: no shift (the captions are what tell the sets apart)
    x, y = digits
    p = np.random.default_rng(1).permutation(len(y))
    assert not flagged(split_shift(x[p[:32]], x[p[32:64]], bootstrap=200))


def test_shuffled_captions_are_no_shift(tmp_path, digits):
    """The same caption numbers drawn from one shuffled range: no feature set flags a shift (exit 0)."""
    perm = np.random.default_rng(5).permutation(64)
    m, n = _captioned_pair(tmp_path, digits, perm[:32], perm[32:])
    r = CliRunner().invoke(main, ["check-split", "--members", m, "--nonmembers", n, "--json"])
    res = json.loads(r.stdout)
    assert r.exit_code == 0 and res["detected_by"] == [] and not res["shift"] and not res["material"]
    assert set(res["feature_sets"]) == {"pixels", "captions", "both"}
    assert all(s["p_value"] > 0.05 for s in res["feature_sets"].values())
    r = CliRunner().invoke(main, ["check-split", "--members", m, "--nonmembers", n])
    assert r.exit_code == 0 and "by feature set: pixels AUC" in r.stdout and "captions AUC" in r.stdout


def test_family_of_feature_sets_keeps_its_level():
    """No shift in either block: a shift on any of the three feature sets in at most 27 of 300 null splits (the
    binomial 99 % upper limit of an exact 5 % test). Testing each set against its own permutations instead flags
    more (docs/external-models.md): the max-statistic test is what keeps the family at 5 %."""
    rng = np.random.default_rng(7)
    vocab = np.array([f"w{i}" for i in range(40)])
    hits = 0
    for seed in range(300):
        pixels = _synthetic(20_000 + seed, 0.0)
        caps = caption_features([" ".join(rng.choice(vocab, 6)) for _ in range(2 * N)])
        res = shift_tests({"pixels": [(pixels, True)], "captions": [(caps, False)],
                           "both": [(pixels, True), (caps, False)]}, LABELS, seed=seed, permutations=P, bootstrap=0)
        hits += any(s["shift"] for s in res["feature_sets"].values())
        assert res["shift"] == any(s["shift"] for s in res["feature_sets"].values())
    assert hits <= 27


def test_bad_captions_are_one_line_exit_2(tmp_path, digits):
    m, n = _captioned_pair(tmp_path, digits, range(32), range(32, 64))
    x, y = digits
    rest = np.random.default_rng(1).permutation(len(y))[64:96]  # records the captioned pair does not hold
    np.savez(tmp_path / "plain.npz", images=np.round((x[rest].numpy() + 1) * 127.5).astype(np.uint8))
    for args, what in (([m, str(tmp_path / "plain.npz")], "the members have captions and the non-members have none"),
                       ([str(tmp_path / "plain.npz"), n], "the non-members have captions and the members have none")):
        r = CliRunner().invoke(main, ["check-split", "--members", args[0], "--nonmembers", args[1]])
        lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and what in lines[0] and "Traceback" not in r.stderr
    np.savez(tmp_path / "obj.npz", images=np.zeros((32, 1, 8, 8), np.uint8),
             captions=np.array(["a"] * 32, dtype=object))
    r = CliRunner().invoke(main, ["check-split", "--members", str(tmp_path / "obj.npz"), "--nonmembers", n])
    assert r.exit_code == 2 and "object (pickled) array" in r.stderr
    with pytest.raises(BadInput, match="3 captions for 10 members"):
        split_shift(x[:10], x[10:20], member_captions=["a"] * 3, nonmember_captions=["b"] * 10)
