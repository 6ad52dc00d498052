import json
import math

import numpy as np
import pytest
from scipy import stats

from privbench.core.errors import BadInput
from privbench.privacy.audit import (
    clopper_pearson_epsilon,
    cp_epsilon_from_counts,
    one_run_epsilon,
    one_run_epsilon_from_counts,
)

CP_KEYS = {
    "epsilon_lower_bound",
    "confidence",
    "delta",
    "threshold_selection",
    "threshold",
    "fpr_upper",
    "fnr_upper",
    "n_members",
    "n_nonmembers",
    "assumption",
}


def _labels(n_in=1000, n_out=1000):
    return np.r_[np.ones(n_in, int), np.zeros(n_out, int)]


def test_cp_worked_example_landscape_5_2():
    # n_in = n_out = 1000, TP = 200, FP = 10, δ = 1e-5, 95 % → ε_lb ≈ 2.26 (raw ln(TPR/FPR) = 3.00)
    assert cp_epsilon_from_counts(200, 10, 1000, 1000, 1e-5, 0.95) == pytest.approx(2.26, abs=0.005)
    # the intermediate numbers of the worked example
    fnr_u = stats.beta.ppf(1 - 0.025, 800 + 1, 1000 - 800)
    fpr_u = stats.beta.ppf(1 - 0.025, 10 + 1, 1000 - 10)
    assert fnr_u == pytest.approx(0.824, abs=5e-4)
    assert fpr_u == pytest.approx(0.0183, abs=5e-5)
    assert math.log((1 - 1e-5 - fnr_u) / fpr_u) == pytest.approx(
        cp_epsilon_from_counts(200, 10, 1000, 1000, 1e-5, 0.95)
    )


def test_cp_counts_edge_cases():
    assert cp_epsilon_from_counts(0, 0, 100, 100) == 0.0  # flags nobody
    assert cp_epsilon_from_counts(100, 100, 100, 100) == 0.0  # flags everybody
    assert cp_epsilon_from_counts(50, 50, 100, 100) == 0.0  # chance
    perfect = cp_epsilon_from_counts(1000, 0, 1000, 1000)
    assert perfect == pytest.approx(math.log((1 - 1e-5 - (1 - 0.025 ** (1 / 1000))) / (1 - 0.025 ** (1 / 1000))))
    # symmetric side: few false negatives, many false positives
    assert cp_epsilon_from_counts(990, 500, 1000, 1000) > 1.0
    # higher confidence → smaller bound
    assert cp_epsilon_from_counts(200, 10, 1000, 1000, 1e-5, 0.99) < cp_epsilon_from_counts(200, 10, 1000, 1000)
    with pytest.raises(BadInput):
        cp_epsilon_from_counts(1001, 0, 1000, 1000)
    with pytest.raises(BadInput):
        cp_epsilon_from_counts(10, 0, 1000, 1000, delta=1.5)
    with pytest.raises(BadInput):
        cp_epsilon_from_counts(10, 0, 1000, 1000, confidence=1.0)


@pytest.mark.parametrize("selection", ["split", "bonferroni"])
def test_cp_random_scores_give_zero_or_near_zero(selection):
    y = _labels()
    vals = []
    for seed in range(5):
        s = np.random.default_rng(seed).normal(size=y.size)
        r = clopper_pearson_epsilon(s, y, threshold_selection=selection, seed=seed)
        vals.append(r["epsilon_lower_bound"])
    assert max(vals) < 0.2
    assert sum(v == 0.0 for v in vals) >= 3


@pytest.mark.parametrize("selection", ["split", "bonferroni"])
def test_cp_separated_scores_give_clearly_positive_bound(selection):
    y = _labels()
    r = clopper_pearson_epsilon(y.astype(float), y, threshold_selection=selection)
    assert set(r) >= CP_KEYS
    json.dumps(r)
    assert r["epsilon_lower_bound"] > 4.0
    assert r["epsilon_lower_bound"] == pytest.approx(r["ceiling"])
    assert r["n_members"] == 1000 and r["n_nonmembers"] == 1000
    assert r["confidence"] == 0.95 and r["delta"] == 1e-5
    assert selection in r["threshold_selection"]
    assert "i.i.d" in r["assumption"]
    # flipped scores: the flipped test is found, with the same bound
    f = clopper_pearson_epsilon(-y.astype(float), y, threshold_selection=selection)
    assert f["direction"] == -1
    assert f["epsilon_lower_bound"] == pytest.approx(r["epsilon_lower_bound"])
    # one-directional audit of flipped scores finds nothing
    g = clopper_pearson_epsilon(-y.astype(float), y, threshold_selection=selection, both_directions=False)
    assert g["epsilon_lower_bound"] == 0.0


