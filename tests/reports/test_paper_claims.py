"""Paper claims (a suite's ``claims:``, bench/paper_claims.py): the verdict rule on hand-made numbers
(reports/claim_rule.py), the suite's validation (one line, exit 2, before anything trains) and the report's
``paper_claims.csv``, ``tex/paper_claims.tex`` and HTML section from a hand-made bench — nothing is trained."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from report_fakes import write_result
from scipy import stats

from privbench.bench.cell_schema import BenchCell
from privbench.bench.paper_claims import check_claims, claims_record, parse_claims
from privbench.cli import main
from privbench.core.errors import BadInput
from privbench.reports import render_report
from privbench.reports.claim_rule import (
    DIRECTION,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    OWN_CI,
    REPRODUCED,
    paired,
    summarize,
    verdict,
)

LOW, HIGH = [0.52, 0.53, 0.51], [0.80, 0.82, 0.81]


# ------------------------------------------------------------------------------------------ the rule

def test_the_interval_over_seeds_is_the_t_interval():
    s = summarize(LOW)
    h = stats.t.ppf(0.975, 2) * np.std(LOW, ddof=1) / np.sqrt(3)
    assert s.n_seeds == 3 and s.mean == pytest.approx(0.52)
    assert (s.lo, s.hi) == pytest.approx((0.52 - h, 0.52 + h))
    one = summarize([0.5], [0.45, 0.56])
    assert (one.lo, one.hi, one.basis) == (0.45, 0.56, OWN_CI)  # one seed: the result's own bootstrap CI
    assert summarize([0.5, None, float("nan")], [0.4, 0.6]).basis == OWN_CI  # unresolvable values are dropped


def test_reproduced_needs_direction_separation_and_the_papers_magnitude():
    v = verdict(summarize(LOW), summarize(HIGH), "lower", paper_subject=0.55, paper_baseline=0.82)
    assert v.verdict == REPRODUCED, v.reason
    assert v.gap == pytest.approx((0.52 - 0.81) / 0.81) and v.paper_gap == pytest.approx((0.55 - 0.82) / 0.82)
    # higher is better: the same numbers, sides swapped
    v = verdict(summarize(HIGH), summarize(LOW), "higher", paper_subject=0.82, paper_baseline=0.55)
    assert v.verdict == REPRODUCED, v.reason


@pytest.mark.parametrize("paper", [(0.80, 0.82), (0.10, 0.82), (None, 0.82), (None, None)])
def test_direction_reproduced_when_the_magnitude_is_off_or_not_given(paper):
    v = verdict(summarize(LOW), summarize(HIGH), "lower", *paper)
    assert v.verdict == DIRECTION, v.reason
    assert ("outside a factor 2" in v.reason) == (paper[0] is not None)


def test_not_reproduced_when_the_baseline_wins_with_intervals_apart():
    v = verdict(summarize(HIGH), summarize(LOW), "lower", paper_subject=0.55, paper_baseline=0.82)
    assert v.verdict == NOT_REPRODUCED, v.reason


@pytest.mark.parametrize("subject,baseline,needle", [
    (summarize([0.5, 0.9, 0.2]), summarize(HIGH), "overlap"),                     # wide over seeds
    (summarize([0.5]), summarize(HIGH), "subject: one seed and no CI of its own"),
    (summarize(LOW), summarize([], why="0 of 3 cells finished"), "baseline: missing (0 of 3 cells finished)"),
    (summarize([0.5], [0.4, 0.79]), summarize([0.8], [0.79, 0.9]), "overlap"),      # touching counts as overlap
])
def test_inconclusive_says_why(subject, baseline, needle):
    v = verdict(subject, baseline, "lower", 0.55, 0.82)
    assert v.verdict == INCONCLUSIVE and needle in v.reason, v.reason


def test_a_claim_whose_interval_overlaps_the_baseline_is_never_reproduced():
    """The means are in the paper's direction with exactly the paper's relative gap: overlap still wins."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        spread = rng.uniform(0.05, 0.5)
        subject = summarize([0.4 - spread, 0.4, 0.4 + spread])
        baseline = summarize([0.5 - spread, 0.5, 0.5 + spread])
        if subject.hi < baseline.lo:
            continue
        v = verdict(subject, baseline, "lower", paper_subject=0.4, paper_baseline=0.5)
        assert v.verdict == INCONCLUSIVE and v.verdict != REPRODUCED


