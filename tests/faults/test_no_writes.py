"""Refused work writes nothing, and failed work leaves no folder behind. Everything that can be bad input
is validated before a run directory, a lock or an attack folder is created; an attack that fails while running
removes the attack folder it created (its lock lives in the run directory, not in that folder)."""
from __future__ import annotations

from fault_helpers import TEST, assert_one_line, cli, entries, snapshot


def test_bad_resolution_leaves_no_run_folder(tmp_path):
    """Exit 2 with no config.yaml, split.json, log.txt or .train.lock written."""
    r = cli("train", *TEST, "--set", "data.resolution=5", "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "divisible")
    assert entries(tmp_path / "runs") == []


def test_refused_attack_on_an_untrained_config_writes_nothing(tmp_path):
    for extra in (["--attack", "nosuch"], ["--attack", "loss", "--set", "attack.t=5000"],
                  ["--attack", "loss", "--target", "client:0"]):
        r = cli("attack", *TEST, *extra, "--runs-dir", tmp_path / "runs")
        assert_one_line(r, 2)
    assert entries(tmp_path / "runs") == []


def test_refused_attack_on_a_trained_run_changes_nothing(store):
    runs, run_dir, _ = store
    before = snapshot(runs)
    r = cli("attack", *TEST, "--attack", "loss", "--set", "attack.t=5000", "--runs-dir", runs)
    assert_one_line(r, 2, "attack.t=5000")
    assert snapshot(runs) == before


def test_a_failed_attack_leaves_no_folder(store, monkeypatch):
    """No empty attack folder (nor its lock) stays behind."""
    from privbench.attacks.loss import LossAttack
    from privbench.core.errors import WorkFailed

    runs, run_dir, _ = store
    before = set(entries(run_dir / "attacks"))

    def fail(*_args, **_kw):  # replaces LossAttack.run
        raise WorkFailed("the attack diverged")

    monkeypatch.setattr(LossAttack, "run", fail)
    r = cli("attack", *TEST, "--attack", "loss", "--set", "attack.t=150", "--runs-dir", runs)
    assert_one_line(r, 3, "the attack diverged", notes=True)
    assert set(entries(run_dir / "attacks")) == before
