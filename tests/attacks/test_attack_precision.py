"""attack.precision=bf16: the target's forward passes under bfloat16 autocast rank records as fp32 does."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import train_cfg
from scipy.stats import spearmanr


@pytest.fixture(scope="module")
def overfit_test_target(tmp_path_factory):
    """A test-preset target trained 400 steps on 24 members (≈ 270 passes over each): small and overfit."""
    import privbench
    from privbench.runs import train as api

    runs = tmp_path_factory.mktemp("precision")
    cfg = train_cfg("centralized", "test", data__n_members=24, data__n_nonmembers=24, train__steps=400)
    ctx = api.train(cfg, runs, "cpu").ctx
    return privbench.load_target(ctx.run_dir, device="cpu"), ctx.records(ctx.split.members), \
        ctx.records(ctx.split.nonmembers)


@pytest.mark.parametrize("attack", ["pia", "loss"])
def test_bf16_scores_rank_like_fp32(overfit_test_target, attack):
    import privbench

    tgt, members, nonmembers = overfit_test_target
    fp32 = privbench.attack(tgt, members, nonmembers, attack, bootstrap=0)
    bf16 = privbench.attack(tgt, members, nonmembers, attack, bootstrap=0, precision="bf16")
    assert not np.array_equal(fp32.scores, bf16.scores)  # autocast did run: bf16 rounding moves the scores
    assert bf16.scores.dtype == fp32.scores.dtype and np.isfinite(bf16.scores).all()
    rho = spearmanr(fp32.scores, bf16.scores).statistic
    assert rho >= 0.99, rho
    assert abs(bf16.metrics["auc"] - fp32.metrics["auc"]) < 0.05


def test_precision_enters_the_attack_hash_only_off_its_default():
    """Attack results computed before the setting existed keep their hash (and cache) at fp32."""
    from privbench.attacks.pia import PIA

    assert "precision" not in PIA().hash_dict()["settings"]
    assert PIA(precision="bf16").hash_dict()["settings"]["precision"] == "bf16"
    assert "precision" in PIA().describe()


def test_query_precision_restores_fp32_and_rejects_unknown(overfit_test_target):
    from privbench.core.errors import BadInput

    tgt, members, _ = overfit_test_target
    x, y = members[0][:4], members[1][:4]
    ref = tgt.predict_noise(x, 200, y)
    with tgt.query_precision("bf16"):
        low = tgt.predict_noise(x, 200, y)
    assert low.dtype == torch.float32 and not torch.equal(low, ref)
    assert torch.equal(tgt.predict_noise(x, 200, y), ref)
    with pytest.raises(BadInput), tgt.query_precision("fp16"):
        pass