def test_the_paired_difference_uses_shared_seeds_and_never_decides():
    """Sides that overlap as marginals but move together seed by seed: the paired interval excludes 0, the
    verdict stays inconclusive (the rule compares the sides' own intervals)."""
    subject, baseline = {0: 10.0, 1: 20.0, 2: 30.0, 7: 1.0}, {0: 11.0, 1: 21.2, 2: 30.9, 5: 99.0}
    p = paired(subject, baseline)
    diffs = [-1.0, -1.2, -0.9]
    h = stats.t.ppf(0.975, 2) * np.std(diffs, ddof=1) / np.sqrt(3)
    assert p.n_seeds == 3 and p.mean == pytest.approx(np.mean(diffs)) and p.hi == pytest.approx(np.mean(diffs) + h)
    assert p.hi < 0 and "excludes 0 in the claim's direction" in p.text("lower")
    assert "excludes 0 against the claim" in p.text("higher")
    v = verdict(summarize(list(subject.values())[:3]), summarize(list(baseline.values())[:3]), "lower")
    assert v.verdict == INCONCLUSIVE
    assert paired({0: 1.0, 1: float("nan")}, {0: 2.0, 1: 3.0}) is None  # one finite shared seed: no interval
    assert "includes 0" in paired({0: 1.0, 1: 3.0}, {0: 2.0, 1: 2.0}).text("lower")


# ------------------------------------------------------------------------------------------ the suite key

def _claim(**kw):
    base = {"id": "leak", "source": "PFDM Table 1", "text": "the shared model leaks less", "metric": "auc",
            "better": "lower", "subject": {"method": "pfdm", "target": "shared", "attack": "pia"},
            "baseline": {"method": "centralized", "target": "model", "attack": "pia"},
            "paper": {"subject": 0.55, "baseline": 0.82}, "scale": "CIFAR-10, 25k members"}
    return {k: v for k, v in {**base, **kw}.items() if v is not None}


@pytest.mark.parametrize("claims,needle", [
    ({"leak": {}}, "expected a list of claims"),
    ([_claim(colour="red")], "claims[0]: unknown key(s) colour"),
    ([_claim(metric="mmd")], "claims.leak.metric: 'mmd'; choose auc"),
    ([_claim(metric="kid", subject={"method": "pfdm", "classes": "overall"}, baseline={"method": "centralized"})],
     "classes: 'overall'; choose majority"),
    ([_claim(better="smaller")], "claims.leak.better"),
    ([_claim(source=None)], "missing key(s) source"),
    ([_claim(id="a b")], "is not an id"),
    ([_claim(), _claim()], "claim id(s) leak given twice"),
    ([_claim(subject={"target": "shared", "attack": "pia"})], "claims.leak.subject: 'method'"),
    ([_claim(subject={"method": "pfdm"})], "name the attack"),
    ([_claim(subject={"method": "pfdm", "attack": "pia", "client": 0})], "unknown key(s) client"),
    ([_claim(subject={"method": "pfdm", "attack": "pia", "epsilon": -1})], "not a finite epsilon"),
    ([_claim(subject={"method": "pfdm", "attack": "pia", "classes": "minority"})], "only a fid / kid claim"),
    ([_claim(metric="fid", subject={"method": "pfdm", "classes": "rare"}, baseline={"method": "centralized"})],
     "classes: 'rare'"),
    ([_claim(metric="fid", subject={"method": "pfdm", "attack": "pia"}, baseline={"method": "centralized"})],
     "not an attack's"),
    ([_claim(paper={"subject": "55%"})], "paper.subject: expected a finite number"),
    ([_claim(paper={"subject": 0.9, "baseline": 0.82})], "subject 0.9 is not lower than baseline 0.82"),
])
def test_bad_claims_are_one_line_errors(claims, needle):
    with pytest.raises(BadInput) as e:
        parse_claims(claims)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_the_example_in_the_docs_parses():
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    block = text[text.index("```yaml\nclaims:"):]
    block = block[len("```yaml\n"):block.index("```", 3)]
    claims = parse_claims(yaml.safe_load(block)["claims"])
    assert [c.id for c in claims] == ["pfdm-leaks-less", "dpsad-fid"] and claims[1].subject.classes == "overall"


