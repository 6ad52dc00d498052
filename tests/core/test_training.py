"""Training loop: determinism, checkpoint/resume, corrupt checkpoints, caching."""
import json

import pytest
import torch
from click.testing import CliRunner
from helpers import train_cfg

from privbench.cli import main
from privbench.core.errors import BadInput
from privbench.runs import train as api


def _weights(method):
    from safetensors.torch import load_file

    return load_file(str(method.ctx.ckpt_dir / "model.safetensors"))


def test_deterministic_and_seeded(tmp_path):
    a = api.train(train_cfg(), tmp_path / "a", "cpu")
    b = api.train(train_cfg(), tmp_path / "b", "cpu")
    c = api.train(train_cfg(seed=1), tmp_path / "a", "cpu")
    wa, wb, wc = _weights(a), _weights(b), _weights(c)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert c.ctx.run_dir != a.ctx.run_dir
    assert any(not torch.equal(wa[k], wc[k]) for k in wa)


def test_resume_equals_uninterrupted(tmp_path):
    """A run stopped at a checkpoint and resumed reaches exactly the uninterrupted weights."""
    full = api.train(train_cfg(train__steps=20), tmp_path / "full", "cpu")
    # interrupted: train 10 steps, then finish as if the process had died after the step-10 checkpoint
    cfg = train_cfg(train__steps=20)
    m = api.make_method(cfg, api.run_dir_for(cfg, tmp_path / "part"), "cpu")
    from privbench.models.training import TrainData, train_denoiser

    x, y = m.training_data()
    from privbench.runs.store import write_config

    m.ctx.run_dir.mkdir(parents=True, exist_ok=True)
    write_config(m.ctx.run_dir, cfg)
    train_denoiser(m.ctx.new_denoiser(), TrainData(x, y), m.ctx.schedule.alphas_cumprod(), cfg.train, m.ctx.ckpt_dir,
                   name="model", seed=cfg.seed, device="cpu", steps=10)
    st = json.loads((m.ctx.ckpt_dir / "model.state.json").read_text())
    assert st["step"] == 10
    resumed = api.train(cfg, tmp_path / "part", "cpu")
    assert "resumed from checkpoint at step 10/20" in (resumed.ctx.run_dir / "log.txt").read_text()
    wf, wr = _weights(full), _weights(resumed)
    assert all(torch.equal(wf[k], wr[k]) for k in wf)


def test_cache_hit(tmp_path, privbench_log):
    api.train(train_cfg(), tmp_path, "cpu")
    assert "cache hit" not in privbench_log.text
    api.train(train_cfg(), tmp_path, "cpu")
    assert "cache hit" in privbench_log.text


def test_corrupt_checkpoint_refused_by_load_and_retrained_by_sample(tmp_path):
    """load_target (read-only) refuses a damaged checkpoint and changes nothing; a command that trains if needed
    says so and retrains it — to exactly the original weights."""
    m = api.train(train_cfg(), tmp_path, "cpu")
    ck = m.ctx.ckpt_dir / "model.safetensors"
    good = ck.read_bytes()
    ck.write_bytes(good[:100])  # truncated
    before = {p: p.read_bytes() for p in m.ctx.run_dir.rglob("*") if p.is_file()}
    with pytest.raises(BadInput, match="model.safetensors missing or damaged"):
        api.load_target(m.ctx.run_dir)
    assert before == {p: p.read_bytes() for p in m.ctx.run_dir.rglob("*") if p.is_file()}
    r = CliRunner().invoke(main, ["sample", "--method", "centralized", "--preset", "test", "--runs-dir",
                                  str(tmp_path), "--n", "4", "--sampler", "ddim", "--steps", "10",
                                  "--out", str(tmp_path / "g.png")])
    assert r.exit_code == 0, r.stderr
    assert "Traceback" not in r.stderr and "model.safetensors missing or damaged; retraining" in r.stderr
    assert ck.read_bytes() == good
    assert (tmp_path / "g.png").exists()


