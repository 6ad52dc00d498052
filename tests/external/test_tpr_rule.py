"""TPR@x is "largest TPR with FPR <= x" by default; metrics.tpr_rule=lt reproduces Carlini et al.'s
LiRA code (tensorflow/privacy research/mi_lira_2021/plot.py: tpr[np.where(fpr < x)[0][-1]]) and says so."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from ext_helpers import cli, digits_split, tiny_unet, write_npz
from sklearn.metrics import roc_curve

from privbench.core.errors import BadInput
from privbench.metrics.roc import membership_metrics, tpr_at_fpr


def _lira_code(scores, labels, x):
    fpr, tpr, _ = roc_curve(labels, scores)
    return tpr[np.where(fpr < x)[0][-1]]


def test_lt_equals_the_lira_code_and_le_differs_when_x_n_is_an_integer():
    rng = np.random.default_rng(0)
    differ = 0
    for _ in range(30):
        labels = np.r_[np.ones(1000), np.zeros(1000)].astype(int)
        scores = np.r_[rng.normal(0.3, 1, 1000), rng.normal(0, 1, 1000)]
        for x in (0.01, 0.001):
            lt = tpr_at_fpr(scores, labels, x, rule="lt")
            le = tpr_at_fpr(scores, labels, x)
            assert lt == _lira_code(scores, labels, x)
            fpr, tpr, _ = roc_curve(labels, scores)
            assert le == tpr[np.where(fpr <= x + 1e-12)[0][-1]]
            differ += le != lt
    assert differ > 30  # with 1000 non-members, x·n is an integer: the rules differ on most draws
    m = membership_metrics(scores, labels, bootstrap=20, tpr_rule="lt")
    assert m["tpr_at_0_1pct_fpr"] == _lira_code(scores, labels, 0.001)
    with pytest.raises(BadInput, match="tpr_rule"):
        tpr_at_fpr(scores, labels, 0.01, rule="<")


def test_attack_with_tpr_rule_lt_is_labelled_and_cached_apart(tmp_path):
    from diffusers import DDPMPipeline, DDPMScheduler

    DDPMPipeline(unet=tiny_unet(0), scheduler=DDPMScheduler()).save_pretrained(str(tmp_path / "pipe"))
    (xm, _), (xn, _), _ = digits_split(100, 100, seed=2)
    write_npz(tmp_path / "m.npz", xm)
    write_npz(tmp_path / "n.npz", xn)
    base = ["attack", "--model", tmp_path / "pipe", "--members", tmp_path / "m.npz", "--nonmembers",
            tmp_path / "n.npz", "--attack", "loss", "--preset", "test", "--device", "cpu",
            "--runs-dir", tmp_path / "runs"]
    code, out, err = cli(*base, "--json")
    assert code == 0, err
    le = json.loads(out)
    code, out, err = cli(*base, "--json", "--set", "metrics.tpr_rule=lt")
    assert code == 0, err
    lt = json.loads(out)
    assert "tpr_rule" not in le and lt["tpr_rule"] == "lt" and any("FPR < x" in n for n in lt["notes"])
    assert Path(lt["scores_path"]).parent != Path(le["scores_path"]).parent  # its own run, not the cached one
    z = np.load(lt["scores_path"])
    assert lt["metrics"]["tpr_at_1pct_fpr"] == _lira_code(z["scores"], z["labels"], 0.01)
    code, out, err = cli(*base, "--set", "metrics.tpr_rule=lt")
    assert code == 0 and "TPR@<1%" in out and "metrics.tpr_rule=lt" in out
