"""The CDI-style set test on per-record statistics cached from the overfit tiny target (centralized, digits,
128 members / 128 non-members, 1500 steps; tests/metrics/data/overfit_tiny_stats.npz, made by
benchmarks/cache_overfit_stats.py): power at 32 suspect members, type-I error at 32 suspect non-members, over
100 seeded repeats each."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privbench.core.errors import BadInput
from privbench.metrics.set_inference import set_inference_test

DATA = Path(__file__).parent / "data" / "overfit_tiny_stats.npz"
STATS = ("loss", "pia", "sima")


def _features(d, part):
    return np.log(np.stack([d[f"{part}_{s}"] for s in STATS], 1))


@pytest.fixture(scope="module")
def cached():
    d = np.load(DATA)
    ev, pub = _features(d, "eval"), _features(d, "public")
    lab = d["eval_labels"] == 1
    return ev[lab], ev[~lab], pub


def _repeats(suspect_pool, public, n_suspect=32, n_reference=128):
    ps = []
    for seed in range(100):
        rng = np.random.default_rng(seed)
        s = suspect_pool[rng.choice(len(suspect_pool), n_suspect, replace=False)]
        r = public[rng.choice(len(public), n_reference, replace=False)]
        ps.append(set_inference_test(s, r, seed=seed)["p_value"])
    return np.asarray(ps)


def test_32_suspect_members_are_detected_in_95_of_100_repeats(cached):
    members, _, public = cached
    ps = _repeats(members, public)
    assert (ps < 0.01).sum() >= 95, np.sort(ps)[-10:]


def test_32_suspect_nonmembers_are_not_flagged_in_95_of_100_repeats(cached):
    _, nonmembers, public = cached
    ps = _repeats(nonmembers, public)
    assert (ps >= 0.05).sum() >= 95, np.sort(ps)[:10]


def test_too_few_records_or_non_finite_features_are_bad_input():
    with pytest.raises(BadInput, match="at least 4"):
        set_inference_test(np.zeros((3, 2)), np.zeros((10, 2)))
    with pytest.raises(BadInput, match="not finite"):
        set_inference_test(np.full((5, 1), np.nan), np.zeros((5, 1)))
