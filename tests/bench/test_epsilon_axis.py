"""The suite's epsilons axis (bench/suite.py epsilon_axis, bench/plan.py): one cell per private method × ε, each
calibrated by the method's own accountant; non-private baselines at ε = ∞."""
from __future__ import annotations

import pytest

from privbench.core.errors import BadInput

EPSILONS = [1, 4, 10, 32]


def _suite(**extra):
    return {"name": "eps", "preset": "test", "seeds": [0], "epsilons": EPSILONS, "seeds_by_epsilon": {10: [0, 1, 2]},
            "attacks": ["loss"], "methods": {
                "centralized": {"targets": ["model"]},
                "dpdm": {"targets": ["model"]},
                "dpdm-lora": {"method": "dpdm", "targets": ["model"],
                              "set": {"data.public": "pool", "train.init": "public", "dp.trainable": "lora"}},
                "pfdm": {"targets": ["shared"]},
                "pfdm-clip": {"method": "pfdm", "targets": ["shared"], "epsilons": [4, 10],
                              "set": {"pfdm.calibrate": "clip"}}}, **extra}


def _plan(suite, tmp_path):
    from privbench.bench.plan import plan

    return plan(suite, preset=None, sets=[], runs_dir=tmp_path, device="cpu")


def test_epsilon_axis_expands_calibrates_and_equals_privbench_account(tmp_path):
    from privbench.privacy.dpsgd import account_dpsgd
    from privbench.privacy.ldp import pfdm_epsilon
    from privbench.runs.train import make_method

    cells = _plan(_suite(), tmp_path)
    by = {}
    for c in cells:
        by.setdefault(c.variant or c.method, []).append(c)
    assert {(c.epsilon, c.seed) for c in by["centralized"]} == {(None, 0), (None, 1), (None, 2)}
    want = {(e, s) for e in EPSILONS for s in ([0, 1, 2] if e == 10 else [0])}
    for name in ("dpdm", "dpdm-lora", "pfdm"):
        assert {(c.epsilon, c.seed) for c in by[name]} == want, name
    assert {c.epsilon for c in by["pfdm-clip"]} == {4, 10}
    hashes = [c.config_hash for c in cells]
    assert len(set(hashes)) == len(hashes)  # one attack per run: every cell its own run (distinct hashes)
    for c in by["dpdm"] + by["dpdm-lora"]:
        plan = make_method(c.cfg, tmp_path / "x", "cpu").plan()
        acc = account_dpsgd(plan.noise_multiplier, plan.sample_rate, plan.steps, plan.delta,
                            accountant=plan.accountant)  # what `privbench account dpsgd` prints
        assert acc["epsilon"] <= c.epsilon and acc["epsilon"] >= 0.97 * c.epsilon, (c.epsilon, acc)
        assert c.cfg.dp.epsilon == c.epsilon
    for c in by["pfdm"]:
        p, d = c.cfg.pfdm, c.cfg.diffusion
        eps = pfdm_epsilon(p.clip, p.t0, c.cfg.dp.delta, num_timesteps=d.num_timesteps)
        eps_before = pfdm_epsilon(p.clip, p.t0 - 1, c.cfg.dp.delta, num_timesteps=d.num_timesteps)
        assert eps <= c.epsilon < eps_before  # the smallest t0 that reaches ε
        assert make_method(c.cfg, tmp_path / "y", "cpu").privacy("shared")["epsilon"] == pytest.approx(eps)
    for c in by["pfdm-clip"]:
        p = c.cfg.pfdm
        assert p.t0 == 690 and pfdm_epsilon(p.clip, p.t0, c.cfg.dp.delta) == pytest.approx(c.epsilon, rel=1e-6)
    # planned again: the same cells (ids, hashes) — a rerun finds every cell's cache
    assert [c.id for c in _plan(_suite(), tmp_path)] == [c.id for c in cells]
    assert "epsilon 10" in by["dpdm-lora"][0].label() or any("epsilon 10" in c.label() for c in by["dpdm-lora"])


@pytest.mark.parametrize("bad,match", [
    ({"epsilons": [0, 4]}, "not a finite epsilon"),
    ({"epsilons": [4, 4]}, "repeats a value"),
    ({"seeds_by_epsilon": [1]}, "seeds_by_epsilon: expected a mapping"),
])
def test_bad_epsilon_axis_is_one_line(tmp_path, bad, match):
    with pytest.raises(BadInput, match=match) as e:
        _plan({**_suite(), **bad}, tmp_path)
    assert "\n" not in str(e.value)


def test_unreachable_epsilon_is_one_line(tmp_path):
    suite = _suite()
    suite["methods"] = {"pfdm": {"targets": ["shared"], "set": {"pfdm.clip": 1000.0}}}
    suite["epsilons"] = [0.01]
    with pytest.raises(BadInput, match="pfdm: epsilon 0.01 per upload is out of reach") as e:
        _plan(suite, tmp_path)
    assert "\n" not in str(e.value)
