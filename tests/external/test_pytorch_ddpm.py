"""pytorch-ddpm checkpoints (the CIFAR-10 victims of the official PIA and SecMI code): exact keys, strict load."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from ext_helpers import cli, write_npz

from privbench.core.errors import BadInput


def _res(p, shortcut, attn):
    keys = [f"{p}.{m}.{w}" for m in ("block1.0", "block1.2", "temb_proj.1", "block2.0", "block2.3")
            for w in ("weight", "bias")]
    if shortcut:
        keys += [f"{p}.shortcut.weight", f"{p}.shortcut.bias"]
    if attn:
        keys += [f"{p}.attn.{m}.{w}" for m in ("group_norm", "proj_q", "proj_k", "proj_v", "proj")
                 for w in ("weight", "bias")]
    return keys


def expected_keys():
    """The state-dict keys of pytorch-ddpm's UNet(T=10, ch=32, ch_mult=[1,2], attn=[1], num_res_blocks=1),
    written out from its model.py: levels of ResBlocks + DownSample ``main``, middle, up path, tail."""
    keys = ["time_embedding.timembedding.0.weight"]
    keys += [f"time_embedding.timembedding.{i}.{w}" for i in (1, 3) for w in ("weight", "bias")]
    keys += ["head.weight", "head.bias", "tail.0.weight", "tail.0.bias", "tail.2.weight", "tail.2.bias"]
    keys += _res("downblocks.0", False, False) + ["downblocks.1.main.weight", "downblocks.1.main.bias"]
    keys += _res("downblocks.2", True, True)
    keys += _res("middleblocks.0", False, True) + _res("middleblocks.1", False, False)
    keys += _res("upblocks.0", True, True) + _res("upblocks.1", True, True)
    keys += ["upblocks.2.main.weight", "upblocks.2.main.bias"]
    keys += _res("upblocks.3", True, False) + _res("upblocks.4", True, False)
    return set(keys)


SMALL = dict(T=10, ch=32, ch_mult=[1, 2], attn=[1], num_res_blocks=1)


def test_module_tree_has_pytorch_ddpm_keys_and_shapes():
    from privbench.models.pytorch_ddpm import PytorchDDPMConfig, PytorchDDPMUNet

    sd = PytorchDDPMUNet(PytorchDDPMConfig(**SMALL)).state_dict()
    assert set(sd) == expected_keys()
    assert sd["time_embedding.timembedding.0.weight"].shape == (10, 32)
    assert sd["head.weight"].shape == (32, 3, 3, 3) and sd["tail.2.weight"].shape == (3, 32, 3, 3)
    assert sd["upblocks.0.block1.2.weight"].shape == (64, 128, 3, 3)   # concat of the 64-wide skip
    assert sd["upblocks.3.block1.2.weight"].shape == (32, 96, 3, 3)    # 64 from below + 32 skip
    # the sinusoidal table: row t, column 2i = sin(t·10000^(−2i/ch)), column 2i+1 = cos(...)
    table = sd["time_embedding.timembedding.0.weight"]
    t, i = 7, 3
    w = 10000 ** (-2 * i / 32)
    assert torch.allclose(table[t, 2 * i], torch.tensor(np.sin(t * w), dtype=torch.float32), atol=1e-6)
    assert torch.allclose(table[t, 2 * i + 1], torch.tensor(np.cos(t * w), dtype=torch.float32), atol=1e-6)
    # the CIFAR-10 defaults: 35.7M trained parameters (+ the frozen 1000×128 time table), as the paper preset says
    full = PytorchDDPMUNet()
    assert sum(p.numel() for p in full.parameters() if p.requires_grad) == 35_746_307
    assert sum(p.numel() for p in full.parameters()) == 35_746_307 + 1000 * 128


def _ckpt(path, seed_ema=1, seed_net=2, dataparallel=True):
    """A ckpt.pt as pytorch-ddpm's main.py writes it: net_model (DataParallel keys), ema_model, sched, optim,
    step, x_T; random weights with that code base's key names."""
    def weights(seed):
        g = torch.Generator().manual_seed(seed)
        return {k: torch.randn(v.shape, generator=g) * 0.05 if k != "time_embedding.timembedding.0.weight" else v
                for k, v in reference.items()}

    from privbench.models.pytorch_ddpm import PytorchDDPMConfig, PytorchDDPMUNet

    reference = PytorchDDPMUNet(PytorchDDPMConfig(**SMALL)).state_dict()
    assert set(reference) == expected_keys()
    net = weights(seed_net)
    if dataparallel:
        net = {f"module.{k}": v for k, v in net.items()}
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=2e-4)
    torch.save({"net_model": net, "ema_model": weights(seed_ema), "step": 800000,
                "sched": torch.optim.lr_scheduler.LambdaLR(opt, lambda _epoch: 1.0).state_dict(),
                "optim": opt.state_dict(), "x_T": torch.randn(2, 3, 32, 32)}, path)
    return path


