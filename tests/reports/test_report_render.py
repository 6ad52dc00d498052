"""`privbench report`: CSV tables + one self-contained, autoescaped HTML page, for a run dir or a bench dir."""
from __future__ import annotations

import json
import re
import shutil

import pandas as pd
from click.testing import CliRunner

from privbench.cli import main
from privbench.reports import render_report


def _html_is_self_contained(html: str) -> None:
    assert "<script" not in html.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html, re.I)   # no external resource
    assert "http://" not in html and "https://" not in html
    assert "data:image/svg+xml;base64," in html or "data:image/png;base64," in html  # ROC figures: SVG


def test_report_of_a_run_dir(tmp_path, test_results):
    run_dir = test_results[("centralized", "pia")].parents[2]
    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["report", str(run_dir), "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    names = {p.name for p in out.iterdir()}
    assert {"index.html", "side_by_side.csv", "results.csv", "audit.csv", "accountant.csv",
            "provenance.csv"} <= names
    html = (out / "index.html").read_text()
    _html_is_self_contained(html)
    for needle in ("Side by side", "ROC curves", "Empirical ε audit", "Accountant summary", "Provenance",
                   "centralized", "pia", "loss", run_dir.name):
        assert needle in html, needle
    sbs = pd.read_csv(out / "side_by_side.csv")
    assert len(sbs) == 1 and sbs.loc[0, "method"] == "centralized" and sbs.loc[0, "role"] == "baseline"
    for col in ("pia_auc", "pia_auc_ci_lo", "pia_auc_ci_hi", "pia_tpr_1pct", "loss_auc", "eps_lb_cp",
                "formal_epsilon", "fid_overall", "fid_extractor", "memorized_fraction", "reconstruction_reid_rate"):
        assert col in sbs.columns, col
    res = pd.read_csv(out / "results.csv")
    assert sorted(res["attack"]) == ["loss", "pia"]        # the run dir's top-level copy is not counted twice


def test_report_formats_and_escaping(tmp_path, test_results):
    """Only CSV with --format csv; a hostile name in a result is escaped, never injected."""
    src = test_results[("pfdm", "pia")].parent
    fake = tmp_path / "runs" / "x" / "attacks" / "pia-evil"
    shutil.copytree(src, fake)
    (tmp_path / "runs" / "x" / "config.yaml").write_text((src.parents[1] / "config.yaml").read_text())
    d = json.loads((fake / "result.json").read_text())
    d["target"] = "<script>alert(1)</script>"
    (fake / "result.json").write_text(json.dumps(d))
    paths = render_report(tmp_path / "runs", tmp_path / "csv", ["csv"])
    assert paths and all(p.suffix == ".csv" for p in paths)
    render_report(tmp_path / "runs", tmp_path / "html", ["html"])
    html = (tmp_path / "html" / "index.html").read_text()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    _html_is_self_contained(html)


def test_report_bad_input(tmp_path):
    r = CliRunner().invoke(main, ["report", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "nope" in r.stderr
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(main, ["report", str(tmp_path / "empty"), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "result.json" in r.stderr
    r = CliRunner().invoke(main, ["report", str(tmp_path / "empty"), "--out", str(tmp_path / "o"), "--format", "pdf"])
    assert r.exit_code == 2 and "pdf" in r.stderr