def _cell(method, target, attack, seed=0, epsilon=None, kind="attack"):
    return BenchCell(kind, method, "digits", seed, target, attack=attack, epsilon=epsilon,
                     id=f"{kind}|{method}|{target}|{attack}|{seed}|{epsilon}")


def test_each_side_selects_one_row_of_the_grid():
    cells = [_cell("pfdm", t, "pia", s) for t in ("shared", "client:0") for s in (0, 1)] + \
            [_cell("centralized", "model", "pia", s) for s in (0, 1)]
    check_claims(parse_claims([_claim()]), cells)
    with pytest.raises(BadInput, match=r"several targets \(client:0, shared\); name one with 'target:'"):
        check_claims(parse_claims([_claim(subject={"method": "pfdm", "attack": "pia"})]), cells)
    with pytest.raises(BadInput, match=r"selects no attack cell .*its attack cells: centralized/model pia"):
        check_claims(parse_claims([_claim(subject={"method": "pfdm", "target": "shared", "attack": "loss"})]), cells)
    with pytest.raises(BadInput, match="subject and baseline select the same cells"):
        check_claims(parse_claims([_claim(baseline=_claim()["subject"])]), cells)
    eps = [_cell("dpdm", "model", "pia", 0, e) for e in (1.0, 10.0)] + [_cell("centralized", "model", "pia")]
    one = _claim(subject={"method": "dpdm", "attack": "pia"})
    with pytest.raises(BadInput, match="several epsilons"):
        check_claims(parse_claims([one]), eps)
    check_claims(parse_claims([_claim(subject={"method": "dpdm", "attack": "pia", "epsilon": 10})]), eps)


SUITE = """
name: t
preset: test
device: cpu
datasets: [digits]
seeds: [0]
fid: false
samples: false
methods:
  pfdm: {targets: [shared], attacks: [pia]}
  centralized: {targets: [model], attacks: [pia]}
"""


@pytest.mark.parametrize("claim,needle", [
    (_claim(colour="red"), "unknown key(s) colour"),
    (_claim(subject={"method": "pfdm", "target": "client:0", "attack": "pia"}), "selects no attack cell"),
])
def test_bad_claims_in_a_suite_exit_2_before_running(tmp_path, claim, needle):
    suite = tmp_path / "t.yaml"
    suite.write_text(SUITE + "claims:\n  - " + json.dumps(claim) + "\n")
    r = CliRunner().invoke(main, ["bench", "--suite", str(suite), "--runs-dir", str(tmp_path / "runs")])
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert needle in r.stderr and str(suite) in r.stderr
    assert not (tmp_path / "runs").exists()


def test_the_bench_records_its_claims_in_bench_json(tmp_path, monkeypatch):
    """bench.json carries the claims (versioned), so a report needs no suite file; planned, nothing run."""
    import privbench.bench.runner as runner

    monkeypatch.setattr(runner, "_run_here", lambda *a, **k: None)
    suite = tmp_path / "t.yaml"
    suite.write_text(SUITE + "claims:\n  - " + json.dumps(_claim()) + "\n")
    runner.run_suite(str(suite), out=str(tmp_path / "bench"), runs_dir=str(tmp_path / "runs"), device="cpu")
    bench = json.loads((tmp_path / "bench" / "bench.json").read_text())
    assert bench["paper_claims"] == {"schema_version": 1, "claims": [_claim()]}


# ------------------------------------------------------------------------------------------ the report

