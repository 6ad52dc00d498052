"""Cache per-record membership statistics of the overfit tiny target for the fast set-inference tests.

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/cache_overfit_stats.py [RUNS_DIR] [OUT.npz]

Trains (or loads from RUNS_DIR, default ./runs) the centralized digits target of the tiny-references suite
(128 members / 128 non-members, 1500 steps, seed 0) and writes, for its evaluation records and 512 public records
(the offline reference pool and RMIA's population: outside the split, in no training set), the distances of the
loss (t = 200, 4 fixed draws), pia and sima statistics (lower = member), the dataset indices and the labels, to
OUT (default tests/metrics/data/overfit_tiny_stats.npz).
"""
import sys

import numpy as np

from privbench.attacks.references import fixed_noise_losses
from privbench.attacks.statistics import attack_distance, statistic_attack
from privbench.core.config import build_config, parse_set_args
from privbench.core.threads import configure_threads
from privbench.runs.attack import build_records
from privbench.runs.references import _records, plan_pool
from privbench.runs.store import run_dir_for
from privbench.runs.train import train


def main(runs_dir="runs", out="tests/metrics/data/overfit_tiny_stats.npz"):
    configure_threads(1)
    sets = ["data.n_members=128", "data.n_nonmembers=128", "train.steps=1500"]
    cfg = build_config("centralized", "digits", "tiny", 0, parse_set_args(sets), None)
    run_dir_for(cfg, runs_dir)
    m = train(cfg, runs_dir, "cpu")
    tgt = m.load_target("model")
    rec = build_records(m, "model")
    ctx = m.ctx
    pool, pop = plan_pool(ctx.split, len(ctx.dataset[1]), "offline", cfg.seed, 256)
    pub = _records(ctx, pool + pop)
    arrays = {"eval_labels": rec.labels.numpy().astype(np.int8)}
    for part, recs in (("eval", rec), ("public", pub)):
        arrays[f"{part}_index"] = recs.index.numpy()
        arrays[f"{part}_loss"] = fixed_noise_losses(tgt, recs, 200, 4, 0, 256).mean(1)
        for s in ("pia", "sima"):
            arrays[f"{part}_{s}"] = attack_distance(statistic_attack(s, 256, 1000), tgt, recs, 0)[:, 0]
    np.savez_compressed(out, **arrays)
    print(out, {k: v.shape for k, v in arrays.items()})


if __name__ == "__main__":
    main(*sys.argv[1:])
