"""dpdm: DP-SGD DDPM — end to end on the test preset, accounting, determinism/resume, bad input."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from helpers import interrupt_at_call, train_cfg


@pytest.fixture(scope="session")
def dpdm_run(runs_dir):
    """The default DP path (PRV accountant, calibrated σ, K = 4) on the test preset, trained once."""
    from privbench.runs import train as api

    return api.train(train_cfg("dpdm", "test"), runs_dir, "cpu")


def test_dpdm_trains_and_reports_privacy(dpdm_run):
    from privbench.privacy.dpsgd import dpsgd_basis, dpsgd_epsilon

    m = dpdm_run
    p = m.privacy("model")
    cfg = m.cfg
    assert 0 < p["epsilon"] <= cfg.dp.epsilon
    assert p["delta"] == pytest.approx(min(cfg.dp.delta, 1 / cfg.data.n_members))
    assert p["accountant"] in ("prv", "pld", "rdp")
    assert p["basis"].startswith(dpsgd_basis(p["accountant"], p["delta"]))
    assert p["noise_calibrated"] and p["noise_multiplier"] > 0
    assert p["sample_rate"] == pytest.approx(cfg.train.batch_size / cfg.data.n_members)
    assert p["steps"] == cfg.train.steps
    # the stored ε is the accountant's ε for the stored σ, q, steps, δ
    again = dpsgd_epsilon(p["noise_multiplier"], p["sample_rate"], p["steps"], p["delta"], p["accountant"])
    assert again["epsilon"] == pytest.approx(p["epsilon"], rel=1e-6)
    tgt = m.load_target()
    assert tgt.name == "model" and "DP-SGD" in tgt.note
    x = torch.zeros(3, 1, 8, 8)
    eps = tgt.predict_noise(x, torch.tensor([0, 10, 999]), torch.tensor([0, 1, 2]))
    assert eps.shape == x.shape and torch.isfinite(eps).all()
    assert m.target_names() == ["model"]
    log = (m.ctx.run_dir / "log.txt").read_text()
    assert "DP-SGD on 64 members" in log and "K=4" in log


def test_un_noised_statistics_are_debug_output_only(dpdm_run, tmp_path, monkeypatch):
    """The mean loss, clipped fraction and Poisson batch size of a step are computed from the
    records without noise — outside the DP-SGD ε. They go to debug/model.log (first line: releasing it breaks the
    guarantee), never to log.txt, the progress bar or the privacy block."""
    from privbench.core import progress
    from privbench.core.mechanisms import SEEDED_NOISE_LABEL
    from privbench.models.debug import DEBUG_HEADER
    from privbench.runs import train as api

    m = dpdm_run
    steps = [line for line in (m.ctx.run_dir / "log.txt").read_text().splitlines() if "[model] step" in line]
    assert len(steps) == 4 and all(line.endswith("lr 2.00e-03") for line in steps)
    assert not any(w in line for line in steps for w in ("loss", "clipped", "batch"))
    debug = (m.ctx.run_dir / "debug" / "model.log").read_text().splitlines()
    assert debug[0] == DEBUG_HEADER
    assert len(debug) == 5 and all(w in debug[-1] for w in ("step 20/20", "loss", "clipped", "batch"))
    p = m.privacy("model")
    assert not {"loss", "clipped", "batch"} & set(p)
    assert p["noise_source"] == "seeded" and p["noise_label"] == SEEDED_NOISE_LABEL and SEEDED_NOISE_LABEL in p["basis"]

    postfix = []

    class Bar:
        def __init__(self, **kw):
            pass

        def set_postfix(self, *a, **kw):
            postfix.append((a, kw))

        def update(self, n):
            pass

        def close(self):
            pass

    monkeypatch.setattr(progress, "bar", Bar)
    api.train(train_cfg("dpdm", "test", dp__accountant="rdp", train__steps=5, dp__noise_multiplicity=1), tmp_path,
              "cpu")
    assert postfix == []  # the progress bar shows no un-noised loss


def test_noise_multiplicity_leaves_epsilon_unchanged():
    """K is not an input of the accountant: same σ, q, steps → same ε, for any K."""
    from privbench.models.dp_sgd import account, make_plan

    plans = [make_plan(train_cfg("dpdm", "test", dp__accountant="rdp", dp__noise_multiplicity=k), 64, 20)
             for k in (1, 8)]
    assert plans[0].noise_multiplicity == 1 and plans[1].noise_multiplicity == 8
    assert plans[0].noise_multiplier == plans[1].noise_multiplier
    e1, e8 = account(plans[0])["epsilon"], account(plans[1])["epsilon"]
    assert e1 == e8 <= 10.0
    # a given σ is accounted as such, whatever K
    given = [make_plan(train_cfg("dpdm", "test", dp__accountant="rdp", dp__noise_multiplier=2.0,
                                 dp__noise_multiplicity=k), 64, 20) for k in (1, 8)]
    assert account(given[0])["epsilon"] == account(given[1])["epsilon"]
    assert not given[0].calibrated and given[0].noise_multiplier == 2.0


def _weights(method):
    from privbench.models.checkpoint import load_weights

    return load_weights(method.ctx.ckpt_dir / "model.safetensors")


def test_deterministic_and_exact_resume(tmp_path, monkeypatch):
    """Same config + seed → same weights; a run interrupted after its step-10 checkpoint and restarted ends
    exactly where the uninterrupted one does."""
    from privbench.models.methods import dpdm
    from privbench.runs import train as api

    cfg = train_cfg("dpdm", "test", dp__accountant="rdp", dp__noise_multiplicity=2)
    a = api.train(cfg, tmp_path / "a", "cpu")
    real = interrupt_at_call(monkeypatch, dpdm, "dp_sgd_gradient")  # killed after the step-10 checkpoint
    with pytest.raises(KeyboardInterrupt):
        api.train(cfg, tmp_path / "b", "cpu")
    monkeypatch.setattr(dpdm, "dp_sgd_gradient", real)
    run_b = next((tmp_path / "b").iterdir())
    assert json.loads((run_b / "checkpoints" / "model.state.json").read_text())["step"] == 10
    b = api.train(cfg, tmp_path / "b", "cpu")
    assert "resumed from checkpoint at step 10/20" in (b.ctx.run_dir / "log.txt").read_text()
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert a.privacy("model") == b.privacy("model")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "privbench.cli", *args], capture_output=True, text=True)


def test_bad_dp_input_exits_2_via_cli(tmp_path):
    runs = tmp_path / "runs"
    r = _cli("train", "--method", "dpdm", "--preset", "test", "--runs-dir", str(runs), "--set", "dp.epsilon=0")
    assert r.returncode == 2
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "dp.epsilon" in lines[0] and "Traceback" not in r.stderr
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize("sets,needle", [
    (["dp.delta=1"], "dp.delta"),
    (["dp.delta=0"], "dp.delta"),
    (["dp.noise_multiplier=-1"], "dp.noise_multiplier"),
    (["dp.sample_rate=1.5"], "dp.sample_rate"),
    (["train.batch_size=100"], "sample rate must be in (0, 1]"),       # q = B/N = 100/64 > 1
    (["dp.noise_multiplier=0.1", "dp.accountant=rdp"], "dp.epsilon"),  # a given σ that exceeds the budget
    (["dp.epsilon=1e-9", "dp.accountant=rdp"], "epsilon"),             # unreachable budget
])
@pytest.mark.parametrize("method", ["dpdm", "dpsad"])
def test_bad_dp_input_exits_2(tmp_path, method, sets, needle):
    from click.testing import CliRunner

    from privbench.cli import main

    runs = tmp_path / "runs"
    args = ["train", "--method", method, "--preset", "test", "--runs-dir", str(runs), "--device", "cpu"]
    for s in sets:
        args += ["--set", s]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and needle in err[0], err
    assert not runs.exists() or not any(runs.iterdir())  # nothing written


def test_attack_result_carries_privacy(dpdm_run, runs_dir):
    from privbench.runs.attack import run_attack

    res = run_attack(dpdm_run.cfg, "loss", runs_dir=runs_dir, device="cpu").to_json()
    p = res["privacy"]
    assert res["target"] == "model" and p["epsilon"] <= 10 and "DP-SGD" in p["basis"]
    assert 0 <= res["metrics"]["auc"] <= 1


def test_a_short_dp_run_releases_a_model_that_moved_from_its_start(runs_dir):
    """A 200-step DP-SGD run at the default train.ema_decay (0.999) would release an EMA that keeps 0.999^200 = 82 %
    of its starting weights; the capped EMA (models/loop.ema_capped) keeps ≤ train.ema_start_weight of it, so the
    released weights move from the start by about what the raw iterate moves, and the checkpoint records the weight."""
    from privbench.models import checkpoint as ckpt
    from privbench.runs import train as api

    cfg = train_cfg("dpdm", "test", train__steps=200, train__checkpoint_every=200, train__log_every=100)
    m = api.train(cfg, runs_dir, "cpu")
    start = m.ctx.initial_denoiser()
    raw, ema = m.ctx.new_denoiser(), m.ctx.new_denoiser()
    ckpt.load_checkpoint_modules(m.ctx.ckpt_dir, "model", {"model": raw, "ema": ema}, "cpu")

    @torch.no_grad()
    def moved(net):
        num = sum(float((p - q).pow(2).sum()) for p, q in zip(net.parameters(), start.parameters()))
        den = sum(float(q.pow(2).sum()) for q in start.parameters())
        return (num / den) ** 0.5

    assert moved(raw) > 0.05
    assert moved(ema) > 0.5 * moved(raw), (moved(ema), moved(raw))  # uncapped: ≈ 0.08 of the raw iterate's move
    state = json.loads((m.ctx.ckpt_dir / "model.state.json").read_text())
    assert state["ema_start_weight"] == pytest.approx(0.01, rel=1e-6)
    assert state["ema_decay"] == pytest.approx(0.01 ** (1 / 200))
