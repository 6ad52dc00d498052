"""One notion of a privacy claim (formal / conditional / claimed by the
paper / claimed by the user). A claimed ε never sits in a formal column, never passes a ``privacy.epsilon`` gate,
is compared with the empirical bounds as a claim, and the audit states one basis per run."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from report_fakes import write_result

from privbench.cli import main
from privbench.core.errors import BadInput
from privbench.privacy.claims import PrivacyClaim, claim_of, formal_epsilon, user_claim
from privbench.reports.audit import audit_results, format_audit
from privbench.reports.collect import load_results
from privbench.reports.tables import Tables

PAPER_BASIS = "as claimed by the paper (output-gradient sanitization; not a sound DP guarantee)"
#: DP-SAD paper mode as privbench writes it, and a paper claim with its number in epsilon
PAPER_NEW = {"epsilon": None, "claimed_epsilon": 3.0, "claim_kind": "claimed_by_paper", "claimed_by_paper": True,
             "delta": 1e-5, "basis": PAPER_BASIS, "end_to_end": False}
PAPER_OLD = {"epsilon": 3.0, "claimed_by_paper": True, "delta": 1e-5, "basis": PAPER_BASIS, "end_to_end": False}


def _labels(n):
    return np.r_[np.ones(n, int), np.zeros(n, int)]


def _chance(folder, privacy, method="dpsad", target="student", n=64):
    y = _labels(n)
    return write_result(folder, np.random.default_rng(0).normal(size=2 * n), y, method=method, target=target,
                        privacy=privacy)


def _perfect(folder, privacy, method="dpsad", target="student", n=500):
    return write_result(folder, np.r_[np.ones(n), np.zeros(n)] + np.linspace(0, 0.1, 2 * n), _labels(n),
                        method=method, target=target, privacy=privacy)


def check(*args):
    r = CliRunner().invoke(main, ["check", *map(str, args)])
    return r.exit_code, r.stdout, r.stderr


def _first_row(text: str) -> str:
    """The first result row of the audit's table (after the headline lines, the header and its rule)."""
    lines = text.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("target ")) + 2]


@pytest.mark.parametrize("privacy", [PAPER_NEW, PAPER_OLD], ids=["new", "old-format"])
def test_a_paper_claim_is_never_a_formal_epsilon(tmp_path, privacy):
    p = _chance(tmp_path / "run", privacy)
    typed = PrivacyClaim.from_json(privacy)
    assert claim_of(typed)["kind"] == "claimed_by_paper" and formal_epsilon(typed) is None
    # the gate: no formal ε is ε = ∞, and the breach says why
    g = tmp_path / "g.yaml"
    g.write_text("gates:\n  - {method: dpsad, target: student, attack: pia, metric: privacy.epsilon, max: 10}\n")
    code, out, err = check("--gates", g, p)
    assert code == 1, (out, err)
    (breach,) = [line for line in err.splitlines() if line.startswith("BREACH:")]
    assert "privacy.epsilon = inf" in breach and "claimed by the paper" in breach
    # the audit: compared as a claim, never called consistent
    (a,) = audit_results([str(p)])
    assert a["formal_epsilon"] is None and a["exceeds_formal"] is None
    assert a["claimed_epsilon"] == 3.0 and a["exceeds_claim"] is False and a["claim"]["kind"] == "claimed_by_paper"
    row = _first_row(format_audit([a]))
    assert "3.000*" in row and "not refuted (paper's claim)" in row and " ok" not in row
    # the tables: no formal ε; the claim in its own column with its kind
    t = Tables.build(load_results([p]))
    sbs = t.side_by_side_frame()
    assert pd.isna(sbs.loc[0, "formal_epsilon"]) and sbs.loc[0, "claimed_epsilon"] == 3.0
    assert sbs.loc[0, "claim_kind"] == "claimed_by_paper"
    audit = t.audit_frame()
    assert pd.isna(audit.loc[0, "formal_epsilon"]) and audit.loc[0, "exceeds_claim"] == False  # noqa: E712
    acc = t.accountant_frame()
    assert pd.isna(acc.loc[0, "epsilon"]) and acc.loc[0, "claimed_epsilon"] == 3.0