def test_cp_split_bound_is_recomputable_from_evaluation_half():
    from privbench.core.scores import stratified_halves as _stratified_halves

    rng = np.random.default_rng(0)
    y = _labels(800, 800)
    s = 1.5 * y + rng.normal(size=y.size)
    r = clopper_pearson_epsilon(s, y, seed=7)
    assert r["direction"] == 1
    _, ev = _stratified_halves(y == 1, 7)
    se, ye = s[ev], y[ev]
    tp = int(np.sum(se[ye == 1] >= r["threshold"]))
    fp = int(np.sum(se[ye == 0] >= r["threshold"]))
    assert r["epsilon_lower_bound"] == pytest.approx(cp_epsilon_from_counts(tp, fp, 400, 400, 1e-5, 0.95))
    assert 0.5 < r["epsilon_lower_bound"] < r["ceiling"]
    assert r["n_evaluation"] == 800


def test_cp_bonferroni_not_above_fixed_threshold_bound():
    rng = np.random.default_rng(1)
    y = _labels(500, 500)
    s = 2.0 * y + rng.normal(size=y.size)
    r = clopper_pearson_epsilon(s, y, threshold_selection="bonferroni")
    tp = int(np.sum(s[y == 1] >= r["threshold"]))
    fp = int(np.sum(s[y == 0] >= r["threshold"]))
    # the Bonferroni-corrected bound at the chosen τ is below the uncorrected one at the same τ
    assert 0 < r["epsilon_lower_bound"] < cp_epsilon_from_counts(tp, fp, 500, 500)


def test_cp_bad_input():
    y = _labels(10, 10)
    s = np.arange(20.0)
    with pytest.raises(BadInput):
        clopper_pearson_epsilon(s, y, threshold_selection="best")
    with pytest.raises(BadInput):
        clopper_pearson_epsilon(s[:5], y)
    with pytest.raises(BadInput):
        clopper_pearson_epsilon(s, np.ones(20))
    with pytest.raises(BadInput):
        clopper_pearson_epsilon(s, y, delta=-1)
    with pytest.raises(BadInput):
        clopper_pearson_epsilon(np.r_[s[:-1], np.nan], y)


# ------------------------------------------------------------------------------------------------ one run


def test_one_run_ceiling_numbers_landscape_5_4():
    assert one_run_epsilon_from_counts(1000, 100, 90, 1e-5, 0.95) == pytest.approx(1.63, abs=0.005)
    assert one_run_epsilon_from_counts(1000, 100, 100, 1e-5, 0.95) == pytest.approx(3.47, abs=0.005)
    assert one_run_epsilon_from_counts(5000, 500, 450, 1e-5, 0.95) == pytest.approx(1.94, abs=0.005)


def test_one_run_counts_properties():
    assert one_run_epsilon_from_counts(1000, 100, 50) == 0.0  # chance accuracy
    assert one_run_epsilon_from_counts(1000, 0, 0) == 0.0
    # more correct guesses → larger bound; δ = 0 → no correction term → larger bound
    assert one_run_epsilon_from_counts(1000, 100, 95) > one_run_epsilon_from_counts(1000, 100, 90)
    assert one_run_epsilon_from_counts(1000, 100, 90, delta=0.0) >= one_run_epsilon_from_counts(1000, 100, 90)
    with pytest.raises(BadInput):
        one_run_epsilon_from_counts(100, 200, 10)
    with pytest.raises(BadInput):
        one_run_epsilon_from_counts(1000, 100, 101)


def test_one_run_from_scores():
    y = _labels(500, 500)
    perfect = one_run_epsilon(y.astype(float), y, n_guesses=100)
    json.dumps(perfect)
    assert perfect["n_guesses"] == 100 and perfect["n_correct"] == 100
    assert perfect["epsilon_lower_bound"] == pytest.approx(one_run_epsilon_from_counts(1000, 100, 100))
    assert perfect["ceiling"] == pytest.approx(3.47, abs=0.005)
    assert "independent fair coin" in perfect["assumption"]
    assert "permutation" in perfect["assumption"]
    rand = one_run_epsilon(np.random.default_rng(0).normal(size=1000), y, n_guesses=100)
    assert rand["epsilon_lower_bound"] < 0.3
    auto = one_run_epsilon(y.astype(float), y)
    assert "Bonferroni" in auto["n_guesses_selection"] and auto["confidence"] == 0.95
    # the best of 10 counts, each at 1 − 0.05/10 (the correction for choosing among them)
    assert auto["epsilon_lower_bound"] == pytest.approx(
        one_run_epsilon_from_counts(1000, auto["n_guesses"], auto["n_correct"], 1e-5, 0.995))
    assert auto["epsilon_lower_bound"] >= perfect["epsilon_lower_bound"]
    assert auto["n_correct"] <= auto["n_guesses"] <= 1000


def test_one_run_guess_counting():
    # top 2 guessed member, bottom 2 guessed non-member
    s = np.array([10.0, 9.0, 5.0, 4.0, 1.0, 0.0])
    y = np.array([1, 0, 1, 0, 1, 0])
    r = one_run_epsilon(s, y, n_guesses=4)
    assert r["n_correct"] == 2  # member 10 ✓, 9 ✗, bottom 1 (member) ✗, 0 ✓
    with pytest.raises(BadInput):
        one_run_epsilon(s, y, n_guesses=7)
    with pytest.raises(BadInput):
        one_run_epsilon(s, y, n_guesses=0)
