"""Rows a reader can tell apart, and the gate and table polish: outside models named by their folder, model and
records columns, a title naming what was audited, BREACH notes, unmatched gates listing what exists, one table for
several attacks, intervals that contain their value, notes on rows that coincide (docs/cli.md §3, §10;
docs/external-models.md)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from report_fakes import write_result


def _outside(folder: Path, model: str, members: str, nonmembers: str, rng: str, seed: int) -> Path:
    """A result as `attack --model MODEL` writes it (provenance with the model's path and the record sets)."""
    labels = np.r_[np.ones(32, int), np.zeros(32, int)]
    scores = np.random.default_rng(seed).normal(size=64) + labels
    path = write_result(folder, scores, labels, method="external", target=Path(model).name, attack="pia")
    res = json.loads(path.read_text())
    res["dataset"] = "external"
    res["provenance"] = {"model": {"path": f"/data/{model}", "format": "diffusers-pipeline",
                                   "weights_sha256": f"{seed:064x}"},
                         "members": {"spec": members, "kind": "npz", "range": rng},
                         "nonmembers": {"spec": nonmembers, "kind": "npz", "range": rng},
                         "records_sha256": f"{seed + 100:064x}"}
    path.write_text(json.dumps(res))
    return path


def _four(root: Path) -> Path:
    runs = root / "runs"
    i = 0
    for model in ("ddpm-a", "ddpm-b"):
        for members, nonmembers, rng in (("members.npz", "heldout.npz", "-1:1"),
                                         ("members-png", "heldout-png", "0:255")):
            _outside(runs / f"external-{i}", model, members, nonmembers, rng, i)
            i += 1
    return runs


def _cli(*args):
    from privbench.cli import main

    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


def test_a_report_over_two_outside_models_and_two_record_sets_shows_four_distinguishable_rows(tmp_path):
    runs = _four(tmp_path)
    code, _out, err = _cli("report", runs, "--out", tmp_path / "rep", "--format", "markdown,csv,html")
    assert code == 0, err
    md = (tmp_path / "rep" / "tables.md").read_text()
    table = md.split("## Membership inference", 1)[1].split("\n## ", 1)[0]
    header = next(line for line in table.splitlines() if line.startswith("| "))
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert header.startswith("| model | records |"), header
    assert len(rows) == 4 and len(set(rows)) == 4
    who = {tuple(c.strip() for c in r.split("|")[1:3]) for r in rows}
    assert who == {(m, f"{a} / {b} ({rng})") for m in ("ddpm-a", "ddpm-b")
                   for a, b, rng in (("members.npz", "heldout.npz", "-1:1"),
                                     ("members-png", "heldout-png", "0:255"))}
    with open(tmp_path / "rep" / "side_by_side.csv") as fh:
        sbs = list(csv.DictReader(fh))
    assert len({(r["model"], r["records"]) for r in sbs}) == 4
    assert md.startswith("# privbench report — outside models ddpm-a, ddpm-b (pia)")
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "combined-" not in html.split("</h1>", 1)[0] and "DP-SAD" not in html
    assert "Each outside model" in html


def test_the_default_target_of_an_outside_model_is_its_folder_name(tmp_path, monkeypatch):
    from privbench.cli import default_target_name

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-ddpm").mkdir()
    (tmp_path / "victims" / "cifar").mkdir(parents=True)
    (tmp_path / "victims" / "cifar" / "ckpt.pt").write_bytes(b"")
    assert default_target_name("my-ddpm") == default_target_name("my-ddpm/") == "my-ddpm"
    assert default_target_name("victims/cifar/ckpt.pt") == "cifar"
    assert default_target_name("acme/tiny-ddpm") == "tiny-ddpm"  # not a path here: a Hub id


def test_a_breach_carries_the_gate_note_and_an_unmatched_gate_lists_what_exists(tmp_path):
    runs = _four(tmp_path)
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - {method: external, target: ddpm-a, attack: pia, metric: auc, max: 0.1, "
                     "note: the model card's bar}\n")
    code, _out, err = _cli("check", "--gates", gates, runs)
    breaches = [line for line in err.splitlines() if line.startswith("BREACH:")]
    assert code == 1 and len(breaches) == 2
    assert all(line.endswith("; note: the model card's bar") for line in breaches), err
    gates.write_text("gates:\n  - {method: external, target: model, attack: pia, metric: auc, max: 0.9}\n")
    code, _out, err = _cli("check", "--gates", gates, runs)
    assert code == 2 and "matched none of the 4 results given (they hold external/ddpm-a (pia); " \
                          "external/ddpm-b (pia))" in err, err


def test_an_interval_contains_its_value():
    from privbench.reports.cells import ci, num

    assert ci([0.995, 1.0]) == "[0.99, 1.00]" and num(0.998) == "0.998"
    assert ci([0.94, 0.98]) == "[0.94, 0.98]"  # exact ends stay as they are
    assert ci([0.9412, 0.9788]) == "[0.94, 0.98]" and ci([0.1251, 0.3349], 3) == "[0.125, 0.335]"
    rng = np.random.default_rng(0)
    for _ in range(500):
        lo, hi = np.sort(rng.uniform(0, 1, 2))
        v = rng.uniform(lo, hi)
        shown_lo, shown_hi = (float(x) for x in ci([lo, hi]).strip("[]").split(", "))
        assert shown_lo <= round(v, 3) <= shown_hi or not (lo <= round(v, 3) <= hi)


def test_a_huge_number_is_a_short_cell():
    """A user may claim ε = 1e308: a fixed-decimals cell would print 309 digits."""
    from privbench.reports.cells import num

    assert num(1e308) == "1.000e+308" and num(-2.5e6, 2) == "-2.50e+06" and num(999999.0) == "999999.000"


def test_several_attacks_on_an_outside_model_print_one_table(tmp_path):
    from privbench.reports.text import result_summary

    a = json.loads(_outside(tmp_path / "a", "ddpm-a", "m.npz", "n.npz", "-1:1", 0).read_text())
    b = dict(a, attack="sima", label="sima")
    text = result_summary([a, b])
    assert text.count("target ") == 1 and text.count("model: /data/ddpm-a") == 1 and text.count("run: ") == 2


def test_rows_with_identical_scores_carry_a_note_saying_why(tmp_path):
    from privbench.reports.text import format_table

    labels = np.r_[np.ones(32, int), np.zeros(32, int)]
    s = np.random.default_rng(0).normal(size=64)
    paths = [write_result(tmp_path / t.replace(":", "-"), sc, labels, method="pfdm", target=t)
             for t, sc in (("pipeline:0", s), ("client:0", s), ("shared", s[::-1]))]
    text = format_table([json.loads(p.read_text()) for p in paths])
    notes = [line for line in text.splitlines() if line.startswith("  note:")]
    assert len(notes) == 1 and "pfdm/pipeline:0 and pfdm/client:0 have identical pia scores" in notes[0]
    assert "below t0" in notes[0] and "pfdm/shared" not in notes[0]
    code, _out, err = _cli("report", tmp_path, "--out", tmp_path / "rep", "--format", "markdown,html")
    assert code == 0, err
    for page in ("tables.md", "index.html"):
        text = (tmp_path / "rep" / page).read_text().replace("&#39;", "'")
        assert "pfdm/pipeline:0 and pfdm/client:0 have identical pia scores: pipeline:K predicts" in text, page
