"""The cache never trusts a side file unchecked. ``train_done.json`` records the SHA-256 of every training
artefact and ``result.json`` that of its ``scores.npz`` and of the training artefacts it was computed from; a
missing or damaged artefact means "retrain / re-run" (said on stderr), never a cache hit, and what is intact is
reused. Each test damages a private copy of one trained run (with one loss attack) and checks that the outcome
equals the undamaged run's."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from fault_helpers import TEST, cli

ATTACK = ("attack", *TEST, "--attack", "loss")


def _bytes(path):
    return path.read_bytes()


def _arrays(path):
    with np.load(path) as z:
        return {k: z[k].copy() for k in z.files}


def _same_arrays(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_garbled_config_yaml_is_rewritten_not_ignored(store, pristine):
    runs, run_dir, _ = store
    weights = run_dir / "checkpoints" / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    (run_dir / "config.yaml").write_text("{{{ garbled")
    r = cli("train", *TEST, "--runs-dir", runs)
    assert r.code == 0, r
    assert "config.yaml missing or damaged; retraining" in r.err and "cache hit" not in r.err
    assert _bytes(run_dir / "config.yaml") == _bytes(pristine[1] / "config.yaml")
    assert weights.stat().st_mtime_ns == mtime, "an intact checkpoint is reused, not retrained"
    assert "cache hit" in cli("train", *TEST, "--runs-dir", runs).err


def test_swapped_split_does_not_invert_the_result(store, pristine):
    """An attack on a run whose split.json has members and non-members swapped does not report 1 − AUC."""
    runs, run_dir, out_dir = store
    shutil.rmtree(out_dir)  # an attack that is not cached reads the split
    split = json.loads((run_dir / "split.json").read_text())
    split["members"], split["nonmembers"] = split["nonmembers"], split["members"]
    (run_dir / "split.json").write_text(json.dumps(split))
    r = cli(*ATTACK, "--runs-dir", runs, "--json")
    assert r.code == 0, r
    assert "split.json missing or damaged" in r.err
    want = json.loads((pristine[2] / "result.json").read_text())["metrics"]
    assert json.loads(r.out)["metrics"] == want
    assert _bytes(run_dir / "split.json") == _bytes(pristine[1] / "split.json")


def test_garbled_split_of_an_unfinished_run_is_rewritten(store, pristine):
    runs, run_dir, _ = store
    (run_dir / "train_done.json").unlink()
    (run_dir / "split.json").write_text("not json")
    r = cli("train", *TEST, "--runs-dir", runs)
    assert r.code == 0, r
    assert "split.json: damaged" in r.err
    assert _bytes(run_dir / "split.json") == _bytes(pristine[1] / "split.json")


def test_truncated_scores_are_not_republished(store, pristine):
    runs, run_dir, out_dir = store
    scores = out_dir / "scores.npz"
    scores.write_bytes(_bytes(scores)[:100])
    r = cli(*ATTACK, "--runs-dir", runs)
    assert r.code == 0, r
    assert "scores.npz missing or damaged; re-running the attack" in r.err and "attack cache hit" not in r.err
    want = _arrays(pristine[2] / "scores.npz")
    assert _same_arrays(_arrays(scores), want)
    assert _same_arrays(_arrays(run_dir / "scores.npz"), want)  # the published copy


def test_unreadable_result_json_is_re_run(store, pristine):
    runs, run_dir, out_dir = store
    (out_dir / "result.json").write_text('{"metrics": ')
    r = cli(*ATTACK, "--runs-dir", runs, "--json")
    assert r.code == 0 and "re-running the attack" in r.err, r
    assert json.loads(r.out)["metrics"] == json.loads((pristine[2] / "result.json").read_text())["metrics"]


def test_deleted_weights_mean_retrain_not_a_cache_hit(store, pristine):
    """A run whose weights are gone is retrained: `train` is no cache hit, so the attacks do not fail."""
    runs, run_dir, _ = store
    weights = run_dir / "checkpoints" / "model.safetensors"
    weights.unlink()
    r = cli("train", *TEST, "--runs-dir", runs)
    assert r.code == 0, r
    assert "checkpoints/model.safetensors missing or damaged; retraining" in r.err and "cache hit" not in r.err
    assert _bytes(weights) == _bytes(pristine[1] / "checkpoints" / "model.safetensors")
    r = cli(*ATTACK, "--runs-dir", runs)
    assert r.code == 0 and "attack cache hit" in r.err, r  # same artefacts as before: the result still holds


@pytest.mark.parametrize("damage", ["garbage", "truncate", "step", "deep"])
def test_damaged_checkpoint_manifest_retrains(store, pristine, damage):
    runs, run_dir, _ = store
    state = run_dir / "checkpoints" / "model.state.json"
    if damage == "garbage":
        state.write_text("{")
    elif damage == "deep":  # nested past what json parses
        state.write_text("[" * 100_000 + "]" * 100_000)
    elif damage == "truncate":
        state.write_bytes(_bytes(state)[:20])
    else:
        state.write_text(state.read_text().replace('"step": 20', '"step": "twenty"'))
    r = cli("train", *TEST, "--runs-dir", runs)
    assert r.code == 0 and "Traceback" not in r.err, r
    assert "model.state.json missing or damaged; retraining" in r.err
    assert _bytes(run_dir / "checkpoints" / "model.safetensors") == \
        _bytes(pristine[1] / "checkpoints" / "model.safetensors")


def test_corrupt_manifest_of_an_unfinished_run_retrains_that_checkpoint(store, pristine):
    runs, run_dir, _ = store
    (run_dir / "train_done.json").unlink()
    (run_dir / "checkpoints" / "model.state.json").write_text("[]")
    r = cli("train", *TEST, "--runs-dir", runs)
    assert r.code == 0, r
    assert "removing checkpoint model and retraining it" in r.err
    assert _bytes(run_dir / "checkpoints" / "model.safetensors") == \
        _bytes(pristine[1] / "checkpoints" / "model.safetensors")


def test_a_record_without_hashes_is_verified_and_completed(store):
    """A train_done.json without hashes: the run is checked (intact checkpoints are kept) and the
    hashes are recorded; the next call is a cache hit."""
    runs, run_dir, _ = store
    (run_dir / "train_done.json").write_text('{"seconds": 1.0, "device": "cpu"}')
    weights = run_dir / "checkpoints" / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    r = cli("train", *TEST, "--runs-dir", runs)
    assert r.code == 0 and "no content hashes are recorded" in r.err, r
    assert weights.stat().st_mtime_ns == mtime
    assert "checkpoints/model.safetensors" in json.loads((run_dir / "train_done.json").read_text())["sha256"]
    assert "cache hit" in cli("train", *TEST, "--runs-dir", runs).err


def test_a_bench_cell_with_a_damaged_result_is_re_run(store, pristine):
    from privbench.bench.cells import run_attack_cell
    from privbench.bench.plan import Cell
    from privbench.core.config import build_config

    runs, run_dir, out_dir = store
    scores = out_dir / "scores.npz"
    scores.write_bytes(_bytes(scores)[:50])
    c = Cell("attack", "centralized", "digits", 0, "model", attack="loss",
             cfg=build_config("centralized", "digits", "test", 0), run_dir=str(run_dir),
             result_path=str(out_dir / "result.json"))
    run_attack_cell(c, runs, "cpu")
    assert c.status == "done" and c.reason != "cached"
    assert _same_arrays(_arrays(scores), _arrays(pristine[2] / "scores.npz"))
    run_attack_cell(c, runs, "cpu")
    assert c.reason == "cached"


@pytest.mark.parametrize("edit", [
    lambda s: s["members"].__setitem__(-1, -1),                           # would name the dataset's last record
    lambda s: s["members"].__setitem__(-1, 10 ** 12),
    lambda s: s["nonmembers"].__setitem__(0, s["members"][0]),           # one record on both sides
    lambda s: s["members"].__setitem__(-1, s["members"][0]),
    lambda s: s["members"].__setitem__(0, "3"),
    lambda s: s.update(members=s["nonmembers"], nonmembers=s["members"]),  # would invert the result
])
def test_an_edited_split_with_its_hash_rewritten_is_refused(store, edit):
    """A split.json edited and re-hashed in train_done.json (so it passes the hash check) is still refused: a split
    is a function of the config and seed, and the stored one must be it."""
    import hashlib

    runs, run_dir, out_dir = store
    shutil.rmtree(out_dir)
    split = json.loads((run_dir / "split.json").read_text())
    edit(split)
    (run_dir / "split.json").write_text(json.dumps(split))
    done = json.loads((run_dir / "train_done.json").read_text())
    done["sha256"]["split.json"] = hashlib.sha256((run_dir / "split.json").read_bytes()).hexdigest()
    (run_dir / "train_done.json").write_text(json.dumps(done))
    r = cli(*ATTACK, "--runs-dir", runs)
    assert r.code == 2 and "split.json: differs from the split this config and seed give" in r.err, r
    assert "Traceback" not in r.err
    assert not out_dir.exists()
