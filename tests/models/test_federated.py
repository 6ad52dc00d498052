"""Federated baselines on PFDM's client split: ``local`` (each client alone) and ``feddm`` (FedAvg DDPM)."""
from __future__ import annotations

import json

import pytest
import torch
from helpers import train_cfg

from privbench.core.errors import BadInput
from privbench.models.checkpoint import load_weights
from privbench.models.methods import feddm as feddm_mod
from privbench.models.methods.feddm import fedavg
from privbench.runs import train as api
from privbench.runs.store import run_dir_for


def test_fedavg_is_the_weighted_mean():
    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.0]), "n": torch.tensor([3])}
    b = {"w": torch.tensor([3.0, 6.0]), "b": torch.tensor([4.0]), "n": torch.tensor([3])}
    out = fedavg([a, b], [1, 3])
    assert torch.allclose(out["w"], torch.tensor([2.5, 5.0])) and torch.allclose(out["b"], torch.tensor([3.0]))
    assert torch.equal(out["n"], torch.tensor([3]))


def test_local_trains_each_client_alone(runs_dir):
    m = api.train(train_cfg("local"), runs_dir, "cpu")
    assert m.default_target == "client:0"
    assert m.target_names() == [f"client:{k}" for k in range(4)]
    clients = json.loads((m.ctx.run_dir / "clients.json").read_text())["clients"]
    assert sorted(sum(clients, [])) == sorted(m.ctx.split.members)  # the same member split as every method
    t0, t1 = m.load_target("client:0"), m.load_target("client:1")
    assert m.privacy("client:0") is None
    p0 = torch.cat([p.flatten() for p in t0.model.parameters()])
    p1 = torch.cat([p.flatten() for p in t1.model.parameters()])
    assert not torch.allclose(p0, p1)  # different data and seeds
    x, y = t1.sample(2, torch.tensor([0, 5]), seed=0, sampler="ddim", ddim_steps=5)
    assert x.shape == (2, 1, 8, 8) and torch.isfinite(x).all()
    with pytest.raises(BadInput):
        m.check_target("client:4")
    log = (m.ctx.run_dir / "log.txt").read_text()
    assert all(f"[client{k}]" in log for k in range(4))


def test_local_uses_the_pfdm_client_split(runs_dir):
    a = api.train(train_cfg("local"), runs_dir, "cpu")
    b = api.make_method(train_cfg("pfdm"), run_dir_for(train_cfg("pfdm"), runs_dir), "cpu")
    c = api.make_method(train_cfg("feddm"), run_dir_for(train_cfg("feddm"), runs_dir), "cpu")
    assert a.ctx.clients.clients == b.ctx.clients.clients == c.ctx.clients.clients


def test_client_models_are_attacked_on_their_own_records(runs_dir):
    from privbench.runs.attack import build_records

    for m in (api.make_method(train_cfg(n), run_dir_for(train_cfg(n), runs_dir), "cpu") for n in ("local", "pfdm")):
        for tgt in (["client:1"] + (["pipeline:1"] if m.name == "pfdm" else [])):
            r = build_records(m, tgt)
            mem = r.index[r.labels == 1].tolist()
            non = r.index[r.labels == 0].tolist()
            assert sorted(mem) == sorted(m.ctx.clients.clients[1]), (m.name, tgt)
            assert set(non) <= set(m.ctx.split.nonmembers) and len(non) > 0
    r = build_records(m, "shared")  # the shared model saw every member's upload
    assert int(r.labels.sum()) == len(m.ctx.split.members)


def test_feddm_one_round_is_the_size_weighted_mean(runs_dir, monkeypatch):
    captured = []
    real = feddm_mod.train_denoiser

    def spy(model, data, *a, **k):
        out = real(model, data, *a, **k)
        captured.append(({n: v.detach().clone() for n, v in model.state_dict().items()}, len(data)))
        return out

    monkeypatch.setattr(feddm_mod, "train_denoiser", spy)
    cfg = train_cfg("feddm", fed__rounds=1, fed__local_steps=4)
    m = api.train(cfg, runs_dir, "cpu")
    sizes = [len(c) for c in m.ctx.clients.clients]
    assert [n for _, n in captured] == sizes and len(set(sizes)) > 1  # unequal clients: weights matter
    t = load_weights(m.ctx.ckpt_dir / "global.safetensors")
    glob = {k[6:]: v for k, v in t.items() if k.startswith("model.")}
    total = sum(sizes)
    for k, v in glob.items():
        expect = sum(s[k].double() * n / total for s, n in captured)
        assert torch.allclose(v.double(), expect, atol=1e-6), k
    # clients really differ (the average is not trivially any one of them)
    k0 = next(iter(glob))
    assert not torch.allclose(captured[0][0][k0], captured[1][0][k0])
    # per-client checkpoints are gone once the round is averaged; the global is checkpointed per round
    assert not list(m.ctx.ckpt_dir.glob("fed_r*"))
    assert json.loads((m.ctx.ckpt_dir / "global.state.json").read_text())["round"] == 1
    tgt = m.load_target()
    assert tgt.name == "global" and m.privacy("global") is None


def test_feddm_is_deterministic_and_resumes(runs_dir, tmp_path, monkeypatch):
    cfg = train_cfg("feddm", seed=3)
    a = api.train(cfg, runs_dir, "cpu")
    wa = load_weights(a.ctx.ckpt_dir / "global.safetensors")
    # interrupt a second run in round 2 (client 2) and resume it
    real = feddm_mod.train_denoiser
    calls = {"n": 0}

    def flaky(model, data, *args, **kw):
        calls["n"] += 1
        if calls["n"] == 7:
            raise KeyboardInterrupt
        return real(model, data, *args, **kw)

    monkeypatch.setattr(feddm_mod, "train_denoiser", flaky)
    with pytest.raises(KeyboardInterrupt):
        api.train(cfg, tmp_path, "cpu")
    monkeypatch.setattr(feddm_mod, "train_denoiser", real)
    b = api.train(cfg, tmp_path, "cpu")
    assert "resuming FedAvg at round 1/2" in (b.ctx.run_dir / "log.txt").read_text()
    wb = load_weights(b.ctx.ckpt_dir / "global.safetensors")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_feddm_prox_runs(runs_dir):
    m = api.train(train_cfg("feddm", fed__rounds=1, fed__local_steps=3, fed__prox_mu=0.01), runs_dir, "cpu")
    assert (m.ctx.ckpt_dir / "global.safetensors").exists()


def test_memorization_of_a_client_model_uses_that_clients_records(runs_dir):
    from privbench.runs.attack import run_attack

    cfg = train_cfg("local", attack__n_samples=8, sample__sampler="ddim", sample__ddim_steps=3)
    res = run_attack(cfg, "memorization", "client:1", runs_dir=runs_dir, device="cpu").to_json()
    m = api.make_method(cfg, run_dir_for(cfg, runs_dir), "cpu")
    assert res["figures"]["n_training_records"] == len(m.ctx.clients.clients[1])
    assert set(res["figures"]["memorized_training_records"]) <= set(m.ctx.clients.clients[1])
