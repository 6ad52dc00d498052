"""Per-client FID in the shape of the PFDM paper's Table 1: for client K (default 0), FID on its majority classes,
on its minority classes, and their average, for ``pfdm`` (target ``pipeline:K``), ``local`` (``client:K``),
``feddm`` (``global``) and ``centralized`` (``model``), each over several seeds (mean ± std). No assertions:
whether PFDM beats ``local`` on the minority classes (as the paper reports) is a finding, not a target.

Every method is trained on the same member split and client split of each seed (the splits depend on the seed
only). FIDs use the extractor named in the table (privbench's CNN by default, or ``--inception-weights``);
the client's real reference sets are small on the tiny preset, so absolute values are biased — compare rows.

    python benchmarks/fid_clients.py [--preset tiny] [--seeds 0 1 2] [--n-per-class 20] [--client 0]
                                     [--sampler ddpm|ddim] [--set key=value ...] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PRIVBENCH_PROGRESS", "0")

from privbench.runs import train as api  # noqa: E402
from privbench.core.config import build_config, parse_set_args  # noqa: E402
from privbench.bench.cells import client_fid  # noqa: E402

METHODS = ("pfdm", "local", "feddm", "centralized")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--dataset", default="digits")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--client", type=int, default=0)
    ap.add_argument("--n-per-class", type=int, default=20)
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--sampler", default=None, choices=["ddpm", "ddim"], help="default: sample.sampler")
    ap.add_argument("--inception-weights", default=None,
                    help="FID with torch-fidelity's Inception-v3 from this weights file (default: privbench's CNN)")
    ap.add_argument("--runs-dir", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", default=None, help="also write every per-seed result here")
    ap.add_argument("--heldout", action="store_true",
                    help="also FID of the same samples against held-out non-member records of those classes")
    a = ap.parse_args()
    if a.inception_weights and not Path(a.inception_weights).is_file():
        sys.exit(f"fid_clients: --inception-weights {a.inception_weights}: file not found")  # before any training

    rows: dict[str, list[dict]] = {m: [] for m in a.methods}
    extractor = None
    for seed in a.seeds:
        for method in a.methods:
            cfg = build_config(method, a.dataset, a.preset, seed, parse_set_args(a.sets))
            t = time.time()
            m = api.train(cfg, a.runs_dir, a.device)
            t_train = time.time() - t
            t = time.time()
            r = client_fid(m, client=a.client, n_per_class=a.n_per_class, seed=seed, sampler=a.sampler,
                           inception_weights=a.inception_weights, heldout=a.heldout)
            r.update(method=method, seed=seed, train_s=round(t_train, 1), fid_s=round(time.time() - t, 1))
            extractor = r["extractor"]
            rows[method].append(r)
            print(f"seed {seed} {method:12s} {r['target']:11s} majority {r['majority']:8.3f}  minority "
                  f"{r['minority']:8.3f}  average {r['average']:8.3f}  (train {t_train:.0f}s, fid {r['fid_s']:.0f}s)",
                  file=sys.stderr, flush=True)
            if a.heldout:
                h = r["heldout"]
                print(f"       held-out reference:     majority {h['majority']:8.3f}  minority {h['minority']:8.3f}  "
                      f"average {h['average']:8.3f}", file=sys.stderr, flush=True)

    first = next(iter(rows.values()))[0]
    print(f"\nPer-client FID (lower is better), client {a.client}: majority classes {first['majority_classes']}, "
          f"minority classes {first['minority_classes']}")
    print(f"preset {a.preset}, dataset {a.dataset}, seeds {a.seeds}, {a.n_per_class} generated per class "
          f"(class mix of the client's real records), sampler {first['sampler']}")
    print(f"extractor: {extractor}")
    print(f"real reference sizes (seed {a.seeds[0]}): majority {first['n_real'].get('majority')}, "
          f"minority {first['n_real'].get('minority')}\n")
    def table(get, title):
        print(title)
        print(f"{'method':12s} {'target':11s} {'majority':>16s} {'minority':>16s} {'average':>16s}")
        for method, rs in rows.items():
            cells = []
            for key in ("majority", "minority", "average"):
                v = np.array([get(r)[key] for r in rs if get(r)[key] is not None], dtype=float)
                cells.append(f"{v.mean():7.3f} ± {v.std(ddof=1) if len(v) > 1 else 0:6.3f}")
            print(f"{method:12s} {rs[0]['target']:11s} " + " ".join(f"{c:>16s}" for c in cells))

    table(lambda r: r, "reference: client's own real records of those classes (as the paper's Table 1)")
    if a.heldout:
        ho = first["heldout"]["n_real"]
        print()
        table(lambda r: r["heldout"], f"reference: held-out non-member records of those classes "
                                      f"(majority {ho.get('majority')}, minority {ho.get('minority')} records)")
    print("\nmean ± sample std over seeds. pfdm's pipeline uses client K's local model, which has no DP; only "
          "pfdm's shared model carries the LDP guarantee.")
    if a.json:
        Path(a.json).write_text(json.dumps({m: rs for m, rs in rows.items()}, indent=2, default=str))


if __name__ == "__main__":
    main()
