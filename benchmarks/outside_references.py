"""The reference-model attacks on a model privbench did not load as its own: the overfit tiny target of
``tiny-references`` exported to diffusers format and attacked only through ``--model``, its reference models trained
by the shipped ``--reference-recipe`` (a diffusers ``UNet2DModel`` and diffusers' ``DDPMScheduler``, not the
target's training code) on public records.

    python benchmarks/outside_references.py --runs-dir runs --out reports/tiny-references-outside

1. ``privbench train`` the ``tiny-references`` target (centralized, tiny preset, 128/128 members/non-members,
   1500 steps, seed 0 — a cache hit when ``make bench`` already trained it);
2. ``privbench export`` it to ``<runs-dir>/outside-tiny/model`` (a diffusers ``UNet2DModel`` folder with its
   scheduler config; from here on privbench knows it only as an outside model);
3. writes the evaluation split (``split.npz``: the run's members and non-members as dataset indices), the
   reference data (``reference.npy``: dataset indices of the records ``tiny-references``' native offline references
   draw from, so both calibrate on the same public records) and the recipe (``recipe.yaml``: the shipped
   ``UNet2DModel`` recipe with ``architecture: target`` — the exported model's own diffusers config, fresh weights —
   at the target's steps, batch and learning rate, trained by the recipe's plain Adam loop with diffusers'
   ``DDPMScheduler``: without the target's AdamW, EMA, warm-up and gradient clipping);
4. ``privbench bench`` on a suite with one ``external`` entry (``reference_recipe``/``reference_data``) and
   ``privbench report`` into ``--out``.

The recipe's ``n_reference`` is the native suite's (8). Every reference is offline: the references never see an
evaluation record. Compare with ``reports/tiny-references/`` (the same weights and records, references trained
with the target's own code).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: the tiny-references target (privbench/bench/suites/tiny-references.yaml)
TARGET_SETS = ("data.n_members=128", "data.n_nonmembers=128", "train.steps=1500")
N_REFERENCE = 8
ATTACKS = ["loss", "pia", "sima", "lira", "lira@sima", "rmia", "rmia@sima", "gsa", "qmia", "qmia@sima"]


def privbench(*args: str) -> str:
    """Run the CLI (this checkout) and return its stdout; stop on failure."""
    cmd = [sys.executable, "-m", "privbench", *args]
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[2:])} exited {proc.returncode}")
    return proc.stdout


def reference_indices(run_dir: Path, n_eval: int) -> np.ndarray:
    """The native offline pool plus RMIA-population records of the run's seed, enough that the recipe's
    quarter held out as population leaves as many records to draw halves from as the native pool has."""
    from privbench.core.config import build_config
    from privbench.data.base import load_dataset
    from privbench.data.splits import MemberSplit, reference_pool

    cfg = build_config("centralized", preset="tiny")
    _, labels = load_dataset(cfg.dataset, None)
    split = MemberSplit.from_json((run_dir / "split.json").read_text())
    n_population = -(-n_eval // 3)  # n_eval + n_population records, a quarter held out → n_eval remain
    pool, population = reference_pool(split, len(labels), "offline", split.seed, n_population)
    return np.asarray(sorted(pool + population), dtype=np.int64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs-dir", default="runs")
    ap.add_argument("--out", default="reports/tiny-references-outside")
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args()
    runs = Path(a.runs_dir).resolve()
    work = runs / "outside-tiny"
    work.mkdir(parents=True, exist_ok=True)

    sets = [x for s in TARGET_SETS for x in ("--set", s)]
    trained = json.loads(privbench("train", "--method", "centralized", "--preset", "tiny", *sets,
                                   "--runs-dir", str(runs), "--json"))
    run_dir = Path(trained["run_dir"])
    model = work / "model"
    if not (model / "privbench_export.json").exists():
        privbench("export", str(run_dir), "--out", str(model))

    split = json.loads((run_dir / "split.json").read_text())
    np.savez(work / "split.npz", mia_train_idxs=np.asarray(split["members"], dtype=np.int64),
             mia_eval_idxs=np.asarray(split["nonmembers"], dtype=np.int64))
    ref = reference_indices(run_dir, len(split["members"]) + len(split["nonmembers"]))
    np.save(work / "reference.npy", ref)
    tcfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    recipe = {"model": "UNet2DModel", "architecture": "target", "steps": tcfg["train"]["steps"],
              "batch": tcfg["train"]["batch_size"], "lr": tcfg["train"]["lr"]}
    (work / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    suite = {"name": "tiny-references-outside",
             "description": "reference-model attacks on the exported tiny-references target as an outside model, "
                            f"{N_REFERENCE} references from the shipped UNet2DModel recipe",
             "preset": "tiny", "device": "cpu", "datasets": ["digits"], "seeds": [0],
             "set": {"attack.n_reference": N_REFERENCE}, "fid": False, "samples": False, "methods": {},
             "external": {"outside-tiny": {"model": "model", "split": "split.npz", "dataset": "digits",
                                           "reference_recipe": "recipe.yaml", "reference_data": "reference.npy",
                                           "attacks": ATTACKS}}}
    (work / "suite.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    print(f"outside model {model.relative_to(runs)}: {len(split['members'])} members, "
          f"{len(split['nonmembers'])} non-members; reference data {len(ref)} records; recipe {recipe}")

    bench_dir = runs / "bench-tiny-references-outside"
    sys.stdout.write(privbench("bench", "--suite", str(work / "suite.yaml"), "--runs-dir", str(runs),
                               "--out", str(bench_dir), "--jobs", str(a.jobs)))
    out = ROOT / a.out if not Path(a.out).is_absolute() else Path(a.out)
    # table* floats that fit a two-column paper, as make bench renders every committed report
    sys.stdout.write(privbench("report", str(bench_dir), "--out", str(out), "--latex-style", "twocolumn"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