CLAIMS = [
    _claim(subject={"method": "subj", "attack": "loss"}, baseline={"method": "base", "attack": "loss"}),
    _claim(id="tpr", metric="tpr_at_1pct_fpr", paper=None, subject={"method": "subj", "attack": "loss"},
           baseline={"method": "base", "attack": "loss"}),
    _claim(id="fid-minority", source="PFDM Table 1", text="the minority classes look better", metric="fid",
           subject={"method": "subj", "classes": "minority"}, baseline={"method": "base", "classes": "minority"},
           paper={"subject": 75.0, "baseline": 80.0}, scale="FID on 5k generated images"),
    _claim(id="acc", metric="downstream_accuracy", better="higher", paper=None, scale=None,
           subject={"method": "subj"}, baseline={"method": "base"}),
]


def _bench(tmp_path, claims=CLAIMS, *, seeds=3):
    """A bench directory: two methods × ``seeds`` seeds, a loss attack (60 members / 60 non-members: TPR@1% not
    resolvable), a FID and a utility cell each."""
    labels = np.r_[np.ones(60), np.zeros(60)]
    cells = []
    for method, aucs, fid in (("subj", LOW, 30.0), ("base", HIGH, 90.0)):
        for seed, auc in enumerate(aucs[:seeds]):
            rd = tmp_path / "runs" / f"{method}-{seed}"
            path = write_result(rd, labels + np.linspace(0, 1, 120), labels, method=method, attack="loss", seed=seed,
                                metrics={"auc": auc, "ci95": {"auc": [auc - 0.05, auc + 0.05]}})
            fid_path = rd / "fid" / "fid-model.json"
            fid_path.parent.mkdir()
            fid_path.write_text(json.dumps({"target": "model", "minority": fid + seed, "majority": fid / 2,
                                            "overall": fid, "n_generated": {"majority": 60, "minority": 40},
                                            "n_real": {"majority": 150, "minority": 15},
                                            "minority_kid": fid / 1000 + seed / 1e4,
                                            "heldout": {"minority": 2 * fid + seed, "n_real": {"minority": 25}}}))
            util_path = rd / "utility.json"
            acc = 0.9 if method == "subj" else 0.5
            util_path.write_text(json.dumps({"downstream": {"accuracy": acc + seed / 100, "ci": [acc - 0.1, acc],
                                                            "n_test": 300}, "n_samples": 500}))
            common = {"status": "done", "method": method, "target": "model", "dataset": "digits", "seed": seed,
                      "role": "baseline", "run_dir": str(rd)}
            cells += [{**common, "kind": "attack", "attack": "loss", "result_path": str(path)},
                      {**common, "kind": "fid", "result_path": str(fid_path)},
                      {**common, "kind": "utility", "result_path": str(util_path)}]
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "bench.json").write_text(json.dumps({"suite": "claims", "cells": cells,
                                                  "paper_claims": claims_record(parse_claims(claims))}))
    return bench


