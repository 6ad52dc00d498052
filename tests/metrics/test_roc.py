import json
import time

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

from privbench.core.errors import BadInput
from privbench.metrics import (
    asr,
    auc,
    calibrated_metrics,
    fpr_key,
    membership_metrics,
    roc_points,
    tpr_at_fpr,
)


def _data(seed, n_pos=300, n_neg=400, shift=0.5, levels=20):
    """Scores with many ties (rounded to a coarse grid)."""
    rng = np.random.default_rng(seed)
    s = np.r_[rng.normal(shift, 1.0, n_pos), rng.normal(0.0, 1.0, n_neg)]
    s = np.round(s * levels / 4.0) / (levels / 4.0)
    y = np.r_[np.ones(n_pos, int), np.zeros(n_neg, int)]
    perm = rng.permutation(s.size)
    return s[perm], y[perm]


def _sk_reference(s, y, target):
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    best_acc = np.max(0.5 * (tpr + 1 - fpr))
    ok = fpr <= target + 1e-12
    return fpr, tpr, best_acc, np.max(tpr[ok])


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_metrics_match_sklearn(seed):
    s, y = _data(seed)
    assert len(np.unique(s)) < s.size / 5  # plenty of ties
    assert auc(s, y) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    fpr, tpr, thr = roc_points(s, y)
    sk_fpr, sk_tpr, sk_thr = roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_allclose(fpr, sk_fpr)
    np.testing.assert_allclose(tpr, sk_tpr)
    np.testing.assert_allclose(thr[1:], sk_thr[1:])
    assert np.isinf(thr[0])
    for target in (0.5, 0.1, 0.01, 0.001):
        _, _, best_acc, best_tpr = _sk_reference(s, y, target)
        assert tpr_at_fpr(s, y, target) == pytest.approx(best_tpr, abs=1e-12)
    assert asr(s, y) == pytest.approx(_sk_reference(s, y, 0.01)[2], abs=1e-12)


def test_auc_mann_whitney_by_hand():
    # members {3, 2, 1}, non-members {2, 0}: pairs won 3>2,3>0,2>0,1>0 = 4, tie 2=2 → 0.5, lost 1<2 → 0
    s = [3, 2, 1, 2, 0]
    y = [1, 1, 1, 0, 0]
    assert auc(s, y) == pytest.approx(4.5 / 6)


@pytest.mark.parametrize("seed", range(6))
def test_tpr_at_fpr_never_exceeds_target(seed):
    s, y = _data(seed, n_pos=200, n_neg=150, levels=8)
    fpr, tpr, thr = roc_points(s, y)
    for target in (0.0, 0.003, 0.01, 0.02, 0.1, 0.3):
        t = tpr_at_fpr(s, y, target)
        # the realised threshold: the last ROC point whose FPR ≤ target, and its TPR equals ours
        ok = np.flatnonzero(fpr <= target + 1e-15)
        assert t == pytest.approx(tpr[ok[-1]])
        # no point with FPR > target was used: any point with larger TPR has FPR > target
        assert np.all(fpr[tpr > t + 1e-15] > target)


def test_tpr_at_fpr_exact_boundary():
    # 100 non-members; exactly one false positive above all members except 5 → FPR = 0.01 counts as ≤ 1 %
    s = np.r_[np.arange(10, 20), [9.5], np.arange(0, 9), np.zeros(0)]
    y = np.r_[np.ones(10, int), [0], np.zeros(9, int)]
    s = np.r_[s, -np.arange(1, 91)]
    y = np.r_[y, np.zeros(90, int)]
    assert (y == 0).sum() == 100
    assert tpr_at_fpr(s, y, 0.01) == 1.0
    assert tpr_at_fpr(s, y, 0.0099) == 1.0  # all 10 members are above the false positive
    s2 = s.copy()
    s2[10] = 100.0  # the non-member now tops everything
    assert tpr_at_fpr(s2, y, 0.0099) == 0.0
    assert tpr_at_fpr(s2, y, 0.01) == 1.0


