"""Variants of one registered method in a suite (``dpdm-lora: {method: dpdm}``) are told apart in every table of
the report by the suite's entry name, while registry lookups (role, order) keep the registered name; a gate
names a variant by its entry name or all of them by the method's."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
from report_fakes import write_result

from privbench.reports import render_report
from privbench.reports.collect import load_results
from privbench.reports.gates import check_gates

VARIANTS = {"dpdm-lora": 0.9, "dpdm-public": 0.7, None: 0.5}  # entry name → how separable its scores are


def _bench(tmp_path):
    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(50), np.zeros(50)]
    cells = []
    for i, (variant, sep) in enumerate(VARIANTS.items()):
        scores = labels * sep * 4 + rng.normal(size=100)
        path = write_result(tmp_path / "runs" / f"dpdm-{i}", scores, labels, method="dpdm", attack="loss",
                            metrics={"auc": round(0.5 + sep / 2, 3)})
        cells.append({"kind": "attack", "status": "done", "method": "dpdm", "variant": variant, "target": "model",
                      "attack": "loss", "dataset": "digits", "seed": 0, "role": "private",
                      "result_path": str(path)})
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "bench.json").write_text(json.dumps({"suite": "variants", "roles": {"dpdm": "private"},
                                                  "cells": cells}))
    return bench


def test_every_table_names_the_variant(tmp_path):
    bench = _bench(tmp_path)
    res = load_results([bench])
    assert sorted(r.method_label for r in res) == ["dpdm", "dpdm-lora", "dpdm-public"]
    assert {r.method for r in res} == {"dpdm"}
    out = tmp_path / "out"
    render_report(bench, out, ["csv", "markdown"])
    for name in ("results.csv", "side_by_side.csv", "audit.csv", "accountant.csv"):
        df = pd.read_csv(out / name)
        assert sorted(df["method"]) == ["dpdm", "dpdm-lora", "dpdm-public"], name
        assert set(df["registered_method"]) == {"dpdm"}, name
    md = (out / "tables.md").read_text()
    for v in ("dpdm-lora", "dpdm-public"):
        assert f"| {v} | model |" in md
    sbs = pd.read_csv(out / "side_by_side.csv").set_index("method")
    assert sbs.loc["dpdm-lora", "loss_auc"] > sbs.loc["dpdm", "loss_auc"]  # each row carries its own run's numbers


def test_a_gate_names_a_variant_or_every_variant(tmp_path):
    bench = _bench(tmp_path)
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - {method: dpdm-public, target: model, attack: loss, metric: auc, max: 0.9}\n")
    breaches, n = check_gates(gates, [str(bench)])
    assert n == 1 and breaches == [], breaches
    gates.write_text("gates:\n  - {method: dpdm, target: model, attack: loss, metric: auc, max: 0.9}\n")
    breaches, n = check_gates(gates, [str(bench)])
    assert n == 3 and len(breaches) == 1 and "on dpdm-lora/model" in breaches[0], breaches  # all three variants


def test_the_console_table_names_each_variant_and_says_a_shared_warning_once():
    """Two variants of one attack on one outside model: two rows that read apart, one line per records range and
    per warning, the warning naming every attack that raised it."""
    from privbench.reports.text import format_table

    def result(attack, label, auc, warnings):
        return {"method": "external", "target": "pipeline", "attack": attack, "label": label, "kind": "membership",
                "metrics": {"auc": auc, "asr": 0.6, "ci95": {"auc": [auc - 0.05, min(auc + 0.05, 1.0)]}},
                "n_nonmembers": 32, "warnings": warnings, "privacy": None,
                "records_range": {"range": "-1:1", "encoding": "float", "requested": "auto"}}

    shift = "member/non-member shift detected: the pixels alone tell the sets apart"
    text = format_table([result("clid", "clid", 0.948, [shift, "calibrated: FPR 0.0625"]),
                         result("clid", "clid@vec", 0.932, [shift, "calibrated: FPR 0.125"])])
    rows = [line.split()[:2] for line in text.splitlines()[2:4]]
    assert rows == [["external/pipeline", "clid"], ["external/pipeline", "clid@vec"]]
    assert text.count("records of external/pipeline") == 1
    assert text.count(shift) == 1 and f"! clid, clid@vec: {shift}" in text
    assert "! clid: calibrated: FPR 0.0625" in text and "! clid@vec: calibrated: FPR 0.125" in text
