"""Which diffusers folders and schedules load, which are refused (one line), and what the provenance says."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from diffusers import DDIMPipeline, DDIMScheduler, DDPMPipeline, DDPMScheduler
from ext_helpers import tiny_unet

from privbench.core.errors import BadInput
from privbench.models.external import load_external


def test_unet_folder_schedules_default_own_and_override(tmp_path):
    unet = tiny_unet(0)
    unet.save_pretrained(str(tmp_path / "u"))
    tgt, prov = load_external(tmp_path / "u")
    assert prov["format"] == "diffusers-unet" and prov["scheduler"]["source"].startswith("default: linear")
    assert np.allclose(tgt.alphas_cumprod.numpy(), DDPMScheduler().alphas_cumprod.numpy(), atol=1e-6)
    cos = DDPMScheduler(beta_schedule="squaredcos_cap_v2", num_train_timesteps=500)
    cos.save_pretrained(str(tmp_path / "sched"))
    tgt2, prov2 = load_external(tmp_path / "u", scheduler_config=tmp_path / "sched" / "scheduler_config.json")
    assert tgt2.num_timesteps == 500 and prov2["scheduler"]["beta_schedule"] == "squaredcos_cap_v2"
    assert np.allclose(tgt2.alphas_cumprod.numpy(), cos.alphas_cumprod.numpy(), atol=1e-6)
    assert prov2["weights_sha256"] == prov["weights_sha256"]          # same weights, another schedule
    # a scheduler_config.json beside the weights (what privbench export writes) is the model's own
    cos.save_pretrained(str(tmp_path / "u"))
    tgt3, prov3 = load_external(tmp_path / "u")
    assert tgt3.num_timesteps == 500 and prov3["scheduler"]["source"].endswith("u/scheduler_config.json")
    assert prov3["weights_sha256"] != prov["weights_sha256"]          # the schedule file is part of the model


def test_ddim_pipeline_and_trained_betas(tmp_path):
    betas = torch.linspace(1e-4, 0.03, 300).tolist()
    DDIMPipeline(unet=tiny_unet(0), scheduler=DDIMScheduler(num_train_timesteps=300, trained_betas=betas)
                 ).save_pretrained(str(tmp_path / "p"))
    tgt, prov = load_external(tmp_path / "p")
    assert prov["scheduler"]["class"] == "DDIMScheduler" and prov["scheduler"]["beta_schedule"] == "trained_betas"
    assert np.allclose(tgt.alphas_cumprod.numpy(), np.cumprod(1 - np.asarray(betas, dtype=np.float32)), rtol=1e-5)
    assert prov["pipeline"] == "DDIMPipeline"


def test_learned_variance_unet_gives_eps_from_the_first_channels(tmp_path):
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=2, block_out_channels=(16, 32), layers_per_block=1,
                       down_block_types=("DownBlock2D",) * 2, up_block_types=("UpBlock2D",) * 2, norm_num_groups=8)
    DDPMPipeline(unet=unet, scheduler=DDPMScheduler(variance_type="learned_range")).save_pretrained(str(tmp_path / "p"))
    tgt, prov = load_external(tmp_path / "p")
    x, t = torch.randn(2, 1, 8, 8), torch.tensor([3, 400])
    with torch.no_grad():
        assert torch.equal(tgt.predict_noise(x, t), unet(x, t).sample[:, :1])
    assert "learned variance" in prov["scheduler"]["sampling_variance"]


def _edit_json(path, **kv):
    d = json.loads(path.read_text())
    d.update(kv)
    path.write_text(json.dumps(d))


@pytest.mark.parametrize("edit,needle", [
    (lambda p: _edit_json(p / "model_index.json", vae=["diffusers", "AutoencoderKL"]), "latent"),
    (lambda p: _edit_json(p / "unet" / "config.json", _class_name="UNet2DConditionModel"),
     "not a diffusers UNet2DModel"),
    (lambda p: _edit_json(p / "unet" / "config.json", time_embedding_type="fourier"), "Fourier"),
    (lambda p: _edit_json(p / "scheduler" / "scheduler_config.json", _class_name="ScoreSdeVeScheduler"),
     "no discrete beta schedule"),
    (lambda p: _edit_json(p / "scheduler" / "scheduler_config.json", prediction_type="flow"), "prediction_type"),
    (lambda p: (p / "scheduler" / "scheduler_config.json").unlink(), "--scheduler-config"),
    (lambda p: (p / "unet" / "config.json").write_text("{not json"), "not a readable JSON"),
])
def test_left_out_formats_are_one_line(tmp_path, edit, needle):
    DDPMPipeline(unet=tiny_unet(0), scheduler=DDPMScheduler()).save_pretrained(str(tmp_path / "p"))
    edit(tmp_path / "p")
    with pytest.raises(BadInput, match=needle) as e:
        load_external(tmp_path / "p")
    assert "\n" not in str(e.value)
