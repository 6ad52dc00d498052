"""bench.json's cells (privbench.bench.cell_schema.BenchCell): docs/cli.md §8 names exactly the declared keys, a
planned cell is written in the file's key order and read back unchanged, an older file's cell reads with defaults,
and an undeclared or mistyped key is refused in one line naming the file."""
from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from privbench.bench.cell_schema import KEYS, BenchCell, cells_of
from privbench.bench.plan import Cell
from privbench.core.errors import BadInput

ROOT = Path(__file__).resolve().parents[2]

#: an attack cell with every key set, in bench.json's order (as the runner writes it)
CELL = {"kind": "attack", "method": "dpdm", "dataset": "digits", "seed": 0, "target": "model", "attack": "lira@online",
        "role": "private", "status": "done", "reason": "cached", "id": "dpdm-lora/digits/0/model/lira@online",
        "run_dir": "/runs/dpdm-digits-ab", "config_hash": "ab", "attack_hash": "cd", "settings_hash": None,
        "external": None, "result_path": "/runs/dpdm-digits-ab/attacks/x/result.json", "summary": {"auc": 0.5},
        "seconds": 1.5, "attempts": 1, "variant": "dpdm-lora", "epsilon": 10.0, "utility": None,
        "overrides": [["train.steps", 4], ["dp.epsilon", 10.0]]}


def test_docs_name_exactly_the_declared_keys():
    text = (ROOT / "docs" / "cli.md").read_text()
    block = text[text.index("Cell (`BenchCell`"):text.index("Utility record (")]
    documented: set[str] = set()
    for row in (line for line in block.splitlines() if line.startswith("| `")):
        documented |= set(re.findall(r"`([a-z_]+)`", row.strip("|").split(" | ")[0]))
    declared = {f.name for f in fields(BenchCell)}
    assert documented == declared, f"in docs only: {documented - declared}; declared only: {declared - documented}"


def test_a_cell_round_trips_in_the_files_key_order():
    c = BenchCell.from_json(CELL)
    assert c.to_json() == CELL and list(c.to_json()) == list(CELL) == list(KEYS)
    assert json.dumps(c.to_json(), indent=2) == json.dumps(CELL, indent=2)
    assert (c.variant, c.epsilon, c.overrides) == ("dpdm-lora", 10.0, [("train.steps", 4), ("dp.epsilon", 10.0)])
    # a planned cell is one: what only the planning process needs is never written
    planned = Cell("attack", method="centralized", dataset="digits", seed=0, target="model", cfg=object(),
                   shared=("x",), overrides=[("train.steps", 4)])
    assert list(planned.to_json()) == list(KEYS) and planned.to_json()["overrides"] == [["train.steps", 4]]
    assert BenchCell.from_json(planned.to_json()).to_json() == planned.to_json()


def test_an_older_files_cell_reads_its_missing_keys_at_their_defaults():
    old = {k: v for k, v in CELL.items() if k not in ("variant", "epsilon", "utility", "attempts", "external")}
    c = BenchCell.from_json(old)
    assert (c.variant, c.epsilon, c.utility, c.attempts, c.external) == (None, None, None, None, None)


@pytest.mark.parametrize("cell, needle", [
    ({**CELL, "a_newer_key": 1}, "cell 1: undeclared key(s) 'a_newer_key'"),
    ({**CELL, "seed": "0"}, "cell 1: seed: expected int"),
    ({k: v for k, v in CELL.items() if k != "target"}, "cell 1: missing keys: target"),
    ({**CELL, "overrides": [["train.steps"]]}, "cell 1: overrides: expected [key, value] pairs"),
])
def test_a_bad_cell_is_refused_in_one_line_naming_the_file(tmp_path, cell, needle):
    from privbench.reports.collect import load_results, read_bench

    (tmp_path / "bench.json").write_text(json.dumps({"suite": "s", "cells": [CELL, cell]}))
    for read in (read_bench, lambda d: load_results([d])):
        with pytest.raises(BadInput) as e:
            read(tmp_path)
        msg = str(e.value)
        assert msg.startswith(str(tmp_path / "bench.json")) and needle in msg and "\n" not in msg
    with pytest.raises(BadInput, match="not a bench"):
        cells_of([CELL])
