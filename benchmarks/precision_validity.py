"""Does a change of training precision keep a suite's numbers valid? Each metric of the runs trained one way (e.g.
``train.precision=bf16``) beside the 95 % t-interval over seeds of the same cells trained the other way (fp32).

Reads two report folders written by ``privbench report`` over benches with the same cells and seeds
(``seeds.csv``: attack metrics per seed; ``fid.csv``: FID / KID per seed) and prints, per (method, target, metric):
the reference mean [95 % t-interval over seeds], the candidate's mean [its interval], whether the candidate's mean
lies inside the reference interval, and the paired per-seed difference with its interval (the seeds share their
data split, so the pairing is by seed). Exits 1 when a candidate mean falls outside the reference interval.

usage: python benchmarks/precision_validity.py REFERENCE_REPORT CANDIDATE_REPORT
       e.g. reports/seeds-mnist-quick reports/precision-mnist-quick
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from privbench.reports.claim_rule import summarize

ATTACK_METRICS = ("auc", "asr", "tpr_1pct")
FID_METRICS = ("majority", "minority", "average", "majority_kid", "minority_kid", "average_kid",
               "heldout_majority", "heldout_minority", "heldout_average")


def t_interval(values) -> tuple[float, float, float]:
    """(mean, low, high): privbench's 95 % t-interval of the mean over seeds (the claims table's rule; nan bounds
    for fewer than two)."""
    side = summarize(list(values))
    if side.n_seeds < 2:
        return side.mean, float("nan"), float("nan")
    return side.mean, side.lo, side.hi


def per_seed(report: Path) -> pd.DataFrame:
    """Long table: method, target, metric, seed, value."""
    rows = []
    seeds = pd.read_csv(report / "seeds.csv")
    for _, r in seeds.iterrows():
        for s in str(r["seeds"]).split():
            for m in ATTACK_METRICS:
                col = f"{m}_seed{s}"
                if col in r and pd.notna(r[col]):
                    rows.append((r["method"], r["target"], f"{r['attack']} {m}", int(s), float(r[col])))
    fid = report / "fid.csv"
    if fid.exists():
        for _, r in pd.read_csv(fid).iterrows():
            for m in FID_METRICS:
                if m in r and pd.notna(r[m]):
                    rows.append((r["method"], r["target"], f"fid {m}" if "kid" not in m else m, int(r["seed"]),
                                 float(r[m])))
    return pd.DataFrame(rows, columns=["method", "target", "metric", "seed", "value"])


def compare(reference: Path, candidate: Path) -> tuple[pd.DataFrame, int]:
    ref, cand = per_seed(reference), per_seed(candidate)
    key = ["method", "target", "metric"]
    out, outside = [], 0
    for k, c in cand.groupby(key):
        r = ref[(ref[key] == pd.Series(k, index=key)).all(axis=1)]
        if r.empty:
            continue
        rm, rlo, rhi = t_interval(r["value"])
        cm, clo, chi = t_interval(c["value"])
        paired = r.merge(c, on="seed", suffixes=("_ref", "_cand"))
        dm, dlo, dhi = t_interval(paired["value_cand"] - paired["value_ref"])
        inside = bool(rlo <= cm <= rhi)
        outside += not inside
        out.append({"method": k[0], "target": k[1], "metric": k[2], "n_seeds": len(paired),
                    "reference": f"{rm:.4g} [{rlo:.4g}, {rhi:.4g}]", "candidate": f"{cm:.4g} [{clo:.4g}, {chi:.4g}]",
                    "inside": "yes" if inside else "NO",
                    "paired_diff": f"{dm:+.4g} [{dlo:+.4g}, {dhi:+.4g}]"})
    return pd.DataFrame(out), outside


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write(__doc__.split("usage:")[1])
        return 2
    reference, candidate = (Path(a) for a in argv)
    for d in (reference, candidate):
        if not (d / "seeds.csv").exists():
            sys.stderr.write(f"precision_validity: {d}/seeds.csv not found (a `privbench report` folder?)\n")
            return 2
    table, outside = compare(reference, candidate)
    if table.empty:
        sys.stderr.write("precision_validity: the two reports share no (method, target, metric)\n")
        return 2
    print(f"reference: {reference}   candidate: {candidate}   (mean [95 % t-interval over seeds])")
    print(table.to_string(index=False))
    print(f"candidate mean inside the reference interval: {len(table) - outside} of {len(table)}")
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