def test_the_report_writes_the_claims_table_csv_latex_and_html(tmp_path):
    out = tmp_path / "out"
    written = render_report(_bench(tmp_path), out, ["csv", "latex", "html"])
    assert out / "paper_claims.csv" in written and out / "tex" / "paper_claims.tex" in written
    df = pd.read_csv(out / "paper_claims.csv").set_index("id")
    leak = df.loc["leak"]
    assert leak["verdict"] == REPRODUCED and leak["subject_n_seeds"] == 3 and leak["baseline_n_seeds"] == 3
    assert leak["subject_mean"] == pytest.approx(0.52) and leak["subject_ci_lo"] < 0.52 < leak["subject_ci_hi"]
    assert leak["subject_n"] == "60 members / 60 non-members" and leak["scale"] == "CIFAR-10, 25k members"
    assert leak["paper_subject"] == 0.55 and leak["subject"] == "subj loss"
    tpr = df.loc["tpr"]
    assert tpr["verdict"] == INCONCLUSIVE and "not resolvable with 60 non-members" in tpr["reason"]
    fid = df.loc["fid-minority"]
    assert fid["verdict"] == DIRECTION and fid["subject_mean"] == pytest.approx(31.0)  # -65.9 % vs the paper's -6.25 %
    assert fid["subject_n"] == "40 generated / 15 real"
    acc = df.loc["acc"]
    assert acc["verdict"] == DIRECTION and acc["subject_n"] == "300 test records" and pd.isna(acc["scale"])
    assert set(df.columns) >= {"source", "claim", "metric", "paper_baseline", "baseline_mean", "baseline_ci_hi",
                               "baseline_n", "relative_gap", "paper_relative_gap", "reason"}
    assert leak["paired_n_seeds"] == 3 and leak["paired_diff_ci_hi"] < 0 and leak["paired"].startswith("paired over 3")

    tex = (out / "tex" / "paper_claims.tex").read_text()
    assert r"\label{tab:privbench-paper-claims}" in tex and r"\toprule" in tex and r"\bottomrule" in tex
    assert "factor 2" in tex and "t-interval" in tex and tex.count(r"\\") == 5  # header + four claims
    assert tex.count(r"\begin{") == tex.count(r"\end{") and "_" not in tex.replace(r"\_", "") and "?" not in tex
    html = (out / "index.html").read_text()
    assert html.index('id="paper-claims"') < html.index('id="table"') and 'href="#paper-claims"' in html
    assert "inconclusive at this n" in html and "factor 2" in html


def test_one_seed_uses_the_results_own_ci_and_a_bench_without_claims_has_no_table(tmp_path):
    out = tmp_path / "out"
    render_report(_bench(tmp_path, seeds=1), out, ["csv"])
    df = pd.read_csv(out / "paper_claims.csv").set_index("id")
    assert df.loc["leak", "subject_ci_basis"] == OWN_CI and df.loc["leak", "subject_ci_lo"] == pytest.approx(0.47)
    assert df.loc["fid-minority", "verdict"] == INCONCLUSIVE  # a FID has no CI of its own
    assert "one seed and no CI" in df.loc["fid-minority", "reason"]
    bench = _bench(tmp_path / "none", claims=[])
    data = json.loads((bench / "bench.json").read_text())
    data.pop("paper_claims")
    (bench / "bench.json").write_text(json.dumps(data))
    render_report(bench, tmp_path / "out2", ["csv"])
    assert not (tmp_path / "out2" / "paper_claims.csv").exists()


def test_every_claim_metric_is_read_and_labelled():
    from privbench.bench.paper_claims import METRICS
    from privbench.reports.paper_claims import SHORT, UTILITY_FIELDS

    assert set(SHORT) == set(METRICS)
    assert set(UTILITY_FIELDS) == {m for m, kind in METRICS.items() if kind == "utility"}
    assert set(METRICS.values()) == {"attack", "fid", "utility"}  # the kinds reports/paper_claims.py reads


def test_kid_and_held_out_claims_read_their_part_of_the_fid_record(tmp_path):
    """``metric: kid`` reads the group's KID, ``fid_heldout`` the same samples against held-out records (with
    their own real-image count); a record without them says which suite key computes them."""
    side = {"classes": "minority"}
    claims = [_claim(id="kid", metric="kid", paper=None, subject={"method": "subj", **side},
                     baseline={"method": "base", **side}),
              _claim(id="held", metric="fid_heldout", paper=None, subject={"method": "subj", **side},
                     baseline={"method": "base", **side}),
              _claim(id="heldkid", metric="kid_heldout", paper=None, subject={"method": "subj", **side},
                     baseline={"method": "base", **side})]
    out = tmp_path / "out"
    render_report(_bench(tmp_path, claims=claims), out, ["csv"])
    df = pd.read_csv(out / "paper_claims.csv").set_index("id")
    assert df.loc["kid", "subject_mean"] == pytest.approx(0.0301) and df.loc["kid", "baseline_mean"] == pytest.approx(0.0901)
    assert df.loc["kid", "verdict"] == DIRECTION
    assert df.loc["held", "subject_mean"] == pytest.approx(61.0) and df.loc["held", "subject_n"] == "40 generated / 25 real"
    assert df.loc["heldkid", "verdict"] == INCONCLUSIVE and "heldout: true" in df.loc["heldkid", "reason"]
    fid = pd.read_csv(out / "fid.csv")
    assert {"minority_kid", "heldout_minority"} <= set(fid.columns)


