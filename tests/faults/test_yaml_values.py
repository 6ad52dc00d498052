"""YAML that parses but says two things at once, or a number no reader can hold: a key written twice in one
mapping (YAML keeps the last value, so a duplicated suite method or ``seeds:`` would drop cells silently) and an
integer beyond int64 (a 5000-digit literal stalls the parser) are refused with exit 2 and one line naming the file,
the key or line and the bound, before anything is written."""
from __future__ import annotations

import pytest
from fault_helpers import TEST, assert_one_line, cli, entries

SUITE = "name: s\npreset: test\nattacks: [loss]\nfid: false\nsamples: false\n"


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("body,needle", [
    ("seeds: [0]\nseeds: [1]\nmethods: {centralized: {}}\n", "duplicate key 'seeds' at line 7 (first at line 6)"),
    ("methods:\n  centralized: {targets: [model]}\n  centralized: {attacks: [pia]}\n",
     "duplicate key 'centralized' at line 8 (first at line 7)"),
    ("methods: {centralized: {}, local: {}, centralized: {}}\n", "duplicate key 'centralized' at line 6"),
], ids=["seeds", "method", "flow-mapping"])
def test_duplicate_keys_in_a_suite(tmp_path, body, needle):
    suite = _write(tmp_path, "s.yaml", SUITE + body)
    r = cli("bench", "--suite", suite, "--runs-dir", tmp_path / "runs")
    line = assert_one_line(r, 2, needle)
    assert str(suite) in line
    assert entries(tmp_path / "runs") == []


def test_duplicate_keys_in_a_config(tmp_path):
    cfg = _write(tmp_path, "c.yaml", "train:\n  steps: 3\n  steps: 4\n")
    r = cli("train", *TEST, "--config", cfg, "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "duplicate key 'steps' at line 3 (first at line 2)")
    assert entries(tmp_path / "runs") == []


def test_merge_keys_are_refused():
    from privbench.core.errors import BadInput
    from privbench.core.yamlio import load_yaml

    with pytest.raises(BadInput, match=r"merge keys \(<<\)"):
        load_yaml("a: 1\n<<: {a: 2}\n", "x")


@pytest.mark.parametrize("literal", ["1" * 5000, "-" + "9" * 30, "0x" + "f" * 17, "9223372036854775808"],
                         ids=["5000-digits", "30-digits", "hex-2**68", "2**63"])
def test_huge_integers(tmp_path, literal):
    cfg = _write(tmp_path, "c.yaml", f"train: {{steps: {literal}}}\n")
    r = cli("train", *TEST, "--config", cfg, "--runs-dir", tmp_path / "runs")
    line = assert_one_line(r, 2, "9223372036854775807 (2**63 - 1)")
    assert str(cfg) in line and "steps: integer" in line and "line 1" in line
    assert entries(tmp_path / "runs") == []


def test_huge_integer_in_a_suite_seed(tmp_path):
    suite = _write(tmp_path, "s.yaml", SUITE + f"seeds: [{'7' * 5000}]\nmethods: {{centralized: {{}}}}\n")
    r = cli("bench", "--suite", suite, "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "integers are limited to magnitude 9223372036854775807")
    assert entries(tmp_path / "runs") == []


def test_int64_extremes_still_load():
    from privbench.core.yamlio import MAX_INT, load_yaml

    assert load_yaml(f"a: {MAX_INT}\nb: -{MAX_INT}\nc: 0x10\n", "x") == {"a": MAX_INT, "b": -MAX_INT, "c": 16}