def test_restricted_timestep_range(tmp_path):
    """train_denoiser draws t only from t_range (PFDM's local models train on t <= t0)."""
    from privbench.models.training import TrainData, diffusion_loss, train_denoiser

    seen = []

    def spy(model, x0, y, extra, t, noise, ac):
        seen.append(t.clone())
        return diffusion_loss(model, x0, y, extra, t, noise, ac)

    cfg = train_cfg()
    m = api.make_method(cfg, tmp_path / "r", "cpu")
    x, y = m.training_data()
    train_denoiser(m.ctx.new_denoiser(), TrainData(x, y), m.ctx.schedule.alphas_cumprod(), cfg.train,
                   tmp_path / "r" / "checkpoints", name="m", seed=0, device="cpu", t_range=(0, 99), loss_fn=spy)
    t = torch.cat(seen)
    assert t.min() >= 0 and t.max() <= 99 and t.max() > 50


def test_load_target_api(tmp_path):
    import privbench

    m = api.train(train_cfg(), tmp_path, "cpu")
    tgt = privbench.load_target(m.ctx.run_dir)
    assert tgt.num_classes == 10 and tgt.alphas_cumprod.shape == (1000,)
    assert tgt.alphas_cumprod[0] == pytest.approx(1 - 1e-4)
    x = torch.randn(5, 1, 8, 8)
    eps = tgt.predict_noise(x, torch.full((5,), 10), torch.arange(5))
    assert eps.shape == x.shape and torch.isfinite(eps).all()
    with pytest.raises(BadInput):
        tgt.predict_noise(x, torch.full((5,), 10))  # class-conditional without labels


def test_samplers_partial_chains(tmp_path):
    """DDPM and DDIM chains start from a given x_t at any t and stop early; DDIM is deterministic."""
    from privbench.models.sampling import ddim_chain, ddpm_chain

    m = api.train(train_cfg(), tmp_path, "cpu")
    tgt = m.load_target()
    calls = []
    y = torch.zeros(3, dtype=torch.long)

    def eps(x, t):
        calls.append(int(t[0]))
        return tgt.predict_noise(x, t, y)

    x = torch.randn(3, 1, 8, 8)
    out = ddpm_chain(eps, x, 300, 101, tgt.schedule.scheduler(), generator=torch.Generator().manual_seed(0))
    assert calls == list(range(300, 100, -1)) and out.shape == x.shape
    calls.clear()
    a = ddim_chain(eps, x, 300, 0, tgt.alphas_cumprod, 10)
    b = ddim_chain(eps, x, 300, 0, tgt.alphas_cumprod, 10)
    assert len(calls) == 20 and calls[0] == 300 and calls[9] == 0 and torch.equal(a, b)


def test_train_precision_bf16_is_its_own_run_and_fp32_keeps_the_hash(tmp_path):
    """train.precision enters the config hash only off its default: the committed tiny report's centralized run
    (reports/tiny/results.csv) keeps its hash, set explicitly to fp32 or not; bf16 autocast trains a run of its own
    whose weights differ from fp32's (the forward and backward ran in bf16)."""
    committed = "e6102f83fbfe"
    assert train_cfg(preset="tiny").training_hash() == committed
    assert train_cfg(preset="tiny", train__precision="fp32").training_hash() == committed
    assert "precision" not in train_cfg().training_dict()["train"]
    fp32 = api.train(train_cfg(), tmp_path, "cpu")
    bf16 = api.train(train_cfg(train__precision="bf16"), tmp_path, "cpu")
    assert bf16.ctx.run_dir != fp32.ctx.run_dir
    assert bf16.cfg.training_dict()["train"]["precision"] == "bf16"
    w32, w16 = _weights(fp32), _weights(bf16)
    assert all(torch.isfinite(w).all() for w in w16.values())
    assert any(not torch.equal(w32[k], w16[k]) for k in w32)
