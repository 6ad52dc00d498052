"""Slow acceptance tests of the attacks on real trained targets (digits, tiny preset)."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from privbench.attacks.base import AttackEnv, Records
from privbench.attacks.loss import LossAttack
from privbench.attacks.memorization import NNRatioMemorization
from privbench.attacks.pia import PIA
from privbench.metrics.roc import membership_metrics

pytestmark = pytest.mark.slow


def _cfg(method, **attack):
    cfg = copy.deepcopy(method.cfg)
    for k, v in attack.items():
        setattr(cfg.attack, k, v)
    return cfg


def test_overfit_centralized_target_leaks(overfit_centralized):
    """PIA AUC ≥ 0.9 and loss AUC ≥ 0.7 (t = 200) on the overfit target (128 members / 128 non-members)."""
    from privbench.reports.text import format_table
    from privbench.runs.attack import run_attack

    m = overfit_centralized
    runs_dir = m.ctx.run_dir.parent
    res = {a: run_attack(_cfg(m), a, None, runs_dir=runs_dir, device="cpu").to_json()
           for a in ("pia", "loss", "secmi", "pian")}
    # SecMI with the paper's offset (t_sec <-> t_sec + k); the default is the official code's (t_sec - k <-> t_sec)
    res["secmi-paper"] = run_attack(_cfg(m, secmi_offset="paper"), "secmi", None, runs_dir=runs_dir,
                                    device="cpu").to_json()
    print("\n" + format_table(list(res.values())))
    auc = {a: r["metrics"]["auc"] for a, r in res.items()}
    assert auc["pia"] >= 0.9, auc
    assert auc["loss"] >= 0.7, auc
    # SecMI leaks too, significantly at the 95 % level with the paper's offset (measured AUC ≈ 0.63; the official
    # offset, the default, measured ≈ 0.56, only reported); PIAN is only reported: on this model its per-record
    # rescaling of ε₀ destroys most of the signal (measured AUC ≈ 0.54, CI containing 0.5)
    assert res["secmi-paper"]["metrics"]["ci95"]["auc"][0] > 0.5, res["secmi-paper"]["metrics"]
    assert res["secmi"]["figures"]["offset"] == "official" and res["secmi-paper"]["figures"]["offset"] == "paper"
    assert 0.0 <= auc["pian"] <= 1.0
    assert res["pia"]["calibrated"]["direction"] == 1 and res["pia"]["calibrated"]["auc"] >= 0.85


def test_reconstruction_with_the_overfit_denoiser(overfit_centralized):
    """Simulated uploads of the 128 members, attacked with the overfit target as denoiser (Tweedie and DDIM
    chain). t0 = 100: re-identified far above chance. t0 = 690 (PFDM's default): the re-identification rate stays
    near the chance level of an attacker who knows the label and guesses among the same-label members (the
    denoiser memorised the member set, so it can do that without looking at the upload) — measured ≈ 0.09 vs
    ≈ 0.08, while 1/pool = 0.004."""
    from privbench.runs.attack import run_attack

    m = overfit_centralized
    runs_dir = m.ctx.run_dir.parent
    small = run_attack(_cfg(m, recon_t0=100), "reconstruction", None, runs_dir=runs_dir, device="cpu").to_json()
    big = run_attack(_cfg(m, recon_t0=690), "reconstruction", None, runs_dir=runs_dir, device="cpu").to_json()
    for r in (small, big):
        print(r["figures"]["t0"], {k: (v["reid_rate"], round(v["psnr"], 2)) for k, v in r["figures"]["attackers"].items()},
              "chance", r["metrics"]["reid_chance"], "label+member chance", r["figures"]["reid_chance_label_members"])
    assert small["metrics"]["reid_rate"] >= 0.95 >= 100 * small["metrics"]["reid_chance"]
    assert big["metrics"]["reid_rate"] <= 2 * big["figures"]["reid_chance_label_members"]
    assert big["metrics"]["psnr"] < small["metrics"]["psnr"]


def test_target_not_trained_on_either_group_gives_chance(overfit_centralized):
    """Genuine null: two disjoint random groups of records the target never saw (neither its members nor its
    non-members), one labelled 'member'. The AUC's 95 % CI must contain 0.5."""
    m = overfit_centralized
    ctx = m.ctx
    x, y = ctx.dataset
    seen = set(ctx.split.members) | set(ctx.split.nonmembers)
    unused = torch.as_tensor([i for i in range(len(y)) if i not in seen])
    perm = unused[torch.randperm(len(unused), generator=torch.Generator().manual_seed(1234))]
    fake_mem, fake_non = perm[:256].sort().values, perm[256:512].sort().values
    idx = torch.cat([fake_mem, fake_non])
    rec = Records(x[idx], y[idx].long(), torch.cat([torch.ones(256), torch.zeros(256)]).long(), idx)
    tgt = m.load_target()
    for attack in (PIA(t=200), LossAttack(t=200)):
        out = attack.run(tgt, rec, AttackEnv(seed=0))
        met = membership_metrics(out.scores, rec.labels.numpy(), bootstrap=1000, seed=0)
        lo, hi = met["ci95"]["auc"]
        print(attack.name, "null AUC", met["auc"], (lo, hi))
        assert lo <= 0.5 <= hi, (attack.name, met["auc"], lo, hi)


def test_canaries_duplicated_in_training_are_found_by_memorization(overfit_centralized, tmp_path):
    """Four canary records (distinct classes, never in the split), each duplicated 32 times in a training set
    with 32 ordinary members, are reproduced by the trained model's samples and flagged by the NN-ratio test,
    while samples near ordinary records are not.

    Training: the overfit target's architecture and optimiser for CANARY_STEPS steps, EMA decay 0.99 (with the
    preset's 0.999 the EMA of so short a run is still ~half its random initialisation)."""
    from privbench.models.target import Target
    from privbench.models.training import TrainData, train_denoiser

    m = overfit_centralized
    ctx = m.ctx
    x, y = ctx.dataset
    seen = set(ctx.split.members) | set(ctx.split.nonmembers)
    canaries = []
    for k in (0, 3, 6, 8):  # first unused record of four classes
        canaries.append(next(i for i in range(len(y)) if i not in seen and int(y[i]) == k))
    normal = list(ctx.split.members)[:32]
    mem_x, mem_y = ctx.records(normal)
    cx, cy = x[canaries], y[canaries]
    tx = torch.cat([mem_x, cx.repeat_interleave(32, 0)])
    ty = torch.cat([mem_y, cy.repeat_interleave(32, 0)]).long()
    tcfg = copy.deepcopy(ctx.cfg.train)
    tcfg.ema_decay = 0.99
    model = train_denoiser(ctx.new_denoiser(), TrainData(tx, ty), ctx.schedule.alphas_cumprod(), tcfg,
                           tmp_path / "checkpoints", name="canary", seed=1, device="cpu", steps=CANARY_STEPS)
    tgt = Target("canary", "centralized", model, ctx.schedule, "cpu", ctx.num_classes, meta={"shape": ctx.image_shape})
    cfg = _cfg(m, n_samples=100)
    cfg.sample.sampler, cfg.sample.ddim_steps = "ddim", 50
    mem_attack = NNRatioMemorization.from_config(cfg.attack)
    train_index = torch.cat([torch.as_tensor(normal), torch.as_tensor(canaries).repeat_interleave(32)])
    samples, sample_y = mem_attack.draw(tgt, AttackEnv(cfg=cfg, seed=0))
    out = mem_attack.evaluate(samples, sample_y, tx, train_index)
    found = set(out.figures["memorized_training_records"])
    nn1 = out.arrays["nn1"]
    memo = out.arrays["memorized"].astype(bool)
    on_canary = np.isin(nn1, canaries)
    print("memorized fraction", out.metrics, "canaries found", sorted(found & set(canaries)),
          "memorized samples on canaries", int((memo & on_canary).sum()), "of", int(on_canary.sum()))
    assert len(found & set(canaries)) >= 3
    # samples near a canary are memorized far more often than the rest
    assert (memo & on_canary).sum() / max(1, on_canary.sum()) >= 0.5
    assert (memo & on_canary).sum() / max(1, on_canary.sum()) > 2 * (memo & ~on_canary).sum() / max(1, (~on_canary).sum())


CANARY_STEPS = 700
