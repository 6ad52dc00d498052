"""`report --attacks/--targets`: only the chosen attacks and targets in tables, CSV and figures; a name
no result has is exit 2 with the choices; the figures: one file per attack panel, one shared legend in the grid,
and equal curves drawn with different line styles and markers; empty columns are left out of the Markdown."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
from click.testing import CliRunner
from report_fakes import write_result

from privbench.cli import main


def make_runs(root):
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(100), np.zeros(100)]
    same = y * 1.5 + rng.normal(size=200)
    for method, target in (("pfdm", "pipeline:0"), ("pfdm", "client:0"), ("centralized", "model")):
        for attack in ("loss", "pia", "secmi@paper"):
            s = same if method == "pfdm" else y + rng.normal(size=200)
            write_result(root / f"{method}-{target.replace(':', '')}" / attack, s, y, method=method, target=target,
                         attack=attack)
    return root


def test_selection_reaches_tables_csv_and_figures(tmp_path):
    runs = make_runs(tmp_path / "runs")
    r = CliRunner().invoke(main, ["report", str(runs), "--out", str(tmp_path / "rep"), "--format", "csv,markdown",
                                  "--attacks", "pia,secmi", "--targets", "pfdm", "--json"])
    assert r.exit_code == 0, r.output
    files = {p.split("rep/", 1)[1] for p in json.loads(r.output)["files"]}
    sbs = pd.read_csv(tmp_path / "rep" / "side_by_side.csv")
    assert set(sbs["method"]) == {"pfdm"} and set(sbs["target"]) == {"pipeline:0", "client:0"}
    assert {"pia_auc", "secmi@paper_auc"} <= set(sbs.columns) and "loss_auc" not in sbs.columns  # base name: variants
    assert "figures/roc-pia-digits-seed0.svg" in files and "figures/roc-loss-digits-seed0.svg" not in files
    assert not any("centralized" in f for f in files)
    md = (tmp_path / "rep" / "tables.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| method"))
    assert "| loss |" not in md and "centralized" not in md
    assert "FID" not in md and "memorized" not in md and "emp. ε lb" in header


def test_unknown_selection_is_one_line_exit_2(tmp_path):
    runs = make_runs(tmp_path / "runs")
    for opt, bad in (("--attacks", "pia,nope"), ("--targets", "dpdm/model")):
        r = CliRunner().invoke(main, ["report", str(runs), "--out", str(tmp_path / "rep"), opt, bad])
        assert r.exit_code == 2 and "choose from" in r.output and "Traceback" not in r.output, r.output
        assert not (tmp_path / "rep").exists()


def test_equal_curves_differ_in_line_style_and_marker_and_the_grid_has_one_legend():
    from privbench.metrics.plots import roc_panels_figure

    rng = np.random.default_rng(0)
    y = np.r_[np.ones(50), np.zeros(50)]
    s = y + rng.normal(size=100)
    fig = roc_panels_figure({a: {"pfdm/pipeline:0": (s, y), "pfdm/client:0": (s, y)} for a in ("pia", "loss")})
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    for ax in fig.axes:
        a, b = [line for line in ax.get_lines() if line.get_label().startswith("pfdm")]
        assert np.array_equal(a.get_xydata(), b.get_xydata())              # the same curve …
        assert a.get_linestyle() != b.get_linestyle() and a.get_marker() != b.get_marker()   # … drawn apart
        assert a.get_markevery() != b.get_markevery()