def test_membership_metrics_keys_json_and_ci():
    s, y = _data(0, n_pos=500, n_neg=500)
    m = membership_metrics(s, y, bootstrap=200, seed=3)
    assert set(m) == {"auc", "asr", "tpr_at_1pct_fpr", "tpr_at_0_1pct_fpr", "ci95", "warnings"}
    assert set(m["ci95"]) == {"auc", "asr", "tpr_at_1pct_fpr", "tpr_at_0_1pct_fpr"}
    json.dumps(m)
    for k, (lo, hi) in m["ci95"].items():
        assert type(lo) is float and type(hi) is float
        assert lo <= m[k] <= hi, k
    assert m["ci95"]["auc"][1] - m["ci95"]["auc"][0] < 0.15
    assert m["auc"] == pytest.approx(roc_auc_score(y, s))
    # deterministic for a fixed seed, different for another seed
    assert membership_metrics(s, y, bootstrap=200, seed=3) == m
    assert membership_metrics(s, y, bootstrap=200, seed=4)["ci95"] != m["ci95"]


def test_bootstrap_is_stratified_and_matches_slow_reference():
    s, y = _data(1, n_pos=60, n_neg=40, levels=6)
    m = membership_metrics(s, y, bootstrap=100, seed=0)
    # slow reference with the same resample draws
    from privbench.metrics.roc import _bootstrap

    boot = _bootstrap(s, y == 1, (0.01, 0.001), 100, 0)
    order = np.argsort(-s, kind="mergesort")
    pos = order[y[order] == 1]
    neg = order[y[order] == 0]
    rng = np.random.default_rng(0)
    IP = pos[rng.integers(0, pos.size, size=(100, pos.size))]  # same draw order as the vectorised code
    INEG = neg[rng.integers(0, neg.size, size=(100, neg.size))]
    ref = []
    for ip, ineg in zip(IP, INEG):
        ref.append(roc_auc_score(np.r_[np.ones(ip.size), np.zeros(ineg.size)], np.r_[s[ip], s[ineg]]))
    np.testing.assert_allclose(boot["auc"], ref, atol=1e-12)
    assert m["ci95"]["auc"] == pytest.approx(list(np.percentile(ref, [2.5, 97.5])))


def test_bootstrap_speed():
    s, y = _data(2, n_pos=500, n_neg=500)
    best = float("inf")
    for _ in range(3):  # best of three: robust to a busy machine
        t0 = time.perf_counter()
        membership_metrics(s, y, bootstrap=1000, seed=0)
        best = min(best, time.perf_counter() - t0)
    assert best < 1.0


def test_bootstrap_zero_and_warnings():
    s, y = _data(0, n_pos=256, n_neg=256)
    m = membership_metrics(s, y, bootstrap=0)
    assert m["ci95"] == {k: None for k in ("auc", "asr", "tpr_at_1pct_fpr", "tpr_at_0_1pct_fpr")}
    assert any(
        "TPR@0.1%FPR is not resolvable with 256 non-members (smallest FPR step 1/256)" == w for w in m["warnings"]
    )
    assert any(w.startswith("TPR@1%FPR rests on at most 2 false positive") for w in m["warnings"])
    big = _data(0, n_pos=2000, n_neg=10000)
    assert membership_metrics(*big, bootstrap=0)["warnings"] == []
    neg = membership_metrics(-big[0], big[1], bootstrap=0)
    assert any("below 0.5" in w for w in neg["warnings"])


def test_scores_that_are_all_equal_are_flagged():
    y = np.r_[np.ones(64), np.zeros(64)].astype(int)
    m = membership_metrics(np.full(128, -0.0), y, bootstrap=0)
    assert m["auc"] == 0.5
    assert any(w.startswith("all 128 scores are equal (0): the score told no record from another") for w in m["warnings"])
    s, y2 = _data(0, n_pos=2000, n_neg=10000)
    assert not any("are equal" in w for w in membership_metrics(s, y2, bootstrap=0)["warnings"])


def test_fpr_key():
    assert fpr_key(0.01) == "tpr_at_1pct_fpr"
    assert fpr_key(0.001) == "tpr_at_0_1pct_fpr"
    assert fpr_key(0.0001) == "tpr_at_0_01pct_fpr"
    assert fpr_key(0.1) == "tpr_at_10pct_fpr"


