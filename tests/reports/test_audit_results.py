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
    """audit on the overfit centralized target gives a clearly positive bound."""
    from privbench.runs.attack import run_attack

    res = run_attack(overfit_centralized.cfg, "pia", None, runs_dir=runs_dir, device="cpu").to_json()
    (a,) = audit_results([res["scores_path"].replace("scores.npz", "result.json")])
    assert a["epsilon_lower_bound"] > 1.0, a          # measured 2.49 (ceiling 2.82) with PIA AUC 0.96


def test_a_rerun_with_the_same_settings_replaces_the_stale_result(tmp_path):
    """Same attack settings under a new attack hash (e.g. after a records-version bump): the newest result is the
    one audited and reported, not both; other settings stay separate rows."""
    import json
    import os

    from report_fakes import write_result

    from privbench.reports.collect import load_results

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


# ------------------------------------------------------------------ family-wise flag, neighbouring relation

def _perfect(n=200):
    """Perfectly separated scores: the bounds at 95 % / 97.5 % / 98.75 % are CP 3.28 / 3.11 / 2.96 and
    one-run 4.28 / 4.13 / 3.97 (n = 200 + 200)."""
    return np.r_[np.ones(n), np.zeros(n)] + np.linspace(0, 0.1, 2 * n), _labels(n)


def _on_one_target(tmp_path, privacy, attacks=("pia",)):
    """Results of ``attacks`` on one target of one run directory (tmp_path), all with perfectly separated scores."""
    s, y = _perfect()
    paths = []
    for att in attacks:
        p = write_result(tmp_path / "attacks" / att, s, y, method="dpdm", attack=att, privacy=privacy)
        d = json.loads(p.read_text())
        d["run_dir"] = str(tmp_path)
        p.write_text(json.dumps(d))
        paths.append(p)
    return paths


REPLACE_ONE_CLAIM = {"epsilon": 4.1, "delta": 1e-5, "basis": "a replace-one claim (test)"}


def test_flag_is_family_wise_over_bounds_and_attacks(tmp_path):
    """Two attacks × two bounds = 4 bounds in the target's flag: each at 1 − 0.05/4. A claim of 4.1 lies below
    the one-run bound at 95 % (4.28: the old, uncorrected flag fired) and above every bound at 98.75 % (3.97)."""
    from privbench.reports.collect import load_results
    from privbench.reports.tables import Tables

    _on_one_target(tmp_path, REPLACE_ONE_CLAIM, attacks=("pia", "loss"))
    audits = audit_results([str(tmp_path)])
    assert len(audits) == 2
    for a in audits:
        assert a["one_run"]["epsilon_lower_bound"] > 4.1                 # per-bound numbers stay at 95 %
        assert a["exceeds_formal"] is False
        assert a["flag_confidence"] == 0.95
        assert a["flag_family"]["size"] == 4 and a["flag_family"]["bound_confidence"] == pytest.approx(0.9875)
        assert max(a["flag_bounds"].values()) < 4.1
        assert a["exceeds_formal"] is False
        assert a["neighbouring_relation"]["factor"] == 1.0
    text = format_audit(audits)
    assert "family-wise confidence 0.95" in text and "EXCEEDS FORMAL" not in text.split("\n\n")[0]
    # the report's tables: the same family per target (2 attacks × 2 bounds)
    t = Tables.build(load_results([tmp_path]))
    (b,) = t.targets()
    assert b["exceeds_formal"] is False
    af = t.audit_frame()
    assert list(af["exceeds_formal"]) == [False, False]
    assert list(af["flag_bound_confidence"]) == pytest.approx([0.9875, 0.9875])
    assert list(af["flag_family_size"]) == [4, 4]
    # one attack alone: 2 bounds at 97.5 % → one-run 4.13 > 4.1, flagged
    (solo,) = audit_results([str(tmp_path / "attacks" / "pia" / "result.json")])
    assert solo["flag_family"]["size"] == 2 and solo["exceeds_formal"] is True
    assert "FLAG" in format_audit([solo])


def test_add_remove_claim_is_compared_in_the_replace_one_game(tmp_path):
    """A DP-SGD (add/remove) ε of 2.5 against the fixed-size membership game (replace-one): by group privacy the
    claim is (5.0, (1+e^2.5)·1e-5) there; the bounds (≤ 4.3) do not contradict it. The same number stated as
    replace-one is contradicted."""
    from privbench.privacy.dpsgd import dpsgd_basis
    from privbench.reports.collect import load_results
    from privbench.reports.tables import Tables

    claim = {"epsilon": 2.5, "delta": 1e-5, "basis": dpsgd_basis("prv", 1e-5)}
    _on_one_target(tmp_path / "ar", claim)
    (a,) = audit_results([str(tmp_path / "ar")])
    assert a["exceeds_formal"] is False
    nr = a["neighbouring_relation"]
    assert nr["formal"] == "add/remove-one" and nr["empirical"] == "replace-one" and nr["factor"] == 2.0
    assert nr["comparable_epsilon"] == pytest.approx(5.0)
    assert nr["comparable_delta"] == pytest.approx((1 + np.exp(2.5)) * 1e-5)
    assert a["flag_family"]["delta"] == pytest.approx(nr["comparable_delta"])
    assert 2.5 < max(a["flag_bounds"].values()) < 5.0
    assert a["exceeds_formal"] is False
    text = format_audit([a])
    assert "neighbouring relation: formal add/remove-one; membership game replace-one" in text
    assert "group privacy" in text
    (b,) = Tables.build(load_results([tmp_path / "ar"])).targets()
    assert b["exceeds_formal"] is False and b["comparable_epsilon"] == pytest.approx(5.0)

    ro = dict(claim, basis="analytic-gaussian LDP per record, per single upload (replace-one, Δ=2C)")
    _on_one_target(tmp_path / "ro", ro)
    (a,) = audit_results([str(tmp_path / "ro")])
    assert a["neighbouring_relation"]["factor"] == 1.0 and a["neighbouring_relation"]["comparable_epsilon"] == 2.5
    assert a["exceeds_formal"] is True


def test_an_add_remove_claim_beyond_group_privacy_is_not_testable(tmp_path):
    claim = {"epsilon": 12.0, "delta": 1e-5, "basis": "DP-SGD, add/remove-one record"}  # (1+e^12)·1e-5 > 1
    _on_one_target(tmp_path, claim)
    (a,) = audit_results([str(tmp_path)])
    assert a["exceeds_formal"] is False
    assert a["neighbouring_relation"]["testable"] is False
    assert any("not testable" in n for n in a["notes"])


def test_pfdm_shared_audit_states_relation_and_family(test_results):
    (a,) = audit_results([str(test_results[("pfdm", "pia")])])
    nr = a["neighbouring_relation"]
    assert nr["formal"] == nr["empirical"] == "replace-one" and nr["comparable_epsilon"] == a["formal_epsilon"]
    # 2 membership bounds + the upload mechanism's Clopper-Pearson and GDP
    assert a["flag_family"]["size"] == 4
    ua = a["upload_mechanism"]
    assert ua["flag_bound_confidence"] == pytest.approx(a["flag_family"]["bound_confidence"])
    assert ua["neighbouring_relation"]["factor"] == 1.0
    assert set(ua["flag_bounds"]) == {"clopper_pearson", "gdp"}
