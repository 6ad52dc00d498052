"""Every table follows one cell rule (n/a for a TPR the non-member count cannot resolve,
one spelling for a missing value), and a report says what a target is, shows no "None" and holds no absolute
path."""
from __future__ import annotations

import csv
import json

import numpy as np
from report_fakes import write_result

from privbench.reports import render_report
from privbench.reports.text import format_table


def _result(n_non=32):
    return {"method": "external", "target": "model", "attack": "pia", "dataset": "digits", "preset": "tiny",
            "seed": 0, "kind": "membership", "n_members": 32, "n_nonmembers": n_non, "privacy": None,
            "metrics": {"auc": 0.573, "asr": 0.58, "tpr_at_1pct_fpr": 0.0625, "tpr_at_0_1pct_fpr": 0.0625,
                        "ci95": {"auc": [0.43, 0.71], "tpr_at_1pct_fpr": [0.0, 0.19]}},
            "calibrated": None, "warnings": []}


def test_attack_and_run_tables_show_n_a_like_every_report():
    """`attack`/`run` printed TPR@1% = 0.062 with 32 non-members where bench/report print n/a."""
    row = format_table([_result()]).splitlines()[2]
    assert "0.062" not in row and row.count("n/a") == 2, row
    row = format_table([_result(n_non=200)]).splitlines()[2]
    assert "0.062 [0.00, 0.19]" in row and row.count("n/a") == 1, row  # 1 % resolvable, 0.1 % not
    assert "None" not in format_table([dict(_result(), calibrated=None, metrics={"auc": None, "asr": None,
                                                                                    "tpr_at_1pct_fpr": None,
                                                                                    "tpr_at_0_1pct_fpr": None})])


def _external_run(root, n=32):
    y = np.r_[np.ones(n, int), np.zeros(n, int)]
    return write_result(root / "external-0123456789ab", y * 0.3 + np.random.default_rng(2).normal(size=2 * n), y,
                        method="external", target="model", attack="pia", preset="tiny")


def test_csv_tables_follow_the_same_rule(tmp_path):
    _external_run(tmp_path / "runs")
    render_report(tmp_path / "runs", tmp_path / "rep", ["csv"])
    for name in ("results.csv", "side_by_side.csv"):
        (row,) = list(csv.DictReader((tmp_path / "rep" / name).open()))
        tpr = {k: v for k, v in row.items() if "tpr_" in k}
        assert tpr and all(v == "" for v in tpr.values()), (name, tpr)  # n/a: empty, CI ends too
        assert row.get("auc") or row.get("pia_auc")


def test_a_report_says_what_an_outside_model_is_and_holds_no_none_or_absolute_path(tmp_path, monkeypatch):
    runs = tmp_path / "store" / "runs"
    res = _external_run(runs)
    sched = tmp_path / "store" / "my-ddpm" / "scheduler_config.json"  # an outside model's notes name its files
    sched.parent.mkdir()
    sched.write_text("{}")
    d = json.loads(res.read_text())
    d["notes"] = [f"external model (diffusers-pipeline); schedule: {sched}"]
    res.write_text(json.dumps(d))
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the runs lie outside the working directory, as in a bench on another disk
    render_report(runs, tmp_path / "rep", ["html", "csv"])
    html = (tmp_path / "rep" / "index.html").read_text()
    assert ">non-private baseline</span>" not in html
    assert '<span class="pill external">external model (trained outside privbench)</span>' in html
    assert ">None<" not in html and "None</" not in html and "{'" not in html
    assert str(tmp_path) not in html and "schedule: ../my-ddpm/scheduler_config.json" in html
    for name in ("results.csv", "side_by_side.csv"):
        text = (tmp_path / "rep" / name).read_text()
        assert str(tmp_path) not in text, name
    (row,) = list(csv.DictReader((tmp_path / "rep" / "results.csv").open()))
    assert row["run_dir"] == "external-0123456789ab" and row["result"] == "external-0123456789ab/result.json"
