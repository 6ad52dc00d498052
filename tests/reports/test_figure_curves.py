"""Every result that belongs in a ROC figure is drawn in it, once, under a label that tells it apart from the
others in that figure (reports/figures.py, reports/curve_labels.py): an ε sweep of one method and several outside
models each keep all their curves, and per-target files get distinct titles and names."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from report_fakes import write_result

from privbench.metrics import plots
from privbench.reports.collect import load_results
from privbench.reports.figures import write_roc_figures
from privbench.reports.tables import Tables

EPSILONS = (1.0, 4.0, 10.0, 32.0)
ATTACKS = ("pia", "loss")
DPSGD_BASIS = "DP-SGD, PRV accountant, Poisson-subsampled Gaussian, add/remove-one record; noise source: seeded"


def _scores(rng, sep):
    y = np.r_[np.ones(40), np.zeros(40)].astype(int)
    return y * sep + rng.normal(size=80), y


def _epsilon_bench(root):
    """A bench with an ε axis: dpdm/model at four ε (one run each, seed 0) and the centralized baseline."""
    rng = np.random.default_rng(0)
    cells = []
    runs = [("dpdm", e, {"epsilon": e * 0.99, "delta": 1e-5, "basis": DPSGD_BASIS}) for e in EPSILONS]
    runs.append(("centralized", None, None))
    for i, (method, eps, privacy) in enumerate(runs):
        run = root / "runs" / f"{method}-{i}"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(f"method: {method}\nseed: 0\n")  # its attacks share the run
        for attack in ATTACKS:
            path = write_result(run / "attacks" / attack, *_scores(rng, 0.2 * i),
                                method=method, attack=attack, privacy=privacy)
            cells.append({"kind": "attack", "status": "done", "method": method, "target": "model", "attack": attack,
                          "dataset": "digits", "seed": 0, "epsilon": eps, "result_path": str(path),
                          "role": "private" if eps else "baseline", "run_dir": str(path.parents[2])})
    bench = root / "bench"
    bench.mkdir(parents=True)
    (bench / "bench.json").write_text(json.dumps({"suite": "eps", "cells": cells}))
    return bench


def _outside_models(root):
    """Two models trained elsewhere, attacked as ``external/model`` on the same records (only their weights
    differ), and one of them again on other records."""
    rng = np.random.default_rng(1)
    for i, (model, members) in enumerate((("ddpm-a", "members.npz"), ("ddpm-b", "members.npz"),
                                          ("ddpm-a", "members-2.npz"))):
        prov = {"model": {"format": "diffusers", "path": f"/models/{model}", "weights_sha256": model * 4},
                "members": {"spec": f"data/{members}"}, "nonmembers": {"spec": "data/nonmembers.npz"},
                "records_sha256": members}
        for attack in ATTACKS:
            f = write_result(root / f"external-{i}{attack}", *_scores(rng, 0.3 * i), method="external",
                             attack=attack)
            d = json.loads(f.read_text())
            f.write_text(json.dumps({**d, "provenance": prov}))
    return root


@pytest.fixture
def drawn(monkeypatch):
    """The curves every written figure draws, read from its matplotlib objects: {file stem: [Counter of curve
    labels per axes]} (the chance diagonal left out)."""
    seen: dict[str, list[Counter]] = {}
    real = plots.save_figure

    def record(fig, path, formats=("png",)):
        seen[Path(path).stem] = [Counter(ln.get_label() for ln in ax.get_lines()
                                               if ln.get_label() != "chance" and not ln.get_label().startswith("_"))
                                       for ax in fig.axes]
        return real(fig, path, formats)

    monkeypatch.setattr(plots, "save_figure", record)
    return seen


def _figures(source, out):
    results = load_results([source])
    targets = Tables.build(results, None, base=source).targets()
    return results, write_roc_figures(targets, out, formats=("svg",))


def _check_every_result_drawn(results, figures, drawn):
    per_attack = Counter(r.attack for r in results)
    for f in figures["by_attack"]:
        stem = f["files"][0].stem
        assert [sum(c.values()) for c in drawn[stem]] == [per_attack[a] for a in f["attacks"]], stem
        assert all(max(c.values()) == 1 for c in drawn[stem]), drawn[stem]  # one curve per label
    for f in figures["per_attack"]:
        stem = f["files"][0].stem
        assert sum(drawn[stem][0].values()) == per_attack[f["attack"]], stem
        assert len(f["curves"]) == per_attack[f["attack"]]
    blocks = {r.target_key() for r in results}
    assert len(figures["per_target"]) == len(blocks)
    titles = [f["title"] for f in figures["per_target"]]
    assert len(set(titles)) == len(titles), titles
    assert not any(f["files"][0].stem.endswith(("-2", "-3", "-4")) for f in figures["per_target"])


def test_an_epsilon_sweep_keeps_one_curve_per_result(tmp_path, drawn):
    results, figures = _figures(_epsilon_bench(tmp_path), tmp_path / "out")
    _check_every_result_drawn(results, figures, drawn)
    labels = set(drawn["roc-pia-digits-seed0"][0])
    assert {"dpdm/model ε=1", "dpdm/model ε=4", "dpdm/model ε=10", "dpdm/model ε=32"} <= {
        lab.split(" (AUC")[0] for lab in labels}, labels
    assert any(lab.startswith("centralized/model (AUC") for lab in labels), labels  # nothing to tell apart: bare
    names = sorted(f["files"][0].stem for f in figures["per_target"])
    assert names == ["roc-digits-seed0-centralized-model", "roc-digits-seed0-dpdm-model-eps1",
                     "roc-digits-seed0-dpdm-model-eps10", "roc-digits-seed0-dpdm-model-eps32",
                     "roc-digits-seed0-dpdm-model-eps4"], names
    assert "dpdm/model, ε=4 (digits, seed 0)" in [f["title"] for f in figures["per_target"]]


def test_outside_models_keep_one_curve_each(tmp_path, drawn):
    results, figures = _figures(_outside_models(tmp_path / "runs"), tmp_path / "out")
    _check_every_result_drawn(results, figures, drawn)
    labels = {lab.split(" (AUC")[0] for lab in drawn["roc-pia-digits-seed0"][0]}
    assert labels == {"external/model ddpm-a members.npz", "external/model ddpm-b",
                      "external/model ddpm-a members-2.npz"}, labels


def test_an_inverted_auc_is_marked_in_every_roc_figure(tmp_path, drawn):
    """An AUC whose CI lies below 0.5 is marked "inverted" as in the tables: in the per-target and per-attack
    legends and in the by-attack panel's title; an AUC whose CI reaches 0.5 is not."""
    rng = np.random.default_rng(2)
    root = tmp_path / "results"
    run = root / "fake-0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("method: fake\nseed: 0\n")  # its attacks share the run
    for attack, sep, ci in (("pia", -1.5, [0.12, 0.35]), ("loss", 1.5, [0.7, 0.9])):
        write_result(run / "attacks" / attack, *_scores(rng, sep), attack=attack,
                     metrics={"auc": float(np.mean(ci)), "ci95": {"auc": ci}})
    _, figures = _figures(root, tmp_path / "out")
    (target,) = figures["per_target"]
    assert target["inverted"] == ["pia"]
    labels = set(drawn[target["files"][0].stem][0])
    assert any(lab.startswith("pia (AUC=") and lab.endswith(", inverted)") for lab in labels), labels
    assert any(lab.startswith("loss (AUC=") and "inverted" not in lab for lab in labels), labels
    per_attack = {f["attack"]: f for f in figures["per_attack"]}
    assert per_attack["pia"]["inverted"] and not per_attack["loss"]["inverted"]
    assert all(lab.endswith(", inverted)") for lab in drawn[per_attack["pia"]["files"][0].stem][0])
    (grid,) = figures["by_attack"]
    assert set(grid["inverted"]) == {"pia"}
    svg = grid["files"][0].read_text()
    assert svg.count("inverted: ") == 1, "one panel title names its inverted curve"