def test_a_paper_claim_below_the_bound_is_flagged_as_a_claim(tmp_path):
    p = _perfect(tmp_path / "run", dict(PAPER_NEW, claimed_epsilon=1.0))
    (a,) = audit_results([str(p)])
    assert a["exceeds_claim"] is True and a["exceeds_formal"] is None
    text = format_audit([a])
    assert "EXCEEDS CLAIM (paper)" in text and "EXCEEDS FORMAL" not in _first_row(text)
    (b,) = Tables.build(load_results([p])).targets()
    assert b["exceeds_claim"] is True and b["exceeds_formal"] is None


def test_the_audit_states_one_basis_per_run(tmp_path):
    """Two DP-SAD runs of one target: paper mode and the end-to-end sound run. Each row's basis is its own run's
    (the text output used to describe both with one of them)."""
    sound = {"epsilon": 5.0, "delta": 1e-5, "basis": "DP-SGD end to end (public teacher and discriminator)"}
    _chance(tmp_path / "paper-run", PAPER_NEW)
    _chance(tmp_path / "sound-run", sound)
    audits = audit_results([str(tmp_path)])
    assert len(audits) == 2
    text = format_audit(audits)
    # the basis lines (the headline's sentence also names the model: "the training of dpsad/student (...)")
    lines = [line for line in text.splitlines() if " of dpsad/student (" in line and "epsilon >=" not in line]
    assert len(lines) == 2, text
    by_run = {("paper-run" in line): line for line in lines}
    assert PAPER_BASIS in by_run[True] and "paper" in by_run[True].split(" of ")[0]
    assert "end to end" in by_run[False] and by_run[False].startswith("formal epsilon")


def test_user_claims_are_validated():
    assert user_claim(None, None, None) is None
    c = user_claim(2.0, 1e-5, "DP-SGD, add/remove-one, PRV")
    assert c["epsilon"] is None and c["claimed_epsilon"] == 2.0 and claim_of(PrivacyClaim.from_json(c))["kind"] == "claimed_by_user"
    for bad, needle in (((2.0, None, "x"), "go together"), ((-1, 1e-5, "x"), "claimed-epsilon"),
                        ((math.inf, 1e-5, "x"), "claimed-epsilon"), ((1.0, 1.5, "x"), "claimed-delta"),
                        ((1.0, 1e-5, "  "), "claim-basis")):
        with pytest.raises(BadInput, match=needle):
            user_claim(*bad)


def test_claim_options_are_bad_input_before_anything_loads(tmp_path):
    r = CliRunner().invoke(main, ["attack", "--model", str(tmp_path / "nope"), "--members", "m.npz",
                                  "--nonmembers", "n.npz", "--attack", "pia", "--claimed-epsilon", "1",
                                  "--runs-dir", str(tmp_path / "runs")])
    assert r.exit_code == 2 and "go together" in r.stderr and "Traceback" not in r.stderr
    r = CliRunner().invoke(main, ["attack", "--method", "centralized", "--attack", "pia", "--claimed-epsilon", "1",
                                  "--claimed-delta", "1e-5", "--claim-basis", "x", "--runs-dir",
                                  str(tmp_path / "runs")])
    assert r.exit_code == 2 and "need --model" in r.stderr
    assert not (tmp_path / "runs").exists()


def test_a_user_claim_the_bound_exceeds_is_flagged_by_audit_and_check(tmp_path):
    claim = user_claim(0.5, 1e-5, "DP-SGD, replace-one, my accountant")
    p = _perfect(tmp_path / "ext", claim, method="external", target="model")
    (a,) = audit_results([str(p)])
    assert a["exceeds_claim"] is True and a["formal_epsilon"] is None and a["claim"]["kind"] == "claimed_by_user"
    assert any("claimed by the user" in n for n in a["notes"])
    g = tmp_path / "g.yaml"
    g.write_text("gates:\n  - {method: external, target: model, attack: pia, metric: audit.exceeds_claim, max: 0}\n")
    code, out, err = check("--gates", g, p)
    assert code == 1, (out, err)
    assert "exceeds the ε claimed by the user" in err
    # without a claim there is nothing the gate could ever breach: bad input
    q = _perfect(tmp_path / "plain", None, method="external", target="model")
    code, out, err = check("--gates", g, q)
    assert code == 2 and "no formal or claimed epsilon" in err
