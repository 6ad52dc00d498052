"""PFDM: LDP upload mechanics, server isolation, the local model's t ≤ t0 range, two-stage sampling, targets and
privacy; a slow end-to-end test on the tiny preset (PIA near chance on ``shared``; pipeline digits read as K)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import train_cfg

from privbench.core.errors import BadInput
from privbench.core.mechanisms import clip_l2
from privbench.core.schedule import alphas_cumprod, t0_to_model_t
from privbench.models.method import RunContext
from privbench.models.methods import pfdm as pfdm_mod
from privbench.models.methods.pfdm import CLIPPED, UNCLIPPED, make_uploads
from privbench.runs import train as api
from privbench.runs.store import run_dir_for


@pytest.fixture(scope="module")
def pfdm_test_run(runs_dir):
    return api.train(train_cfg("pfdm", "test"), runs_dir, "cpu")


# ------------------------------------------------------------------ upload mechanics

def test_clip_is_l2_over_the_whole_image():
    g = torch.Generator().manual_seed(0)
    x = torch.randn((6, 3, 4, 4), generator=g) * torch.tensor([0.5, 1, 2, 3, 4, 8]).view(-1, 1, 1, 1)
    norms = x.flatten(1).norm(dim=1)
    C = 6.0
    xc, mask = clip_l2(x, C)
    assert torch.equal(mask, norms > C)
    out = xc.flatten(1).norm(dim=1)
    assert torch.allclose(out[mask], torch.full_like(out[mask], C), atol=1e-5)
    assert torch.equal(xc[~mask], x[~mask])  # below C: untouched
    # one scale per record over all channels and pixels (direction preserved): not a per-channel/pixel clip
    ratio = xc[mask] / x[mask]
    assert torch.allclose(ratio, ratio.flatten(1)[:, :1].view(-1, 1, 1, 1).expand_as(ratio), atol=1e-6)
    with pytest.raises(BadInput):
        clip_l2(x, 0.0)


def test_upload_level_is_alphas_cumprod_at_t0_minus_1():
    ac = alphas_cumprod(1000)
    x = torch.full((3, 1, 8, 8), 0.9)  # norm 7.2: clipped by C = 5, not by C = 10
    x[1] *= -0.5
    y, idx, cl = torch.tensor([1, 2, 3]), torch.tensor([5, 6, 7]), torch.tensor([0, 0, 1])
    for t0, C in ((690, 10.0), (675, 5.0), (1, 3.0), (1000, 10.0)):
        up, n_clipped = make_uploads(x, y, idx, cl, clip=C, t0=t0, alphas_cumprod=ac,
                                     generator=torch.Generator().manual_seed(1))
        z = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        a = ac[t0_to_model_t(t0)]
        assert float(a) == pytest.approx(float(torch.prod(1 - torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64)[:t0])))
        xc, mask = clip_l2(x.double(), C)
        expect = (a.sqrt() * xc + (1 - a).sqrt() * z).float()
        assert torch.allclose(up.x, expect, atol=1e-6)
        if t0 < 1000:  # the neighbouring level is measurably different
            wrong = (ac[t0].sqrt() * xc + (1 - ac[t0]).sqrt() * z).float()
            assert not torch.allclose(up.x, wrong, atol=1e-6)
        assert n_clipped == int(mask.sum()) and up.t0 == t0 and up.clip == C
        assert torch.equal(up.y, y) and torch.equal(up.index, idx) and torch.equal(up.client, cl)
    with pytest.raises(BadInput):
        make_uploads(x, y, idx, cl, clip=10, t0=0, alphas_cumprod=ac, generator=torch.Generator())


def test_upload_statistics_large_sample():
    """x̃ ~ N(√ᾱ·CLIP(x), (1−ᾱ)I) per record: check the mean and variance over many draws of one record."""
    ac = alphas_cumprod(1000)
    x = torch.linspace(-1, 1, 64).view(1, 1, 8, 8).repeat(20000, 1, 1, 1) * 2.0  # norm ≈ 9.3 → clip at 4
    up, n_clipped = make_uploads(x, torch.zeros(20000), torch.arange(20000), torch.zeros(20000), clip=4.0, t0=100,
                                 alphas_cumprod=ac, generator=torch.Generator().manual_seed(3))
    a = float(ac[99])
    xc, _ = clip_l2(x[:1], 4.0)
    assert n_clipped == 20000
    assert torch.allclose(up.x.mean(0), (np.sqrt(a) * xc[0]).float(), atol=0.03)
    assert up.x.var(0).mean().item() == pytest.approx(1 - a, rel=0.02)


def test_run_uploads_and_clipped_count(pfdm_test_run):
    m = pfdm_test_run
    ctx = m.ctx
    up = m.uploads()
    members = sorted(ctx.split.members)
    assert sorted(up.index.tolist()) == members  # every member uploaded exactly once
    for k, idx in enumerate(ctx.clients.clients):
        assert sorted(up.index[up.client == k].tolist()) == sorted(idx)
    x, y = ctx.records(up.index)
    assert torch.equal(up.y, y)
    a = float(ctx.schedule.alphas_cumprod().double()[m.t0 - 1])
    xc, mask = clip_l2(x, m.cfg.pfdm.clip)
    z = (up.x - np.sqrt(a) * xc) / np.sqrt(1 - a)  # the noise actually added
    assert abs(z.mean().item()) < 0.05 and z.std().item() == pytest.approx(1.0, abs=0.05)
    info = json.loads((ctx.run_dir / "uploads.json").read_text())
    assert info["n_uploads"] == len(members) and info["t0"] == 690 and info["noise_source"] == "seeded"
    assert m.n_clipped() == int(mask.sum())


def test_clip_counts_are_debug_output_only(runs_dir):
    """How many records were clipped is an un-noised function of the records, outside the LDP
    guarantee: it is in no artefact a user would export (uploads, their summary, pfdm.json, log.txt, privacy) —
    only in debug/pfdm-uploads.log, whose first line says that releasing it breaks the guarantee."""
    from safetensors import safe_open

    from privbench.models.debug import DEBUG_HEADER

    cfg = train_cfg("pfdm", "test", pfdm__clip=3.0, pfdm__local_steps=2, pfdm__server_steps=2)  # all 64 clipped
    m = api.train(cfg, runs_dir, "cpu")
    rd = m.ctx.run_dir
    assert m.n_clipped() == cfg.data.n_members == 64
    exported = {name: (rd / name).read_text() for name in ("uploads.json", "pfdm.json", "log.txt")}
    with safe_open(str(m.uploads_path), framework="pt") as f:
        exported["uploads.safetensors metadata"] = json.dumps(f.metadata())
    exported["privacy"] = json.dumps(m.privacy("shared"))
    for name, text in exported.items():
        assert "clipped" not in text and "n_clipped" not in text, name
    assert [c.keys() for c in json.loads(exported["uploads.json"])["clients"]] == [{"client", "n_records"}] * 4
    debug = (rd / "debug" / "pfdm-uploads.log").read_text().splitlines()
    assert debug[0] == DEBUG_HEADER
    assert "64 of 64 records were clipped" in debug[1] and "per client: 22, 18, 14, 10" in debug[1]


def test_uploads_are_seeded_and_differ_between_seeds(runs_dir, pfdm_test_run):
    cfg = train_cfg("pfdm", "test", seed=5)
    m = api.make_method(cfg, run_dir_for(cfg, runs_dir), "cpu")
    m.ctx.run_dir.mkdir(parents=True, exist_ok=True)
    m._make_all_uploads()
    a = m.uploads()
    m.uploads_path.unlink()
    m._make_all_uploads()
    assert torch.equal(a.x, m.uploads().x)  # same seed → same uploads
    assert not torch.equal(a.x[:4], pfdm_test_run.uploads().x[:4])


# ------------------------------------------------------------------ the server sees uploads only

def test_server_runs_with_raw_data_unreachable(runs_dir, monkeypatch):
    cfg = train_cfg("pfdm", "test", seed=7)
    run_dir = run_dir_for(cfg, runs_dir)
    clients = api.make_method(cfg, run_dir, "cpu")
    clients._ensure_uploads()  # the client phase alone: uploads + local models
    for c in range(clients.n_clients):
        clients._train_client(c)

    def no_raw(*a, **k):
        raise AssertionError("the server touched raw client data")

    monkeypatch.setattr(RunContext, "dataset", property(no_raw))
    monkeypatch.setattr(RunContext, "records", no_raw)
    monkeypatch.setattr("privbench.models.method.load_dataset", no_raw)
    monkeypatch.setattr("privbench.data.base.load_dataset", no_raw)
    server = api.make_method(cfg, run_dir, "cpu")  # a fresh context: nothing cached
    server.server_phase()
    assert (server.ctx.ckpt_dir / "shared.safetensors").exists()
    monkeypatch.undo()
    m = api.make_method(cfg, run_dir, "cpu")
    m.train()  # finishes (nothing left to train) and loads
    tgt = m.load_target("shared")
    assert tgt.uploads is not None and len(tgt.uploads.x) == cfg.data.n_members


def test_train_server_takes_only_uploads():
    import inspect

    params = list(inspect.signature(pfdm_mod.train_server).parameters)
    assert params[0] == "uploads"
    assert not {"ctx", "dataset", "records", "x", "method"} & set(params)


# ------------------------------------------------------------------ the local model's time range

@pytest.mark.parametrize("t0", [690, 40])
def test_local_model_trains_only_t_below_t0(runs_dir, monkeypatch, t0):
    seen: dict[str, list] = {"client": [], "server": []}
    real = pfdm_mod.train_denoiser.__globals__["diffusion_loss"]

    def spy(model, x0, y, extra, t, noise, ac):
        key = "client" if model.num_extra else "server"
        seen[key].append(t.clone())
        if key == "client":
            assert extra is not None and set(extra.tolist()) <= {UNCLIPPED, CLIPPED}
        return real(model, x0, y, extra, t, noise, ac)

    monkeypatch.setitem(pfdm_mod.train_denoiser.__globals__, "diffusion_loss", spy)
    cfg = train_cfg("pfdm", "test", seed=11, pfdm__t0=t0, pfdm__local_steps=12, pfdm__server_steps=12)
    api.train(cfg, runs_dir, "cpu")
    tc, ts = torch.cat(seen["client"]), torch.cat(seen["server"])
    assert len(tc) == 4 * 12 * cfg.train.batch_size
    assert tc.min() >= 0 and tc.max() <= t0 - 1  # model timesteps 0..t0−1, i.e. the paper's t ≤ t0
    assert tc.max() >= 0.95 * (t0 - 1)  # …and the whole range is used
    assert ts.max() > t0 + 100  # the server is an ordinary T-step DDPM


def test_clip_mix_weights(runs_dir, monkeypatch):
    seen = []
    real = pfdm_mod.train_denoiser

    def spy(model, data, *a, **k):
        if data.extra is not None:
            seen.append(data)
        return real(model, data, *a, **k)

    monkeypatch.setattr(pfdm_mod, "train_denoiser", spy)
    cfg = train_cfg("pfdm", "test", seed=12, pfdm__clip_mix=0.25, pfdm__clip=3.0)
    m = api.train(cfg, runs_dir, "cpu")
    d = seen[0]
    n = len(d) // 2
    assert torch.equal(d.extra[:n], torch.full((n,), UNCLIPPED)) and torch.equal(d.extra[n:], torch.full((n,), CLIPPED))
    assert d.weights[n:].sum().item() == pytest.approx(0.25) and d.weights[:n].sum().item() == pytest.approx(0.75)
    assert (d.x[n:].flatten(1).norm(dim=1) <= 3.0 + 1e-5).all() and (d.x[:n].flatten(1).norm(dim=1) > 5).all()
    assert m.n_clipped() == cfg.data.n_members  # C = 3: every 8×8 digit (norm ≥ 6) is clipped


# ------------------------------------------------------------------ sampling (Algorithm 2)

def _count_calls(module, log, tag):
    def hook(_mod, args, kwargs):
        t = args[1]
        extra = args[3] if len(args) > 3 else kwargs.get("extra")
        log.append((tag, int(t[0]), None if extra is None else int(extra[0])))
    return module.register_forward_pre_hook(hook, with_kwargs=True)


def test_pipeline_sampling_order_and_count(pfdm_test_run):
    tgt = pfdm_test_run.load_target("pipeline:1")
    shared, client = tgt.stages
    log: list = []
    h1, h2 = _count_calls(shared.model, log, "shared"), _count_calls(client.model, log, "client")
    x, y = tgt.sample(3, torch.tensor([0, 1, 2]), seed=0, sampler="ddpm")
    h1.remove(), h2.remove()
    T, t0 = 1000, 690
    assert len(log) == T + t0 == tgt.meta["nfe_ddpm"]
    assert [e[0] for e in log] == ["shared"] * T + ["client"] * t0  # shared chain first, then the client
    assert [e[1] for e in log[:T]] == list(range(T - 1, -1, -1))
    assert [e[1] for e in log[T:]] == list(range(t0 - 1, -1, -1))
    assert {e[2] for e in log[T:]} == {UNCLIPPED}
    assert x.shape == (3, 1, 8, 8) and torch.isfinite(x).all()


def test_pipeline_ddim_option(runs_dir):
    cfg = train_cfg("pfdm", "test", pfdm__stage1_sampler="ddim")
    m = api.train(cfg, runs_dir, "cpu")  # sampler keys do not change the run
    assert m.ctx.run_dir == run_dir_for(train_cfg("pfdm", "test"), runs_dir)
    tgt = m.load_target("pipeline:0")
    log: list = []
    hs = [_count_calls(s.model, log, n) for s, n in zip(tgt.stages, ("shared", "client"))]
    tgt.sample(2, torch.tensor([3, 4]), seed=1, sampler="ddpm", ddim_steps=cfg.sample.ddim_steps)
    [h.remove() for h in hs]
    n_shared = sum(e[0] == "shared" for e in log)
    assert n_shared == cfg.sample.ddim_steps and sum(e[0] == "client" for e in log) == 690
    log.clear()
    hs = [_count_calls(s.model, log, n) for s, n in zip(tgt.stages, ("shared", "client"))]
    tgt.sample(2, torch.tensor([3, 4]), seed=1, sampler="ddim", ddim_steps=cfg.sample.ddim_steps)  # both stages DDIM
    [h.remove() for h in hs]
    assert len(log) == 2 * cfg.sample.ddim_steps


def test_pipeline_predict_noise_is_composite(pfdm_test_run):
    tgt = pfdm_test_run.load_target("pipeline:0")
    shared, client = tgt.stages
    g = torch.Generator().manual_seed(0)
    x = torch.randn((4, 1, 8, 8), generator=g)
    y = torch.tensor([0, 1, 2, 3])
    t = torch.tensor([0, 689, 690, 999])
    eps = tgt.predict_noise(x, t, y)
    assert torch.allclose(eps[:2], client.predict_noise(x[:2], t[:2], y[:2]))
    assert torch.allclose(eps[2:], shared.predict_noise(x[2:], t[2:], y[2:]))


def test_target_capabilities_tell_which_attacks_can_run(pfdm_test_run):
    from privbench.core.registry import ATTACKS

    pipe, shared = pfdm_test_run.load_target("pipeline:0"), pfdm_test_run.load_target("shared")
    cp, cs = pipe.capabilities, shared.capabilities
    assert (cp.stages, cp.white_box, cp.uploads, cp.latent, cp.text_conditioned) == (2, False, False, False, False)
    assert (cs.stages, cs.white_box, cs.uploads) == (1, True, True) and cs.record_shape == (1, 8, 8)
    gsa, pia, clid = (ATTACKS.get(n).factory for n in ("gsa", "pia", "clid"))
    assert "composes several" in gsa.refusal(cp) and gsa.refusal(cs) is None
    assert pia.refusal(cp) is None and "text-to-image" in clid.refusal(cs)


# ------------------------------------------------------------------ targets and privacy

def test_targets_and_privacy(pfdm_test_run):
    m = pfdm_test_run
    assert m.default_target == "shared"
    assert m.target_names() == ["shared", "client:0", "client:1", "client:2", "client:3",
                                "pipeline:0", "pipeline:1", "pipeline:2", "pipeline:3"]
    p = m.privacy("shared")
    assert p["epsilon"] == pytest.approx(8.774, abs=1e-3) and p["delta"] == 1e-5
    assert p["epsilon_paper_bound"] == pytest.approx(10.243, abs=1e-3)
    assert "per record" in p["basis"] and "single upload" in p["basis"]
    for name in ("client:0", "pipeline:2"):
        assert m.privacy(name) is None  # docs/cli.md §5: privacy is null for non-private targets
        assert "NO DP" in m.load_target(name).note
    shared = m.load_target()
    assert shared.name == "shared" and shared.clip_sample is False
    assert shared.uploads is not None and shared.uploads.t0 == 690
    assert sorted(shared.uploads.index.tolist()) == sorted(m.ctx.split.members)
    client = m.load_target("client:2")
    assert client.extra == UNCLIPPED and client.meta["t_max"] == 689
    xs, ys = client.sample(2, torch.tensor([1, 2]), seed=0, sampler="ddim", ddim_steps=5)
    assert xs.shape == (2, 1, 8, 8)
    with pytest.raises(BadInput):
        m.check_target("client:4")
    with pytest.raises(BadInput):
        m.check_target("global")
    summary = json.loads(m.summary_path.read_text())
    assert summary["privacy_shared"]["epsilon"] == pytest.approx(p["epsilon"])


def test_privacy_follows_config(runs_dir):
    cfg = train_cfg("pfdm", "test", pfdm__t0=675)
    m = api.make_method(cfg, run_dir_for(cfg, runs_dir), "cpu")
    assert m.privacy("shared")["epsilon"] == pytest.approx(9.969, abs=1e-3)


def test_bad_config_is_refused(runs_dir):
    from privbench.core.config import build_config

    with pytest.raises(BadInput):
        build_config("pfdm", "digits", "test", 0, [("pfdm.t0", "0")])
    for method, sets in (("pfdm", {"pfdm__t0": 1001}), ("pfdm", {"clients__n_clients": 60}),
                         ("local", {"clients__majority_classes": 10}), ("feddm", {"clients__n_clients": 65})):
        cfg = train_cfg(method, "test", **sets)
        with pytest.raises(BadInput):
            api.train(cfg, runs_dir, "cpu")
        assert not run_dir_for(cfg, runs_dir).exists()  # refused before anything is written


# ------------------------------------------------------------------ slow: tiny preset end to end

TINY = dict(data__n_members=128, data__n_nonmembers=128)  # the data of the overfit centralized target


@pytest.fixture(scope="session")
def pfdm_tiny(runs_dir):
    return api.train(train_cfg("pfdm", "tiny", **TINY), runs_dir, "cpu")


@pytest.mark.slow
def test_tiny_pia_shared_near_chance_vs_centralized(pfdm_tiny, overfit_centralized, runs_dir):
    runner = pytest.importorskip("privbench.runs.attack")
    res = runner.run_attack(pfdm_tiny.cfg, "pia", "shared", runs_dir=runs_dir, device="cpu").to_json()
    ref = runner.run_attack(overfit_centralized.cfg, "pia", None, runs_dir=runs_dir, device="cpu").to_json()
    auc, auc_c = res["metrics"]["auc"], ref["metrics"]["auc"]
    print(f"PIA AUC: pfdm shared {auc:.3f}, overfit centralized {auc_c:.3f}")
    assert abs(auc - 0.5) < 0.1
    assert auc_c > 0.75 and auc_c - auc > 0.2
    assert res["privacy"]["epsilon"] == pytest.approx(8.774, abs=1e-3)


@pytest.mark.slow
def test_tiny_pipeline_samples_read_as_the_class(pfdm_tiny, runs_dir, tmp_path):
    from click.testing import CliRunner
    from sklearn.linear_model import LogisticRegression

    from privbench.cli import main

    x, y = api.load_dataset("digits")
    clf = LogisticRegression(max_iter=2000).fit(x.flatten(1).numpy(), y.numpy())
    k = pfdm_tiny.ctx.clients.majority[0][0]
    npz = tmp_path / "s.npz"
    r = CliRunner().invoke(main, ["sample", "--method", "pfdm", "--target", "pipeline:0", "--class", str(k), "--n", "32",
                                  "--preset", "tiny", "--runs-dir", str(runs_dir), "--device", "cpu",
                                  "--set", "data.n_members=128", "--set", "data.n_nonmembers=128",
                                  "--out", str(tmp_path / "g.png"), "--npz", str(npz)])
    assert r.exit_code == 0, r.output
    imgs = np.load(npz)["images"]
    pred = clf.predict(np.clip(imgs, -1, 1).reshape(len(imgs), -1))
    frac = float((pred == k).mean())
    print(f"pipeline:0 class {k}: {frac:.2f} of 32 samples classified as {k}")
    assert frac > 0.5