def test_calibrated_direction_flip():
    s, y = _data(5, n_pos=400, n_neg=400, shift=1.0)
    a = calibrated_metrics(s, y, seed=1)
    b = calibrated_metrics(-s, y, seed=1)
    json.dumps(a)
    assert a["direction"] == 1 and b["direction"] == -1
    assert a["auc"] == pytest.approx(b["auc"])
    assert a["auc"] > 0.7
    assert a["accuracy"] == pytest.approx(b["accuracy"])
    assert a["n_calibration"] + a["n_evaluation"] == 800
    assert a["n_calibration"] == 400
    for k in ("tpr_at_1pct_fpr", "tpr_at_0_1pct_fpr"):
        assert set(a[k]) == {"tpr", "fpr", "threshold"}
        assert a[k] == b[k]
    # the oracle metrics never flip: negated scores have AUC < 0.5 there
    assert auc(-s, y) < 0.3


def test_calibrated_thresholds_come_from_calibration_half():
    s, y = _data(6, n_pos=500, n_neg=500, shift=1.0)
    c = calibrated_metrics(s, y, seed=0)
    from privbench.core.scores import stratified_halves as _stratified_halves

    cal, ev = _stratified_halves(y, 0)
    assert set(cal).isdisjoint(ev) and cal.size + ev.size == y.size
    t = c["tpr_at_1pct_fpr"]["threshold"]
    # calibration FPR at that threshold is ≤ 1 %, and the evaluation numbers are recomputable
    assert np.mean(s[cal][y[cal] == 0] >= t) <= 0.01
    assert c["tpr_at_1pct_fpr"]["tpr"] == pytest.approx(np.mean(s[ev][y[ev] == 1] >= t))
    assert c["tpr_at_1pct_fpr"]["fpr"] == pytest.approx(np.mean(s[ev][y[ev] == 0] >= t))
    assert c["auc"] == pytest.approx(roc_auc_score(y[ev], s[ev]))
    ta = c["accuracy_threshold"]
    tpr = np.mean(s[ev][y[ev] == 1] >= ta)
    fpr = np.mean(s[ev][y[ev] == 0] >= ta)
    assert c["accuracy"] == pytest.approx(0.5 * (tpr + 1 - fpr))


@pytest.mark.parametrize(
    "scores, labels",
    [
        ([0.1, 0.2, 0.3], [1, 0]),  # lengths differ
        ([0.1, 0.2, 0.3], [1, 1, 1]),  # one class
        ([0.1, 0.2, 0.3], [0, 0, 0]),
        ([0.1, float("nan"), 0.3], [1, 0, 1]),
        ([0.1, float("inf"), 0.3], [1, 0, 1]),
        ([0.1, 0.2, 0.3], [1, 0, 2]),  # not 0/1
        ([[0.1, 0.2]], [[1, 0]]),  # not 1-D
        (["a", "b"], [1, 0]),
        ([], []),
    ],
)
def test_bad_input(scores, labels):
    for fn in (auc, asr, roc_points, membership_metrics, calibrated_metrics):
        with pytest.raises(BadInput):
            fn(scores, labels)
    with pytest.raises(BadInput):
        tpr_at_fpr(scores, labels, 0.01)


def test_bad_parameters():
    s, y = _data(0, n_pos=20, n_neg=20)
    with pytest.raises(BadInput):
        tpr_at_fpr(s, y, 1.5)
    with pytest.raises(BadInput):
        membership_metrics(s, y, bootstrap=-1)
    with pytest.raises(BadInput):
        calibrated_metrics(s[:3], np.array([1, 0, 0]))  # one member cannot be split
    with pytest.raises(BadInput):
        calibrated_metrics(s, y, fprs=(2.0,))


def test_bad_input_is_value_error_with_one_line():
    with pytest.raises(ValueError) as e:
        auc([1.0, 2.0], [1, 1])
    assert "\n" not in str(e.value) and "labels" in str(e.value)


def test_accepts_torch_and_bool():
    torch = pytest.importorskip("torch")
    s, y = _data(0, n_pos=50, n_neg=50)
    assert auc(torch.tensor(s), torch.tensor(y)) == pytest.approx(auc(s, y))
    assert auc(s, y.astype(bool)) == pytest.approx(auc(s, y))
