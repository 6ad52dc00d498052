"""Audit a tiny Stable-Diffusion-shaped pipeline privbench did not train, through the CLI: fine-tuned until it
memorizes 32 captioned digits vs. the same architecture at random initialisation, and a LoRA adapter over the
frozen base."""
from __future__ import annotations

import json

import pytest

from t2i_helpers import cli


def attack(model, t2i, runs, name, *extra):
    code, out, err = cli("attack", "--model", model, "--members", t2i["members"], "--nonmembers",
                         t2i["nonmembers"], "--attack", name, "--runs-dir", runs, "--device", "cpu", "--json",
                         *extra)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["loss", "sima"])
def test_finetuned_pipeline_leaks_and_random_init_does_not(t2i, tmp_path, name):
    leak = attack(t2i["pipeline"], t2i, tmp_path, name)
    null = attack(t2i["random"], t2i, tmp_path, name)
    auc, ci = leak["metrics"]["auc"], leak["metrics"]["ci95"]["auc"]
    null_ci = null["metrics"]["ci95"]["auc"]
    print(name, "fine-tuned", auc, ci, "random", null["metrics"]["auc"], null_ci)
    assert auc >= 0.9 and ci[0] >= 0.8, leak["metrics"]
    assert null_ci[0] <= 0.5 <= null_ci[1], null["metrics"]
    prov = leak["provenance"]["model"]
    assert prov["format"] == "diffusers-sd-pipeline" and prov["vae_scaling_factor"] == pytest.approx(
        t2i["vae"].config.scaling_factor)
    assert all(len(prov["components_sha256"][k]) == 64 for k in ("unet", "vae", "text_encoder"))
    assert null["provenance"]["model"]["components_sha256"]["unet"] != prov["components_sha256"]["unet"]
    assert null["provenance"]["model"]["components_sha256"]["vae"] == prov["components_sha256"]["vae"]
    assert len(leak["provenance"]["captions_sha256"]) == 64


@pytest.mark.slow
@pytest.mark.parametrize("name", ["loss", "sima"])
def test_lora_adapter_over_frozen_base_leaks(t2i, tmp_path, name):
    leak = attack(t2i["random"], t2i, tmp_path, name, "--lora", t2i["lora"])
    auc, ci = leak["metrics"]["auc"], leak["metrics"]["ci95"]["auc"]
    print(name, "lora", auc, ci)
    assert auc >= 0.9 and ci[0] >= 0.8, leak["metrics"]
    lora = leak["provenance"]["model"]["lora"]
    assert len(lora["sha256"]) == 64 and lora["tensors"] > 0
    base = attack(t2i["random"], t2i, tmp_path, name)
    assert base["run_dir"] != leak["run_dir"]
    assert base["provenance"]["model"]["components_sha256"] == leak["provenance"]["model"]["components_sha256"]
