"""--reference-recipe / --reference-data: lira, rmia and qmia on a model privbench did not train."""
from __future__ import annotations

import json

import numpy as np
from ext_helpers import cli, files_under, write_npz


def _reference_data(root):
    from privbench import load_dataset

    x, y = load_dataset("digits")
    perm = np.random.default_rng(0).permutation(len(y))  # digits_split(32, 32, seed=0) used perm[:64]
    idx = perm[64:128]
    return write_npz(root / "reference.npz", x[idx], y[idx])


def test_lira_and_qmia_on_an_outside_model_with_a_shipped_yaml_recipe(memorized, tmp_path, monkeypatch):
    from privbench.runs import external, external_references

    loads = []  # the model and each reference loaded once for both attacks, the records checked once
    for mod, fn in ((external, "load_external"), (external_references, "load_external"), (external, "split_shift")):
        real = getattr(mod, fn)
        monkeypatch.setattr(mod, fn, lambda *a, _r=real, _n=fn, **kw: loads.append(_n) or _r(*a, **kw))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model: UNet2DModel\nsteps: 60\nlr: 0.002\nbatch: 32\nblock_out_channels: [16, 32]\n")
    data = _reference_data(tmp_path)
    args = ["attack", "--model", memorized["pipeline"], "--members", memorized["members"], "--nonmembers",
            memorized["nonmembers"], "--attack", "lira,qmia", "--reference-recipe", recipe,
            "--reference-data", data, "--set", "attack.n_reference=2", "--runs-dir", tmp_path / "runs",
            "--device", "cpu", "--json"]
    code, out, err = cli(*args)
    assert code == 0, err
    assert "training reference model" in err                              # said while the references train
    assert sorted(loads) == ["load_external"] * 3 + ["split_shift"]
    lira, qmia = json.loads(out)["results"]
    assert lira["label"] == "lira" and lira["metrics"]["auc"] > 0.8   # the memorizing model leaks
    refs = lira["provenance"]["references"]
    assert refs["recipe"]["kind"] == "yaml" and len(refs["recipe"]["sha256"]) == 64 and refs["n_reference"] == 2
    assert any("NOT with the target's own training code" in n for n in lira["notes"])
    assert qmia["figures"]["public_records"] == 64 and qmia["provenance"]["references"]["n_reference"] == 0
    trained = sorted(p.name for p in (tmp_path / "runs").glob("external-references-*/ref-*"))
    assert trained == ["ref-0", "ref-1"]
    # a rerun trains nothing and reuses the results
    code, out, err = cli(*args)
    assert code == 0 and "training reference model" not in err
    # a moved run store still finds its references (train_done.json names the folder relative to the reference)
    (tmp_path / "runs").rename(tmp_path / "moved")
    moved = [a if a != tmp_path / "runs" else tmp_path / "moved" for a in args]
    moved[moved.index("lira,qmia")] = "rmia"
    code, out, err = cli(*moved)
    assert code == 0, err
    assert "training reference model" not in err and json.loads(out)["provenance"]["references"]["n_reference"] == 2


def test_reference_attacks_without_a_recipe_or_with_overlapping_data_are_refused(memorized, tmp_path):
    runs = tmp_path / "runs"
    base = ["attack", "--model", memorized["pipeline"], "--members", memorized["members"], "--nonmembers",
            memorized["nonmembers"], "--runs-dir", runs, "--device", "cpu"]
    code, _, err = cli(*base, "--attack", "lira")
    assert code == 2 and "--reference-recipe" in err
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: UNet2DConditionModel\n")
    code, _, err = cli(*base, "--attack", "lira@online", "--reference-recipe", recipe, "--reference-data",
                       memorized["members"])  # a variant label on --model is looked up by its attack's name
    assert code == 2 and "evaluation records" in err, err
    code, _, err = cli(*base, "--attack", "lira", "--reference-recipe", recipe, "--reference-data",
                       memorized["members"])
    assert code == 2 and "evaluation records" in err
    code, _, err = cli(*base, "--attack", "lira", "--reference-recipe", recipe, "--reference-data",
                       _reference_data(tmp_path))
    refusal = [ln for ln in err.strip().splitlines() if not ln.startswith("privbench: warning:")]  # the split check's
    assert code == 2 and "UNet2DConditionModel" in err and len(refusal) == 1
    assert not runs.exists() or not files_under(runs)


def test_recipe_files_are_checked_and_a_python_recipe_is_imported_only_when_named(tmp_path):
    import pytest

    from privbench.core.errors import BadInput
    from privbench.runs.external_references import load_recipe

    good = tmp_path / "mine.py"
    good.write_text("CALLS = []\ndef train(records, seed):\n    CALLS.append(seed)\n    return 'folder'\n")
    r = load_recipe(good)
    assert r["kind"] == "python" and r["train"]({"images": None, "labels": None}, 3) == "folder"
    assert len(r["sha256"]) == 64
    (tmp_path / "none.py").write_text("x = 1\n")
    with pytest.raises(BadInput, match="defines no train"):
        load_recipe(tmp_path / "none.py")
    (tmp_path / "boom.py").write_text("raise RuntimeError('nope')\n")
    with pytest.raises(BadInput, match="importing it failed"):
        load_recipe(tmp_path / "boom.py")
    for text, msg in [("model: UNet2DModel\nsteps: 0\n", "steps=0"), ("model: UNet2DModel\nlr: 2\n", "lr=2"),
                      ("model: UNet2DModel\nsteppes: 3\n", "unknown keys"), ("[1, 2]\n", "expected a mapping"),
                      ("model: UNet2DModel\narchitecture: mine\n", "architecture='mine'"),
                      ("model: UNet2DModel\narchitecture: target\nlayers_per_block: 2\n", "drop block_out_channels")]:
        (tmp_path / "r.yaml").write_text(text)
        with pytest.raises(BadInput, match=msg):
            load_recipe(tmp_path / "r.yaml")
    (tmp_path / "r.yaml").write_text("model: UNet2DModel\nlayers_per_block: 1\nsteps: 5\n")
    assert load_recipe(tmp_path / "r.yaml")["spec"]["layers_per_block"] == 1


