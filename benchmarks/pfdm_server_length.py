"""How the PFDM shared model's membership leakage changes with its training length.

Trains (or reuses) one ``pfdm`` run, then trains the server model on **that run's uploads** for each length in
``--steps`` (the server entry point ``train_server``, each length from scratch, EMA capped as in the method) and
runs PIA (``attack.t``/``attack.p`` of the config) against each: the oracle AUC with its bootstrap CI and the
calibrated AUC, whose score direction is picked on a calibration half (an AUC well below 0.5 is leakage with the
sign flipped). No assertions — a measurement.

    python benchmarks/pfdm_server_length.py [--preset tiny] [--steps 250 500 1000 2000 4000]
                                            [--set data.n_members=128 --set data.n_nonmembers=128]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PRIVBENCH_PROGRESS", "0")

from privbench.runs import train as api  # noqa: E402
from privbench.attacks.base import AttackEnv  # noqa: E402
from privbench.runs.attack import build_records, make_attack  # noqa: E402
from privbench.core.config import build_config, parse_set_args  # noqa: E402
from privbench.metrics.roc import calibrated_metrics, membership_metrics  # noqa: E402
from privbench.core.seeding import sub_seed
from privbench.models.loop import ema_capped
from privbench.models.methods.pfdm import _TAG_SERVER, train_server  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, nargs="+", default=[250, 500, 1000, 2000, 4000])
    ap.add_argument("--attack", default="pia")
    ap.add_argument("--runs-dir", default=None)
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    cfg = build_config("pfdm", "digits", a.preset, a.seed, parse_set_args(a.sets))
    m = api.train(cfg, a.runs_dir, "cpu")
    up = m.uploads()
    rec = build_records(m)
    labels = rec.labels.numpy() if hasattr(rec.labels, "numpy") else rec.labels
    attack = make_attack(cfg, a.attack)
    print(f"{a.attack} on the pfdm shared model, {len(up.x)} uploads (C={up.clip:g}, t0={up.t0}), "
          f"batch {cfg.train.batch_size}, seed {a.seed}; {rec.n_members} members / {rec.n_nonmembers} non-members")
    print(f"{'steps':>6s} {'epochs':>7s} {'AUC':>6s} {'95% CI':>15s} {'calibrated AUC (dir)':>21s}  train s")
    for steps in a.steps:
        t = time.time()
        model = train_server(up, model=m._server_model(tuple(up.x.shape[1:])),
                             alphas_cumprod=m.ctx.schedule.alphas_cumprod(), tcfg=ema_capped(cfg.train, steps),
                             ckpt_dir=m.ctx.run_dir / "server_length" / str(steps),
                             seed=sub_seed(cfg.seed, _TAG_SERVER), device="cpu", steps=steps)
        t_train = time.time() - t
        tgt = m.make_target("shared", model, clip_sample=False)
        out = attack.run(tgt, rec, AttackEnv(cfg=cfg, method=m, out_dir=None, seed=cfg.seed))
        mm = membership_metrics(out.scores, labels, bootstrap=cfg.attack.bootstrap, seed=cfg.seed)
        cm = calibrated_metrics(out.scores, labels, seed=cfg.seed)
        ci = mm["ci95"]["auc"]
        print(f"{steps:6d} {steps * cfg.train.batch_size / len(up.x):7.0f} {mm['auc']:6.3f} "
              f"[{ci[0]:.3f}, {ci[1]:.3f}] {cm['auc']:14.3f} ({cm['direction']:+d})  {t_train:7.0f}", flush=True)


if __name__ == "__main__":
    main()