def test_ckpt_loads_strictly_predicts_and_says_which_weights(tmp_path):
    from privbench.models.external import load_external

    p = _ckpt(tmp_path / "ckpt.pt")
    ema, prov = load_external(p, arch="pytorch-ddpm")
    assert prov["format"] == "pytorch-ddpm" and prov["weights"] == "ema_model" and prov["ema"] is True
    assert prov["arch"]["ch"] == 32 and prov["arch"]["ch_mult"] == [1, 2] and prov["arch"]["attn"] == [1]
    assert prov["scheduler"]["variance_type"] == "fixed_large" and prov["prediction_type"] == "epsilon"
    assert prov["step"] == 800000 and len(prov["weights_sha256"]) == 64
    net, prov_net = load_external(p, arch="pytorch-ddpm", use_ema=False)   # DataParallel 'module.' keys
    assert prov_net["weights"] == "net_model" and prov_net["ema"] is False
    x = torch.rand(4, 3, 32, 32) * 2 - 1
    t = torch.tensor([0, 3, 5, 9])
    e1, e2 = ema.predict_noise(x, t), net.predict_noise(x, t)
    assert e1.shape == x.shape and torch.isfinite(e1).all()
    assert (e1 - e2).abs().max() > 1e-3, "EMA and raw weights must give different predictions"
    # the prediction is the network's: loading the state dict into a fresh module gives the same numbers
    from privbench.models.pytorch_ddpm import PytorchDDPMConfig, PytorchDDPMUNet

    fresh = PytorchDDPMUNet(PytorchDDPMConfig(**SMALL)).eval()
    fresh.load_state_dict(torch.load(p, weights_only=True)["ema_model"], strict=True)
    with torch.no_grad():
        assert torch.allclose(fresh(x, t), e1, atol=1e-6)
    # ᾱ: linear β 1e-4..0.02 over T (T = 10 here, read from the checkpoint's time table)
    betas = np.linspace(1e-4, 0.02, 10)
    assert np.allclose(ema.alphas_cumprod.numpy(), np.cumprod(1 - betas), rtol=1e-6)


def test_mismatched_state_dict_is_one_line(tmp_path):
    from privbench.models.external import load_external

    p = _ckpt(tmp_path / "ckpt.pt")
    ck = torch.load(p, weights_only=True)
    del ck["ema_model"]["downblocks.2.shortcut.weight"]
    torch.save(ck, p)
    with pytest.raises(BadInput, match="do not match the network .*1 missing: downblocks.2.shortcut.weight"):
        load_external(p, arch="pytorch-ddpm")
    torch.save({"ema_model": ck["ema_model"]}, tmp_path / "only_ema.pt")
    with pytest.raises(BadInput, match="no 'net_model'"):
        load_external(tmp_path / "only_ema.pt", arch="pytorch-ddpm", use_ema=False)


def test_cli_attacks_a_pytorch_ddpm_ckpt(tmp_path):
    p = _ckpt(tmp_path / "ckpt.pt")
    g = torch.Generator().manual_seed(0)
    x = torch.rand(24, 3, 32, 32, generator=g) * 2 - 1
    mem, non = write_npz(tmp_path / "m.npz", x[:12]), write_npz(tmp_path / "n.npz", x[12:])
    code, out, err = cli("attack", "--model", p, "--arch", "pytorch-ddpm", "--members", mem, "--nonmembers", non,
                         "--attack", "pia", "--set", "attack.t=5", "--preset", "test", "--runs-dir", tmp_path / "runs",
                         "--device", "cpu", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["method"] == "external" and res["n_members"] == 12 and res["attack_config"]["t"] == 5
    assert res["provenance"]["model"]["weights"] == "ema_model"
    assert any("ema_model" in n for n in res["notes"])


def test_secmi_split_file_on_cifar10_layout(tmp_path):
    """The reproduction path: a pytorch-ddpm ckpt.pt, SecMI's CIFAR10_train_ratio0.5.npz, CIFAR-10 on disk."""
    from ext_helpers import write_fake_cifar10

    images = write_fake_cifar10(tmp_path / "data", per_batch=4)         # 20 training records
    p = _ckpt(tmp_path / "ckpt.pt")
    mem, non = np.array([0, 5, 9, 12, 19, 3]), np.array([1, 2, 8, 15, 17, 11])
    np.savez(tmp_path / "CIFAR10_train_ratio0.5.npz", mia_train_idxs=mem, mia_eval_idxs=non, ratio=0.5)
    code, out, err = cli("attack", "--model", p, "--arch", "pytorch-ddpm", "--split",
                         tmp_path / "CIFAR10_train_ratio0.5.npz", "--dataset", "cifar10", "--data-root",
                         tmp_path / "data", "--attack", "pia", "--set", "attack.t=5", "--preset", "test",
                         "--runs-dir", tmp_path / "runs",
                         "--device", "cpu", "--json")
    assert code == 0, err
    res = json.loads(out)
    z = np.load(res["scores_path"])
    assert z["index"].tolist() == mem.tolist() + non.tolist() and z["labels"].tolist() == [1] * 6 + [0] * 6
    assert res["dataset"] == "cifar10" and res["provenance"]["members"]["kind"] == "dataset-indices"
    # the records attacked are the files' pixels, x/127.5 − 1, in data_batch_1..5 order (torchvision's order)
    from privbench import load_dataset

    x, _ = load_dataset("cifar10", str(tmp_path / "data"))
    assert torch.allclose(x[mem], torch.from_numpy(images[mem]).float() / 127.5 - 1)
