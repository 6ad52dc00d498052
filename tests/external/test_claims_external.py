"""An outside model's privacy claim (``--claimed-epsilon/--claimed-delta/--claim-basis`` on
``attack``/``run --model`` and in a suite's ``external:`` entries) is audited like a native target's formal ε and
labelled as the user's claim, never as a formal ε."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from ext_helpers import cli

CLAIM = ["--claimed-epsilon", "0.1", "--claimed-delta", "1e-5", "--claim-basis", "DP-SGD, replace-one, my accountant"]


def test_a_claim_the_lower_bound_exceeds_is_flagged_by_audit_and_check(memorized, tmp_path):
    """The memorizing pipeline (PIA AUC ≈ 1 on 32 + 32 records) with a claimed ε of 0.1: the Clopper–Pearson and
    one-run bounds exceed it; audit says EXCEEDS CLAIM, check's audit.exceeds_claim gate breaches (exit 1), the
    report labels the claim as the user's, and privacy.epsilon still counts as ∞."""
    m = memorized
    runs = tmp_path / "runs"
    code, out, err = cli("attack", "--model", m["pipeline"], "--members", m["members"], "--nonmembers",
                         m["nonmembers"], "--attack", "pia", "--runs-dir", runs, "--device", "cpu", "--json", *CLAIM)
    assert code == 0, err
    res = json.loads(out)
    p = res["privacy"]
    assert p["epsilon"] is None and p["claimed_epsilon"] == 0.1 and p["claim_kind"] == "claimed_by_user"
    assert "my accountant" in p["basis"] and any("user claims" in n for n in res["notes"])
    run_dir = Path(res["run_dir"])

    code, out, err = cli("audit", run_dir, "--json")
    assert code == 0, err
    a = json.loads(out)
    assert a["exceeds_claim"] is True and a["exceeds_formal"] is None and a["formal_epsilon"] is None
    assert a["claim"]["kind"] == "claimed_by_user" and a["neighbouring_relation"]["factor"] == 1.0
    code, out, err = cli("audit", run_dir)
    assert "EXCEEDS CLAIM (user)" in out

    gates = tmp_path / "g.yaml"
    gates.write_text("gates:\n"
                     "  - {method: external, target: pipeline, attack: pia, metric: audit.exceeds_claim, max: 0}\n"
                     "  - {method: external, target: pipeline, attack: pia, metric: privacy.epsilon, max: 10}\n")
    code, out, err = cli("check", "--gates", gates, run_dir)
    assert code == 1, (out, err)
    breaches = [line for line in err.splitlines() if line.startswith("BREACH:")]
    assert len(breaches) == 2
    assert "exceeds the ε claimed by the user" in breaches[0]
    assert "inf (no formal guarantee: ε 0.1 is the ε claimed by the user" in breaches[1]

    code, out, err = cli("report", run_dir, "--out", tmp_path / "rep", "--format", "html,csv")
    assert code == 0, err
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "claimed by the user" in html and "EXCEEDS claimed ε (by user)" in html
    assert ">non-private baseline</span>" not in html

    # without a claim the same model and records are another run, with nothing to compare with
    code, out, err = cli("attack", "--model", m["pipeline"], "--members", m["members"], "--nonmembers",
                         m["nonmembers"], "--attack", "pia", "--runs-dir", runs, "--device", "cpu", "--json")
    plain = json.loads(out)
    assert plain["run_dir"] != res["run_dir"] and plain["privacy"] is None
    assert plain["metrics"] == res["metrics"]


def test_a_suite_external_entry_takes_a_claim_and_checks_it(tmp_path):
    from privbench.bench.suite import external_targets
    from privbench.core.errors import BadInput

    (tmp_path / "m").mkdir()
    for f in ("a.npz", "b.npz"):
        (tmp_path / f).write_bytes(b"")
    suite = tmp_path / "s.yaml"
    base = {"model": "m", "members": "a.npz", "nonmembers": "b.npz"}
    ok = external_targets({"mine": dict(base, claimed_epsilon=2.0, claimed_delta=1e-5, claim_basis="DP-SGD")}, suite)
    assert ok["mine"]["claimed_epsilon"] == 2.0
    with pytest.raises(BadInput, match="external.mine: claimed_epsilon, claimed_delta and claim_basis go together"):
        external_targets({"mine": dict(base, claimed_epsilon=2.0)}, suite)
    with pytest.raises(BadInput, match="claimed_delta"):
        external_targets({"mine": dict(base, claimed_epsilon=2.0, claimed_delta=2, claim_basis="x")}, suite)
