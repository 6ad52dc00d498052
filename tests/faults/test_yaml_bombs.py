"""YAML anchors and aliases (the "billion laughs" bomb) are refused in every YAML privbench reads from
users — ``--config``, suites, gates, a run's ``config.yaml``, ``--set`` list values — with exit 2 and one line,
before anything is expanded or written."""
from __future__ import annotations

import pytest
from fault_helpers import TEST, assert_one_line, cli, entries


def bomb(levels: int = 9, key: str = "attack", field: str = "sweep") -> str:
    """A document whose last alias expands to 9**levels strings (levels=9: 387 million) inside ``key.field``."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]")
    lines.append(f"{key}: {{{field}: *l{levels - 1}}}")
    return "\n".join(lines) + "\n"


def test_the_loader_refuses_anchors_aliases_and_depth():
    from privbench.core.errors import BadInput
    from privbench.core.yamlio import MAX_DEPTH, dump_yaml, load_yaml

    text = bomb()
    assert len(text) < 700
    with pytest.raises(BadInput, match="anchors"):
        load_yaml(text, "x")
    with pytest.raises(BadInput, match=r"aliases \(\*a\)"):
        load_yaml("a: [1, *a]", "x")
    with pytest.raises(BadInput, match="nested deeper"):
        load_yaml("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "x")
    with pytest.raises(BadInput, match="constructor"):
        load_yaml("!!python/object/apply:os.system [echo pwned]", "x")
    shared = [1, 2]
    text = dump_yaml({"a": shared, "b": shared})  # our own files never contain anchors
    assert "&" not in text and load_yaml(text, "x") == {"a": [1, 2], "b": [1, 2]}


def test_config_bomb(tmp_path):
    cfg = tmp_path / "bomb.yaml"
    cfg.write_text(bomb())
    r = cli("train", *TEST, "--config", cfg, "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "anchors")
    assert entries(tmp_path / "runs") == []


def test_set_list_bomb(tmp_path):
    r = cli("train", *TEST, "--set", "model.block_out_channels=[&a [8], *a]", "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "model.block_out_channels")
    assert entries(tmp_path / "runs") == []


def test_suite_bomb(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\nmethods: {centralized: {}}\n" + bomb(key="set", field="x"))
    r = cli("bench", "--suite", suite, "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "anchors")
    assert entries(tmp_path / "runs") == []


def test_gates_bomb(tmp_path, pristine):
    gates = tmp_path / "g.yaml"
    gates.write_text(bomb(key="gates_x", field="y") + "gates: [{method: centralized, target: model, attack: loss, "
                                                       "metric: auc, max: 1.0}]\n")
    r = cli("check", "--gates", gates, pristine[1])
    assert_one_line(r, 2, "anchors")


def test_bomb_in_a_run_config(store):
    """A run's config.yaml is read back (load_target, a garbled run): a bomb there is refused too."""
    from privbench.core.errors import BadInput
    from privbench.runs.train import load_target

    runs, run_dir, _ = store
    (run_dir / "config.yaml").write_text(bomb(key="model", field="attention_levels"))
    with pytest.raises(BadInput, match="anchors"):
        load_target(run_dir)
