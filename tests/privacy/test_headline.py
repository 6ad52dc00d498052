"""The headline empirical ε lower bound (privbench.privacy.compare.headline_bounds): the largest of a model's 2k
corrected bounds, valid family-wise at the stated confidence."""
from __future__ import annotations

import numpy as np
import pytest

from privbench.privacy.audit import clopper_pearson_epsilon, one_run_epsilon
from privbench.privacy.compare import headline_bounds, membership_flag_bounds

ALPHA = 0.05


def _null_models(n_models: int, k: int, m: int, seed: int):
    """``n_models`` models attacked by ``k`` attacks each, every score independent of membership (true ε = 0)."""
    rng = np.random.default_rng(seed)
    labels = np.r_[np.ones(m // 2, int), np.zeros(m // 2, int)]
    return [[(f"attack{j}", rng.normal(size=m), labels) for j in range(k)] for _ in range(n_models)]


def test_the_headline_exceeds_zero_under_the_null_at_most_at_the_stated_rate():
    """With no leakage (true ε = 0) any positive bound is a false claim. The headline over 8 attacks (16 bounds)
    is positive in at most α of the models; the maximum of the same 16 bounds at 1 − α each (no correction) is
    positive far more often than α — the rule without the family-wise correction would not hold."""
    models = _null_models(200, k=8, m=100, seed=2)
    headline_hits = uncorrected_hits = 0
    for items in models:
        h = headline_bounds(items, delta=1e-5, confidence=1 - ALPHA)
        headline_hits += h["epsilon_lower_bound"] > 0
        uncorrected = max(max(membership_flag_bounds(s, y, delta=1e-5, confidence=1 - ALPHA).values())
                          for _, s, y in items)
        uncorrected_hits += uncorrected > 0
    assert headline_hits / len(models) <= ALPHA
    assert uncorrected_hits / len(models) > ALPHA


def test_the_headline_is_the_largest_of_the_corrected_bounds():
    rng = np.random.default_rng(0)
    m = 400
    labels = np.r_[np.ones(m // 2, int), np.zeros(m // 2, int)]
    items = [("pia", rng.normal(size=m) + 1.2 * labels, labels), ("loss", rng.normal(size=m) + 0.6 * labels, labels),
             ("secmi", rng.normal(size=m), labels)]
    h = headline_bounds(items, delta=1e-5, confidence=0.95)
    k = 2 * len(items)
    assert h["family_size"] == k and h["bound_confidence"] == pytest.approx(1 - 0.05 / k)
    expected = []
    for name, s, y in items:  # each bound recomputed at 1 − α/(2k), the same procedures as the reported ones
        cp = clopper_pearson_epsilon(s, y, delta=1e-5, confidence=1 - 0.05 / k, threshold_selection="split", seed=0)
        one = one_run_epsilon(s, y, delta=1e-5, confidence=1 - 0.05 / k, seed=0)
        expected += [(name, "clopper_pearson", cp["epsilon_lower_bound"]), (name, "one_run", one["epsilon_lower_bound"])]
    assert [(b["attack"], b["bound"]) for b in h["bounds"]] == [(a, b) for a, b, _ in expected]
    assert [b["epsilon_lower_bound"] for b in h["bounds"]] == pytest.approx([v for _, _, v in expected])
    best = max(expected, key=lambda e: e[2])
    assert h["epsilon_lower_bound"] == pytest.approx(best[2]) and best[2] > 0
    assert (h["attack"], h["bound"]) == best[:2] == ("pia", h["bound"])
    # each corrected bound is below the same bound at 95 % alone (the details): the correction costs a little
    cp95 = clopper_pearson_epsilon(items[0][1], labels, delta=1e-5, confidence=0.95, seed=0)["epsilon_lower_bound"]
    assert h["bounds"][0]["epsilon_lower_bound"] <= cp95


def test_no_positive_bound_gives_zero_from_no_attack():
    labels = np.r_[np.ones(20, int), np.zeros(20, int)]
    h = headline_bounds([("pia", np.zeros(40), labels)], delta=1e-5, confidence=0.95)  # constant scores: no test
    assert h["epsilon_lower_bound"] == 0 and h["attack"] is None and h["bound"] is None
    assert {b["epsilon_lower_bound"] for b in h["bounds"]} == {0.0}
    with pytest.raises(ValueError):
        headline_bounds([], delta=1e-5, confidence=0.95)
