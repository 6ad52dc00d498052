"""v / x0 prediction and class-conditional UNets give the PIA ranking of their ε-prediction twins.

The twins are built from the same weights so that the conversion is checkable:
* a v-twin (x0-twin) is the ε-network E with its output re-expressed by the *definition* v = √ᾱ·ε − √(1−ᾱ)·x₀
  (x₀ = (x_t − √(1−ᾱ)·ε)/√ᾱ), with diffusers' own ᾱ; privbench must undo it to E's ε;
* a class-conditional UNet C (num_class_embeds) equals, for records of class k, the unconditional UNet U_k whose
  time-embedding bias absorbs row k of C's class embedding; privbench must route each record's label.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel
from diffusers.models.unets.unet_2d import UNet2DOutput
from ext_helpers import cli, digits_split, tiny_unet, write_npz

import privbench
from privbench.attacks.base import Records
from privbench.attacks.pia import PIA


class _Twin(UNet2DModel):
    """E's ε re-expressed as v (``mode='v'``) or x₀ (``mode='sample'``) using diffusers' ᾱ."""
    mode = "v"

    def forward(self, sample, timestep, class_labels=None, return_dict=True):
        eps = super().forward(sample, timestep, class_labels, return_dict=False)[0]
        a = DDPMScheduler().alphas_cumprod.to(sample.device)[timestep].view(-1, 1, 1, 1)
        x0 = (sample - (1 - a).sqrt() * eps) / a.sqrt()
        out = a.sqrt() * eps - (1 - a).sqrt() * x0 if self.mode == "v" else x0
        return UNet2DOutput(sample=out) if return_dict else (out,)


def _twin(base: UNet2DModel, mode: str) -> UNet2DModel:
    twin = type(f"Twin_{mode}", (_Twin,), {"mode": mode}).from_config(base.config)
    twin.load_state_dict(base.state_dict(), strict=True)
    return twin.eval()


@pytest.fixture(scope="module")
def records():
    (xm, ym), (xn, yn), _ = digits_split(24, 24, seed=1)
    return xm, ym, xn, yn


def _ranks(s):
    return np.argsort(np.argsort(s, kind="stable"), kind="stable")


@pytest.mark.parametrize("mode,pred", [("v", "v_prediction"), ("sample", "sample")])
def test_v_and_x0_prediction_twins_rank_like_epsilon(records, mode, pred):
    xm, ym, xn, yn = records
    base = tiny_unet(0)
    eps = privbench.attack(privbench.wrap(base, DDPMScheduler()), xm, xn, "pia", bootstrap=0)
    twin = _twin(base, mode)
    conv = privbench.attack(privbench.wrap(twin, DDPMScheduler(prediction_type=pred)), xm, xn, "pia", bootstrap=0)
    assert np.allclose(conv.scores, eps.scores, rtol=2e-4, atol=1e-7)  # float32 rounding of the conversion
    assert np.corrcoef(_ranks(conv.scores), _ranks(eps.scores))[0, 1] > 0.999
    assert conv.metrics["auc"] == pytest.approx(eps.metrics["auc"], abs=1.5 / (24 * 24))
    # the check has power: reading the twin's output as ε gives other scores
    wrong = privbench.attack(privbench.wrap(twin, DDPMScheduler()), xm, xn, "pia", bootstrap=0)
    assert not np.allclose(wrong.scores, eps.scores, rtol=0.05)


@pytest.mark.parametrize("pred", ["v_prediction", "sample"])
def test_folder_conversion_agrees_with_diffusers_x0(tmp_path, pred):
    """A saved v / x0 pipeline: privbench's ε gives the x̂₀ that diffusers' own DDPMScheduler.step derives."""
    from privbench.models.external import load_external

    unet = tiny_unet(2)
    sched = DDPMScheduler(prediction_type=pred)
    DDPMPipeline(unet=unet, scheduler=sched).save_pretrained(str(tmp_path / "p"))
    tgt, prov = load_external(tmp_path / "p")
    assert prov["prediction_type"] == pred and prov["format"] == "diffusers-pipeline"
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 1, 8, 8, generator=g)
    for t in (5, 200, 900):
        tt = torch.full((3,), t)
        with torch.no_grad():
            raw = unet(x, tt).sample
        x0_diffusers = sched.step(raw, t, x).pred_original_sample  # clipped to [-1, 1] (clip_sample default)
        a = tgt.alphas_cumprod[t]
        x0_ours = ((x - (1 - a).sqrt() * tgt.predict_noise(x, tt)) / a.sqrt()).clamp(-1, 1)
        assert torch.allclose(x0_ours, x0_diffusers, atol=2e-4), (t, (x0_ours - x0_diffusers).abs().max())


def _fold_class(cond: UNet2DModel, k: int) -> UNet2DModel:
    """The unconditional UNet equal to ``cond`` on class k: class_embedding.weight[k] moved into the bias."""
    cfg = dict(cond.config)
    cfg["num_class_embeds"] = None
    u = UNet2DModel.from_config(cfg)
    sd = {n: v.clone() for n, v in cond.state_dict().items() if not n.startswith("class_embedding")}
    sd["time_embedding.linear_2.bias"] += cond.class_embedding.weight[k].detach()
    u.load_state_dict(sd, strict=True)
    return u.eval()


def test_class_conditional_model_uses_each_records_label(records, tmp_path):
    xm, ym, xn, yn = records
    cond = tiny_unet(3, num_class_embeds=10)
    with torch.no_grad():
        cond.class_embedding.weight.mul_(3.0)  # make the labels matter a lot
    tgt = privbench.wrap(cond)
    assert tgt.num_classes == 10
    res = privbench.attack(tgt, (xm, ym), (xn, yn), "pia", bootstrap=0)
    x, y = torch.cat([xm, xn]), torch.cat([ym, yn])
    twin = np.zeros(len(y))
    for k in range(10):  # each record scored by the unconditional twin of its own class
        sel = (y == k).numpy()
        if sel.any():
            n = int(sel.sum())
            rec = Records(x[sel], torch.full((n,), -1), torch.zeros(n, dtype=torch.long), torch.arange(n))
            twin[sel] = PIA().run(privbench.wrap(_fold_class(cond, k)), rec).scores
    assert np.allclose(res.scores, twin, rtol=1e-4, atol=1e-6)
    assert np.corrcoef(_ranks(res.scores), _ranks(twin))[0, 1] > 0.999
    shuffled = privbench.attack(tgt, (xm, (ym + 1) % 10), (xn, (yn + 1) % 10), "pia", bootstrap=0)
    assert not np.allclose(shuffled.scores, res.scores, rtol=0.05), "the label must change the scores"
    # the same through a saved UNet folder and the CLI: labels come from the .npz
    cond.save_pretrained(str(tmp_path / "unet"))
    m, n = write_npz(tmp_path / "m.npz", xm, ym), write_npz(tmp_path / "n.npz", xn, yn)
    code, out, err = cli("attack", "--model", tmp_path / "unet", "--members", m, "--nonmembers", n, "--attack", "pia",
                         "--preset", "test", "--runs-dir", tmp_path / "runs", "--device", "cpu", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["provenance"]["model"]["format"] == "diffusers-unet"
    assert r["provenance"]["model"]["scheduler"]["source"].startswith("default: linear")
    assert np.allclose(np.load(r["scores_path"])["scores"], res.scores, rtol=1e-6, atol=1e-9)
    # without labels a class-conditional model is refused (one line, nothing written)
    write_npz(tmp_path / "nolabels.npz", xm)
    code, out, err = cli("attack", "--model", tmp_path / "unet", "--members", tmp_path / "nolabels.npz",
                         "--nonmembers", n, "--attack", "pia", "--runs-dir", tmp_path / "runs2", "--device", "cpu")
    assert code == 2 and "class-conditional" in err and not (tmp_path / "runs2").exists()


def test_wrap_passes_device_and_name_and_the_plugin_api_is_exported():
    """``privbench.wrap`` keeps ``device`` and ``name``; the plug-in base classes are exported."""
    from diffusers import UNet2DModel

    unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=1, block_out_channels=(8, 8),
                       down_block_types=("DownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "UpBlock2D"),
                       layers_per_block=1, norm_num_groups=4)
    tgt = privbench.wrap(unet, device="cpu", name="mine")
    assert tgt.name == "mine" and str(tgt.device) == "cpu"
    from privbench.attacks.base import Attack
    from privbench.privacy.accountants.base import DPSGDAccountant

    assert privbench.Attack is Attack and privbench.DPSGDAccountant is DPSGDAccountant
    assert {"Attack", "Method", "ACCOUNTANTS", "register_dataset", "wrap"} <= set(privbench.__all__)
    assert all(hasattr(privbench, n) for n in privbench.__all__)
