"""The Python API example of docs/external-models.md runs, and privbench.attack agrees with the CLI runner."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

DOC = Path(__file__).resolve().parents[2] / "docs" / "external-models.md"


def test_docs_example_runs(capsys):
    text = DOC.read_text()
    block = re.search(r"<!-- example: tested by tests/external/test_api_docs.py -->\n```python\n(.*?)```", text, re.S)
    assert block, "the example block is missing from docs/external-models.md"
    scope: dict = {}
    exec(compile(block.group(1), str(DOC), "exec"), scope)  # our own documentation
    res = scope["res"]
    assert 0.0 <= res.metrics["auc"] <= 1.0 and len(res.metrics["ci95"]["auc"]) == 2
    assert res.scores.shape == (64,) and list(res.labels) == [1] * 32 + [0] * 32
    assert str(res.metrics["auc"]) in capsys.readouterr().out


def test_api_attack_on_a_native_target_matches_the_runner(runs_dir):
    """privbench.attack on load_target(run) with the run's split = the runner's scores (same PIA code path)."""
    from helpers import train_cfg

    import privbench
    from privbench.runs.attack import run_attack
    from privbench.runs.result_schema import AttackResult

    cfg = train_cfg("centralized", "test")
    native = run_attack(cfg, "pia", None, runs_dir=runs_dir, device="cpu")
    tgt = privbench.load_target(native.run_dir, device="cpu")
    z = np.load(native.scores_path)
    x, y = privbench.load_dataset("digits")
    idx = z["index"]
    mem, non = idx[z["labels"] == 1], idx[z["labels"] == 0]
    res = privbench.attack(tgt, (x[mem], y[mem]), (x[non], y[non]), "pia", bootstrap=50)
    assert np.allclose(res.scores, z["scores"], rtol=1e-6, atol=1e-9)
    assert res.metrics["auc"] == native.metrics["auc"]
    # the typed result a run writes, with the runner's fields where they overlap; nothing written, so no paths
    r = res.result
    assert isinstance(r, AttackResult) and r.metrics["auc"] == res.metrics["auc"] and r.calibrated is res.calibrated
    # a TPR the non-members cannot resolve is None in Python, as n/a everywhere else; the result keeps the number
    assert r.n_nonmembers < 100 and res.metrics["tpr_at_1pct_fpr"] is None
    assert res.metrics["ci95"]["tpr_at_1pct_fpr"] is None and res.metrics["ci95"]["auc"] is not None
    assert "needs at least 100 non-members" in res.unresolved["tpr_at_1pct_fpr"]
    assert isinstance(r.metrics["tpr_at_1pct_fpr"], float) and "n/a" in repr(res)
    assert (r.attack, r.label, r.kind, r.n_members, r.n_nonmembers, r.threat_model, r.tpr_rule) == \
        (native.attack, native.label, native.kind, native.n_members, native.n_nonmembers, native.threat_model, None)
    assert (r.run_dir, r.scores_path, r.attack_hash, r.method) == (None, None, None, "external")
    assert r.attack_config == {**native.attack_config, "bootstrap": 50} and r.timing.attack_s is not None
    assert AttackResult.from_json(r.to_json()).to_json() == r.to_json()