def test_a_suites_external_target_takes_a_reference_recipe(memorized, tmp_path):
    """``external: {name: {..., reference_recipe, reference_data}}`` (paths relative to the suite) runs lira on an
    outside model in a bench, into the run directory ``attack --model --reference-recipe`` uses (a cache hit)."""
    import yaml

    (tmp_path / "recipe.yaml").write_text("model: UNet2DModel\nsteps: 60\nlr: 0.002\nbatch: 32\n"
                                          "block_out_channels: [16, 32]\n")
    data = _reference_data(tmp_path)
    suite = {"name": "ext-refs", "preset": "tiny", "seeds": [0], "fid": False, "samples": False,
             "set": {"attack.n_reference": 2}, "methods": {},
             "external": {"mine": {"model": str(memorized["pipeline"]), "members": str(memorized["members"]),
                                   "nonmembers": str(memorized["nonmembers"]), "attacks": ["lira"],
                                   "reference_recipe": "recipe.yaml", "reference_data": data.name}}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(suite))
    code, out, err = cli("bench", "--suite", tmp_path / "s.yaml", "--runs-dir", tmp_path / "runs", "--device", "cpu",
                         "--out", tmp_path / "bench", "--json")
    assert code == 0, err
    (cell,) = json.loads(out)["cells"]
    assert cell["status"] == "done" and cell["summary"]["auc"] > 0.8, cell
    code, out, err = cli("attack", "--model", memorized["pipeline"], "--members", memorized["members"],
                         "--nonmembers", memorized["nonmembers"], "--attack", "lira", "--reference-recipe",
                         tmp_path / "recipe.yaml", "--reference-data", data, "--set", "attack.n_reference=2",
                         "--target", "mine", "--runs-dir", tmp_path / "runs", "--device", "cpu", "--json")
    assert code == 0 and "attack cache hit" in err, err
    suite["external"]["mine"]["reference_recipe"] = "missing.yaml"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(suite))
    code, _, err = cli("bench", "--suite", tmp_path / "bad.yaml", "--runs-dir", tmp_path / "r2")
    assert code == 2 and "reference_recipe" in err and "Traceback" not in err


def test_reference_data_as_dataset_indices_reads_the_targets_dataset(memorized, tmp_path):
    """``--reference-data idx.npy`` (dataset indices, as ``--split`` gives the evaluation records) is read from the
    target's ``--dataset``: the same records as the equal ``.npz``, so the same qmia scores; without a dataset, one
    line and exit 2."""
    perm = np.random.default_rng(0).permutation(1797)      # digits_split(32, 32, seed=0): perm[:32], perm[32:64]
    np.savez(tmp_path / "split.npz", mia_train_idxs=perm[:32], mia_eval_idxs=perm[32:64])
    np.save(tmp_path / "reference.npy", perm[64:128])
    base = ["attack", "--model", memorized["pipeline"], "--attack", "qmia", "--runs-dir", tmp_path / "runs",
            "--device", "cpu", "--json"]
    split = ["--split", tmp_path / "split.npz", "--dataset", "digits"]
    code, out, err = cli(*base, *split, "--reference-data", tmp_path / "reference.npy")
    assert code == 0, err
    by_index = json.loads(out)
    code, out, err = cli(*base, *split, "--reference-data", _reference_data(tmp_path))
    assert code == 0, err
    by_npz = json.loads(out)
    assert by_index["figures"]["public_records"] == by_npz["figures"]["public_records"] == 64
    assert by_index["metrics"]["auc"] == by_npz["metrics"]["auc"]
    code, _, err = cli(*base, "--members", memorized["members"], "--nonmembers", memorized["nonmembers"],
                       "--reference-data", tmp_path / "reference.npy")
    assert code == 2 and "--dataset" in err and "Traceback" not in err


def test_gsa_on_an_outside_model_needs_references_of_its_architecture(memorized, tmp_path):
    """gsa's classifier reads one gradient norm per parameter tensor: references of another architecture are refused
    in one line (exit 2); ``architecture: target`` trains the outside model's own UNet2DModel config, and gsa runs."""
    data = _reference_data(tmp_path)
    base = ["attack", "--model", memorized["pipeline"], "--members", memorized["members"], "--nonmembers",
            memorized["nonmembers"], "--attack", "gsa", "--reference-data", data, "--set", "attack.n_reference=2",
            "--runs-dir", tmp_path / "runs", "--device", "cpu", "--json"]
    other = tmp_path / "other.yaml"
    other.write_text("model: UNet2DModel\nsteps: 20\nlr: 0.002\nbatch: 32\nblock_out_channels: [8, 16]\n")
    code, _, err = cli(*base, "--reference-recipe", other)
    assert code == 2 and "another architecture" in err and "Traceback" not in err
    same = tmp_path / "same.yaml"
    same.write_text("model: UNet2DModel\narchitecture: target\nsteps: 60\nlr: 0.002\nbatch: 32\n")
    code, out, err = cli(*base, "--reference-recipe", same)
    assert code == 0, err
    res = json.loads(out)
    assert res["label"] == "gsa" and res["provenance"]["references"]["recipe"]["spec"]["architecture"] == "target"
    assert res["figures"]["n_features"] == len(list(
        __import__("diffusers").UNet2DModel.from_pretrained(str(memorized["pipeline"] / "unet")).parameters()))
