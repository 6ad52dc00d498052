"""The suite's epsilons axis (bench/suite.py epsilon_axis, bench/plan.py): one cell per private method × ε, each
calibrated by the method's own accountant; non-private baselines at ε = ∞."""
from __future__ import annotations

import pytest

from privbench.core.errors import BadInput

EPSILONS = [1, 10]  # (the shipped suite: 1, 4, 10, 32; two values exercise the axis, each calibration costs)


def _suite(**extra):
    return {"name": "eps", "preset": "test", "seeds": [0], "epsilons": EPSILONS, "seeds_by_epsilon": {10: [0, 1]},
            "attacks": ["loss"], "methods": {
                "centralized": {"targets": ["model"]},
                "dpdm": {"targets": ["model"]},
                "dpdm-lora": {"method": "dpdm", "targets": ["model"],
                              "set": {"data.public": "pool", "train.init": "public", "dp.trainable": "lora"}},
                "pfdm": {"targets": ["shared"]},
                "pfdm-clip": {"method": "pfdm", "targets": ["shared"], "epsilons": [4],
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
    assert {(c.epsilon, c.seed) for c in by["centralized"]} == {(None, 0), (None, 1)}
    want = {(e, s) for e in EPSILONS for s in ([0, 1] if e == 10 else [0])}
    for name in ("dpdm", "dpdm-lora", "pfdm"):
        assert {(c.epsilon, c.seed) for c in by[name]} == want, name
    assert {c.epsilon for c in by["pfdm-clip"]} == {4}
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


def test_an_entrys_own_seeds_replace_the_axis_seeds(tmp_path):
    """``methods.<entry>.seeds``: a costly non-private reference at one seed; a private entry's every ε at its own
    seeds (seeds_by_epsilon does not reach it)."""
    suite = _suite()
    suite["methods"] = {"centralized": {"targets": ["model"], "seeds": [0]},
                        "dpdm": {"targets": ["model"], "seeds": [2]},
                        "pfdm": {"targets": ["shared"]}}
    by = {}
    for c in _plan(suite, tmp_path):
        by.setdefault(c.method, set()).add((c.epsilon, c.seed))
    assert by["centralized"] == {(None, 0)}  # without its own seeds: (None, 0) and (None, 1)
    assert by["dpdm"] == {(1.0, 2), (10.0, 2)}
    assert by["pfdm"] == {(1.0, 0), (10.0, 0), (10.0, 1)}


@pytest.mark.parametrize("bad,match", [
    ({"methods": {"dpdm": {"seeds": []}}}, "methods.dpdm.seeds: expected a non-empty list"),
    ({"methods": {"dpdm": {"seeds": [1, 1]}}}, "methods.dpdm.seeds: expected a non-empty list of distinct"),
    ({"methods": {"dpdm": {"seeds": [-1]}}}, "methods.dpdm.seeds=-1: expected an integer"),
    ({"methods": {"dpdm": {"seeds": [0], "epsilons": [4, 4]}}}, "methods.dpdm.epsilons: .* repeats a value"),
    ({"seeds_by_epsilon": {10: [2 ** 40]}}, "seeds_by_epsilon=1099511627776: expected an integer"),
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


@pytest.mark.slow
def test_an_epsilon_bench_reports_the_privacy_utility_figure_and_table(tmp_path):
    """A small ε-axis bench (test preset) end to end: one CSV row per method × ε × seed with utility and leakage,
    the figure as PNG/SVG/PDF, the LaTeX table (one row per method × ε) and the HTML section."""
    import csv

    import yaml

    from privbench.bench.runner import run_suite
    from privbench.reports import render_report

    suite = {"name": "eps-mini", "preset": "test", "device": "cpu", "seeds": [0], "epsilons": [4, 32],
             "attacks": ["loss"], "set": {"data.n_test": 30, "sample.sampler": "ddim"},
             "utility": {"n_per_class": 3, "epochs": 1},
             "methods": {"centralized": {"targets": ["model"]}, "dpdm": {"targets": ["model"]}}}
    path = tmp_path / "eps-mini.yaml"
    path.write_text(yaml.safe_dump(suite))
    res = run_suite(str(path), runs_dir=str(tmp_path / "runs"), device="cpu")
    cells = res["cells"]
    assert all(c["status"] == "done" for c in cells), [(c["kind"], c["reason"]) for c in cells]
    assert sorted((c["method"], c["epsilon"]) for c in cells if c["kind"] == "utility") == [
        ("centralized", None), ("dpdm", 4.0), ("dpdm", 32.0)]
    out = tmp_path / "report"
    render_report(tmp_path / "runs" / "bench-eps-mini", out)
    rows = list(csv.DictReader((out / "privacy_utility.csv").open()))
    assert sorted((r["method"], r["epsilon"]) for r in rows) == [("centralized", "inf"), ("dpdm", "32"),
                                                                  ("dpdm", "4")]
    for r in rows:
        assert r["best_attack"] == "loss" and 0 <= float(r["best_auc"]) <= 1 and r["downstream_accuracy"]
        assert float(r["downstream_ci_lo"]) <= float(r["downstream_accuracy"]) <= float(r["downstream_ci_hi"])
    dp = [r for r in rows if r["method"] == "dpdm"]
    assert sorted(float(r["formal_epsilon"]) for r in dp) == pytest.approx([4, 32], rel=0.05)
    for ext in ("png", "svg", "pdf"):
        assert (out / "figures" / f"privacy_utility.{ext}").stat().st_size > 0
    tex = (out / "tex" / "privacy_utility.tex").read_text()
    assert tex.count("\\\\") == 4 and "$\\infty$" in tex  # header + one row per method × ε
    assert 'id="privacy-utility"' in (out / "index.html").read_text()
