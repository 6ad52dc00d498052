"""`privbench audit`: Clopper–Pearson (split threshold) and one-run ε lower bounds next to the formal ε."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from report_fakes import write_result
from privbench.cli import main
from privbench.core.errors import BadInput
from privbench.reports.audit import audit_results, format_audit

CLI_KEYS = {"epsilon_lower_bound", "confidence", "delta", "formal_epsilon", "threshold_selection", "n_members",
            "n_nonmembers"}


def _labels(n):
    return np.r_[np.ones(n, int), np.zeros(n, int)]


def test_perfect_separation_gives_a_clearly_positive_bound(tmp_path):
    n = 1000
    p = write_result(tmp_path / "perfect", np.r_[np.ones(n), np.zeros(n)] + np.linspace(0, 0.1, 2 * n), _labels(n))
    (a,) = audit_results([str(p)])
    assert CLI_KEYS <= set(a)
    assert a["epsilon_lower_bound"] > 4.5            # the ceiling for 500 + 500 evaluation records is 4.9
    assert a["epsilon_lower_bound"] == pytest.approx(a["ceiling"], rel=0.01)
    assert "split" in a["threshold_selection"] and "half" in a["threshold_selection"]
    assert a["one_run"]["epsilon_lower_bound"] > 2.0
    assert a["one_run"]["ceiling"] >= a["one_run"]["epsilon_lower_bound"]
    assert a["formal_epsilon"] is None and a["exceeds_formal"] is None
    assert "assumption" in a["clopper_pearson"] and "assumption" in a["one_run"]


def test_random_scores_give_about_zero(tmp_path):
    rng = np.random.default_rng(0)
    n = 1000
    p = write_result(tmp_path / "random", rng.normal(size=2 * n), _labels(n))
    (a,) = audit_results([str(p)])
    assert a["epsilon_lower_bound"] < 0.25
    assert a["one_run"]["epsilon_lower_bound"] < 0.5


def test_a_bound_above_the_claimed_epsilon_is_flagged(tmp_path):
    n = 500
    priv = {"epsilon": 1.0, "delta": 1e-5, "basis": "a claim that is too good"}
    p = write_result(tmp_path / "broken", np.r_[np.ones(n), np.zeros(n)], _labels(n), method="dpdm", privacy=priv)
    (a,) = audit_results([str(p)])
    assert a["formal_epsilon"] == 1.0 and a["delta"] == 1e-5
    assert a["exceeds_formal"] is True
    text = format_audit([a])
    assert "EXCEEDS FORMAL" in text and "FLAG" in text


def test_cli_json_and_bad_input(tmp_path, test_results):
    runner = CliRunner()
    r = runner.invoke(main, ["audit", str(test_results[("pfdm", "pia")]), "--json"])
    assert r.exit_code == 0, r.stderr
    a = json.loads(r.stdout)
    assert CLI_KEYS <= set(a)
    assert a["formal_epsilon"] == pytest.approx(8.77, abs=0.01)
    assert 0.0 <= a["epsilon_lower_bound"] <= a["formal_epsilon"]
    assert a["exceeds_formal"] is False
    ua = a["upload_mechanism"]  # PFDM shared: the upload mechanism itself is audited
    assert ua["epsilon_lower_bound"] <= ua["analytic_epsilon"] and ua["gdp"]["epsilon"] <= ua["analytic_epsilon"]
    r = runner.invoke(main, ["audit", str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and "missing.json" in r.stderr
    mem = write_result(tmp_path / "mem", np.zeros(8), np.zeros(8), attack="memorization", kind="memorization")
    r = runner.invoke(main, ["audit", str(mem)])
    assert r.exit_code == 2 and "no membership scores" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    nosc = write_result(tmp_path / "noscores", np.zeros(8), _labels(4))
    (tmp_path / "noscores" / "scores.npz").unlink()
    r = runner.invoke(main, ["audit", str(nosc)])
    assert r.exit_code == 2 and "scores" in r.stderr
    r = runner.invoke(main, ["audit", str(test_results[("pfdm", "pia")]), "--confidence", "1.5"])
    assert r.exit_code == 2 and "--confidence" in r.stderr


def test_directories_skip_non_membership_results(tmp_path):
    write_result(tmp_path / "a", np.r_[np.ones(50), np.zeros(50)], _labels(50))
    write_result(tmp_path / "b", np.zeros(8), np.zeros(8), attack="memorization", kind="memorization")
    res = audit_results([str(tmp_path)])
    assert len(res) == 1 and res[0]["attack"] == "pia"
    with pytest.raises(BadInput):
        audit_results([str(tmp_path / "b")])


@pytest.mark.slow
def test_overfit_centralized_gives_a_clearly_positive_bound(overfit_centralized, runs_dir):
    """Issue 6: audit on the overfit centralized target (issue 3's fixture) gives a clearly positive bound."""
    from privbench.runs.attack import run_attack

    res = run_attack(overfit_centralized.cfg, "pia", None, runs_dir=runs_dir, device="cpu")
    (a,) = audit_results([res["scores_path"].replace("scores.npz", "result.json")])
    assert a["epsilon_lower_bound"] > 1.0, a          # measured 2.49 (ceiling 2.82) with PIA AUC 0.96


def test_a_rerun_with_the_same_settings_replaces_the_stale_result(tmp_path):
    """Same attack settings under a new attack hash (e.g. after a records-version bump): the newest result is the
    one audited and reported, not both; other settings stay separate rows."""
    import json
    import os

    from privbench.reports.collect import load_results
    from report_fakes import write_result

    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(50), np.zeros(50)]
    (tmp_path / "config.yaml").write_text("method: fake\n")  # tmp_path is the run directory
    paths = {}
    for name, cfg in (("pia-model-old", {"t": 200}), ("pia-model-new", {"t": 200}), ("pia-model-t100", {"t": 100})):
        p = write_result(tmp_path / "attacks" / name, rng.normal(size=100), labels)
        d = json.loads(p.read_text())
        d.update(attack_hash=name, attack_config=cfg)
        p.write_text(json.dumps(d))
        paths[name] = p
    os.utime(paths["pia-model-old"], (1e9, 1e9))  # older
    res = load_results([tmp_path])
    assert sorted(r.path.parent.name for r in res) == ["pia-model-new", "pia-model-t100"]
