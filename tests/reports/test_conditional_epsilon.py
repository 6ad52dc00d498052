"""A conditional ε (DP-SAD with a teacher trained on the members) is shown in its own column, never
as the formal ε, and no flag compares with it; seeded privacy noise is labelled in the tables and the HTML."""
from __future__ import annotations

import numpy as np
import pandas as pd
from report_fakes import write_result

from privbench.core.mechanisms import SEEDED_NOISE_LABEL
from privbench.reports import render_report
from privbench.reports.audit import audit_results, format_audit

CONDITIONAL = {"epsilon": None, "delta": 1e-5, "basis": "none: no formal guarantee (a test)",
               "conditional_epsilon": 0.5, "conditional_on": ["teacher", "discriminator"],
               "conditional_basis": "DP-SGD, conditional (a test)", "noise_source": "seeded",
               "noise_label": SEEDED_NOISE_LABEL}
FORMAL = {"epsilon": 0.5, "delta": 1e-5, "basis": "a formal claim (a test)", "noise_source": "secure"}


def _leaky(folder, privacy, method):
    n = 500  # perfectly separated scores: an empirical bound far above 0.5
    return write_result(folder, np.r_[np.ones(n), np.zeros(n)] + np.linspace(0, 0.1, 2 * n),
                        np.r_[np.ones(n, int), np.zeros(n, int)], method=method, target="student", privacy=privacy)


def test_conditional_epsilon_has_its_own_column_and_no_flag(tmp_path):
    _leaky(tmp_path / "runs" / "cond" / "attacks" / "pia", CONDITIONAL, "dpsad")
    _leaky(tmp_path / "runs" / "formal" / "attacks" / "pia", FORMAL, "dpdm")
    render_report(tmp_path / "runs", tmp_path / "rep", ["csv", "html"])
    sbs = pd.read_csv(tmp_path / "rep" / "side_by_side.csv").set_index("method")
    cond, formal = sbs.loc["dpsad"], sbs.loc["dpdm"]
    assert pd.isna(cond["formal_epsilon"]) and cond["conditional_epsilon"] == 0.5
    assert cond["conditional_on"] == "teacher, discriminator"
    assert cond["eps_lb_cp"] > 2 and pd.isna(cond["eps_lb_exceeds_formal"])  # no claim: no flag
    assert formal["formal_epsilon"] == 0.5 and pd.isna(formal["conditional_epsilon"])
    assert bool(formal["eps_lb_exceeds_formal"]) is True  # the same bound against a formal ε: flagged
    assert cond["noise_source"] == f"seeded ({SEEDED_NOISE_LABEL})" and formal["noise_source"] == "secure"
    audit = pd.read_csv(tmp_path / "rep" / "audit.csv").set_index("method")
    assert pd.isna(audit.loc["dpsad", "formal_epsilon"]) and audit.loc["dpsad", "conditional_epsilon"] == 0.5
    assert pd.isna(audit.loc["dpsad", "exceeds_formal"]) and bool(audit.loc["dpdm", "exceeds_formal"]) is True
    res = pd.read_csv(tmp_path / "rep" / "results.csv").set_index("method")
    assert pd.isna(res.loc["dpsad", "formal_epsilon"]) and res.loc["dpsad", "conditional_epsilon"] == 0.5
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "conditional ε" in html and "conditional on teacher, discriminator" in html
    assert f"noise: seeded ({SEEDED_NOISE_LABEL})" in html
    flag = html[html.index('<p class="flag">'):html.index("</p>", html.index('<p class="flag">'))]
    assert "dpdm/student" in flag and "dpsad" not in flag  # only the formal claim is flagged


def test_audit_shows_the_conditional_epsilon_without_comparing(tmp_path):
    (a,) = audit_results([str(_leaky(tmp_path / "cond", CONDITIONAL, "dpsad"))])
    assert a["formal_epsilon"] is None and a["exceeds_formal"] is None and a["conditional_epsilon"] == 0.5
    assert any("conditional epsilon 0.5" in n and "not a guarantee" in n for n in a["notes"])
    text = format_audit([a])
    rows = [line for line in text.splitlines() if not line.startswith("Flag (EXCEEDS FORMAL)")]  # not the legend
    assert not any("EXCEEDS FORMAL" in line for line in rows) and "conditional epsilon 0.5000, no guarantee" in text
