"""Hand-made results for the report/audit/gate tests (imported by test modules; tests/reports is on sys.path)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from privbench.runs.result_schema import AttackResult


def write_result(folder: Path, scores, labels, *, method="fake", target="model", attack="pia", privacy=None,
                 kind="membership", seed=0, metrics=None, preset="test") -> Path:
    """A hand-made result.json + scores.npz (docs/cli.md §5 schema) in ``folder``; ``metrics`` replace the
    defaults key by key."""
    folder.mkdir(parents=True, exist_ok=True)
    scores, labels = np.asarray(scores, float), np.asarray(labels, int)
    given = metrics or {}
    if kind == "membership":
        np.savez(folder / "scores.npz", scores=scores, labels=labels, index=np.arange(len(scores)))
        metrics = {"auc": 0.5, "asr": 0.5, "tpr_at_1pct_fpr": 0.0, "tpr_at_0_1pct_fpr": 0.0,
                   "ci95": {"auc": [0.4, 0.6]}}
    else:
        np.savez(folder / "scores.npz", ratio=scores)
        metrics = {"memorized_fraction": 0.0, "n_generated": len(scores)}
    metrics = {**metrics, **given}
    res = AttackResult(method=method, target=target, attack=attack, dataset="digits", preset=preset, seed=seed,
                       run_dir=str(folder), n_members=int(labels.sum()), n_nonmembers=int((labels == 0).sum()),
                       metrics=metrics, privacy=privacy, scores_path=str(folder / "scores.npz"), kind=kind)
    (folder / "result.json").write_text(json.dumps(res.to_json()))
    return folder / "result.json"