def test_the_fid_cell_hash_changes_only_when_kid_or_heldout_is_asked_for():
    """A suite without the new keys keeps its FID records' paths (their cache); asking for KID or held-out FID
    computes a new record."""
    from types import SimpleNamespace

    from privbench.bench.plan import fid_settings_hash
    from privbench.bench.suite import fid_settings

    c = SimpleNamespace(target="model", seed=0, cfg=SimpleNamespace(sample=SimpleNamespace(
        sampler="ddim", ddim_steps=50, batch_size=256)))
    base = fid_settings({"fid": {"n_per_class": 50}})
    assert fid_settings_hash(c, base) == fid_settings_hash(c, {**base, "kid": False, "heldout": False})
    assert len({fid_settings_hash(c, {**base, "kid": k, "heldout": h}) for k in (0, 1) for h in (0, 1)}) == 4
    with pytest.raises(BadInput, match="fid.kid: expected true or false"):
        fid_settings({"fid": {"kid": "yes"}})


def test_a_newer_claims_record_is_refused_in_one_line(tmp_path):
    bench = _bench(tmp_path)
    data = json.loads((bench / "bench.json").read_text())
    data["paper_claims"]["schema_version"] = 99
    (bench / "bench.json").write_text(json.dumps(data))
    r = CliRunner().invoke(main, ["report", str(bench), "--out", str(tmp_path / "out"), "--format", "csv"])
    assert r.exit_code == 2 and "schema_version 99 is not one privbench" in r.stderr, r.stderr


def test_an_interval_over_seeds_stays_inside_the_metrics_range():
    """Three AUCs 0.6 / 0.99 / 0.85: the t-interval's upper end would pass 1; the claim's interval stops at 1."""
    from privbench.reports.claim_rule import summarize

    wide = summarize([0.6, 0.99, 0.85])
    s = summarize([0.6, 0.99, 0.85], bounds=(0.0, 1.0))
    assert wide.hi > 1 and s.hi == 1.0 and s.lo == wide.lo and s.mean == wide.mean


def test_a_kid_is_printed_to_four_significant_digits():
    from privbench.reports.paper_claims import _decimals

    assert _decimals("kid", 0.01234) == 5 and _decimals("kid_heldout", 127604.2) == 0 and _decimals("fid", 1526.4) == 1


def test_a_row_without_attacks_has_its_fids_in_the_fid_table(tmp_path):
    """A suite row that trains for its FID only (``attacks: []``, e.g. seeds-mnist's two-client rows) has no
    attack result to lead the report to its run: its FID cells do, under the row's name."""
    bench = _bench(tmp_path)
    data = json.loads((bench / "bench.json").read_text())
    rd = tmp_path / "runs" / "fidonly-0"
    (rd / "fid").mkdir(parents=True)
    (rd / "fid" / "fid-model.json").write_text(json.dumps({"target": "model", "method": "dpdm", "minority": 7.0,
                                                          "majority": 3.0, "dataset": "digits", "seed": 0}))
    data["cells"].append({"status": "done", "method": "dpdm", "variant": "dpdm-2c", "target": "model",
                          "dataset": "digits", "seed": 0, "role": "baseline", "run_dir": str(rd), "kind": "fid",
                          "result_path": str(rd / "fid" / "fid-model.json")})
    (bench / "bench.json").write_text(json.dumps(data))
    render_report(bench, tmp_path / "out", ["csv"])
    fid = pd.read_csv(tmp_path / "out" / "fid.csv")
    row = fid[fid["run_dir"] == "fidonly-0"]
    assert len(row) == 1 and row.iloc[0]["method"] == "dpdm-2c" and row.iloc[0]["minority"] == 7.0
    assert set(fid["method"]) == {"subj", "base", "dpdm-2c"}


def test_a_bench_reports_only_its_own_fid_cells_not_other_records_in_its_run_folders(tmp_path):
    """A run folder shared with another bench can hold FID records of other settings or other targets: a bench's
    report shows the records of its own FID cells, and no row for a target it did not measure."""
    bench = _bench(tmp_path)
    data = json.loads((bench / "bench.json").read_text())
    cell = next(c for c in data["cells"] if c["kind"] == "fid")
    rd = Path(cell["run_dir"])
    stranger = {"target": "pipeline:0", "method": "subj", "minority": 99.0, "majority": 98.0, "dataset": "digits",
                "seed": 0}
    (rd / "fid" / "fid-other-settings.json").write_text(json.dumps(stranger | {"target": cell["target"]}))
    (rd / "fid" / "fid-pipeline.json").write_text(json.dumps(stranger))
    render_report(bench, tmp_path / "out", ["csv"])
    fid = pd.read_csv(tmp_path / "out" / "fid.csv")
    sbs = pd.read_csv(tmp_path / "out" / "side_by_side.csv")
    assert 99.0 not in set(fid["minority"]) and "pipeline:0" not in set(fid["target"]) | set(sbs["target"])
    # the same run folders reported as runs (no bench): every record there, the newest of a target winning
    runs_only = render_report(rd, tmp_path / "out-run", ["csv"])
    assert runs_only and 99.0 in set(pd.read_csv(tmp_path / "out-run" / "fid.csv")["minority"])


def test_the_claims_figure_has_a_panel_per_measured_claim_and_the_html_shows_it(tmp_path):
    out = tmp_path / "out"
    written = render_report(_bench(tmp_path), out, ["csv", "html"])
    png = out / "figures" / "paper_claims.png"
    assert png in written and (out / "figures" / "paper_claims.svg") in written
    svg = (out / "figures" / "paper_claims.svg").read_text()
    for claim_id in ("leak", "fid-minority", "acc"):
        assert claim_id in svg
    assert svg.count("subject − baseline, paired (3 seeds)") >= 3  # the paired difference under each panel
    assert 'src="figures/paper_claims.png"' in (out / "index.html").read_text()
    render_report(_bench(tmp_path / "csv-only"), tmp_path / "out-csv", ["csv"])
    assert not (tmp_path / "out-csv" / "figures").exists()  # figures only for the formats that show them


def test_a_bench_of_fid_cells_only_is_reported_with_its_fid_table_in_method_and_seed_order(tmp_path):
    """A suite with ``attacks: []`` (e.g. clients-mnist) has FID cells and claims but no attack result."""
    bench = _bench(tmp_path, claims=[_claim(id="fid-minority", metric="fid", subject={"method": "subj",
                                                                                     "classes": "minority"},
                                            baseline={"method": "base", "classes": "minority"})])
    data = json.loads((bench / "bench.json").read_text())
    data["cells"] = [c for c in data["cells"] if c["kind"] == "fid"][::-1]
    (bench / "bench.json").write_text(json.dumps(data))
    for rd in (tmp_path / "runs").iterdir():  # FID records written by the bench carry these
        f = rd / "fid" / "fid-model.json"
        method, seed = rd.name.rsplit("-", 1)
        f.write_text(json.dumps(json.loads(f.read_text()) | {"method": method, "seed": int(seed), "dataset": "digits"}))
        (rd / "result.json").unlink(missing_ok=True)
    render_report(bench, tmp_path / "out", ["csv", "markdown"])
    fid = pd.read_csv(tmp_path / "out" / "fid.csv")
    rows = list(zip(fid["method"], fid["seed"]))  # the cells were listed in reverse: the table orders them
    assert rows in ([(m, s) for m in ("base", "subj") for s in range(3)],
                    [(m, s) for m in ("subj", "base") for s in range(3)])
    assert pd.read_csv(tmp_path / "out" / "paper_claims.csv").loc[0, "subject_n_seeds"] == 3
    assert "| method | target | seed |" in (tmp_path / "out" / "tables.md").read_text()
