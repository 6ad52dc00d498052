"""Audit a tiny Stable-Diffusion-shaped pipeline privbench did not train, through the CLI: fine-tuned with plain
diffusers code until it memorizes 32 captioned digits vs. the same architecture at random initialisation, and a
LoRA adapter over the frozen pre-trained base."""
from __future__ import annotations

import json

import pytest
import torch
from t2i_helpers import cli

#: the loss attack averages 8 seeded draws at t = 100 (SD's scaled_linear schedule keeps more signal at t = 200
#: than the linear one, and one draw is noisy on 32 + 32 records); SimA runs at its default t = 100
SETTINGS = {"loss": ("--set", "attack.t=100", "--set", "attack.n_draws=8"), "sima": (), "clid": (),
            "clid@vec": ()}


def attack(model, t2i, runs, name, *extra):
    code, out, err = cli("attack", "--model", model, "--members", t2i["members"], "--nonmembers",
                         t2i["nonmembers"], "--attack", name, "--runs-dir", runs, "--device", "cpu", "--json",
                         *SETTINGS.get(name, ()), *extra)
    assert code == 0, err
    return json.loads(out)


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


@pytest.mark.parametrize("name", ["loss", "sima"])
def test_lora_adapter_over_frozen_base_leaks_and_rekeys(t2i, tmp_path, name):
    from safetensors.torch import load_file, save_file

    leak = attack(t2i["pretrained"], t2i, tmp_path, name, "--lora", t2i["lora"])
    auc, ci = leak["metrics"]["auc"], leak["metrics"]["ci95"]["auc"]
    base = attack(t2i["pretrained"], t2i, tmp_path, name)       # the base alone never saw the members
    print(name, "lora", auc, ci, "base", base["metrics"]["auc"], base["metrics"]["ci95"]["auc"])
    assert auc >= 0.9 and ci[0] >= 0.8, leak["metrics"]
    assert base["metrics"]["ci95"]["auc"][0] <= 0.5 <= base["metrics"]["ci95"]["auc"][1], base["metrics"]
    lora = leak["provenance"]["model"]["lora"]
    assert len(lora["sha256"]) == 64 and lora["tensors"] > 0
    assert base["run_dir"] != leak["run_dir"]
    assert base["provenance"]["model"]["components_sha256"] == leak["provenance"]["model"]["components_sha256"]
    # a changed adapter (one tensor halved) is another model: another hash, another run
    changed = tmp_path / "changed"
    changed.mkdir()
    state = load_file(str(t2i["lora"] / "pytorch_lora_weights.safetensors"))
    k = sorted(state)[0]
    state[k] = state[k] * 0.5
    save_file(state, str(changed / "pytorch_lora_weights.safetensors"))
    other = attack(t2i["pretrained"], t2i, tmp_path, name, "--lora", changed)
    assert other["run_dir"] != leak["run_dir"] and other["provenance"]["model"]["lora"]["sha256"] != lora["sha256"]


def test_clid_separates_the_finetuned_model_not_the_control(t2i, tmp_path):
    for name in ("clid", "clid@vec"):
        leak = attack(t2i["pipeline"], t2i, tmp_path, name)
        null = attack(t2i["random"], t2i, tmp_path, name)
        print(name, leak["metrics"]["auc"], leak["metrics"]["ci95"]["auc"], "control", null["metrics"]["auc"],
              null["metrics"]["ci95"]["auc"])
        assert leak["metrics"]["ci95"]["auc"][0] > null["metrics"]["auc"], name
        assert leak["metrics"]["auc"] >= 0.75, leak["metrics"]


def test_memorization_generates_from_member_captions_in_pixel_space(t2i, tmp_path):
    res = attack(t2i["pipeline"], t2i, tmp_path, "memorization", "--set", "attack.n_samples=4", "--set",
                 "sample.sampler=ddim", "--set", "sample.ddim_steps=5")
    assert res["kind"] == "memorization" and res["metrics"]["n_generated"] == 4
    assert res["figures"]["n_training_records"] == 32           # the 32 members, in pixel space
    assert torch.tensor(res["metrics"]["memorized_fraction"]).isfinite()


def test_clid_scores_do_not_depend_on_the_batch(t2i_parts, tmp_path):
    """Each record's noise is its own (seeded by its index): the scores, and so the AUC, are the same whether the
    64 records go through in batches of 8 or in one batch of 64."""
    import numpy as np

    res = {b: attack(t2i_parts["random"], t2i_parts, tmp_path, "clid", "--set", f"attack.batch_size={b}", "--set",
                     "attack.clid_draws=2", "--set", "attack.bootstrap=0") for b in (8, 64)}
    s8, s64 = (np.load(res[b]["scores_path"])["scores"] for b in (8, 64))
    # float32 convolutions round differently in batches of different size: equal up to that (the batch-seeded
    # noise this replaces moved scores by their whole spread)
    assert np.allclose(s8, s64, rtol=1e-4, atol=1e-4), np.abs(s8 - s64).max()
    assert res[8]["metrics"]["auc"] == pytest.approx(res[64]["metrics"]["auc"], abs=1e-9)
    assert res[8]["figures"]["draws"] == 2 and res[8]["figures"]["queries_per_record"] == 2 * 3 * 3


def test_secmi_runs_at_the_secmi_ldm_level_on_a_latent_target(t2i_parts, tmp_path):
    res = attack(t2i_parts["random"], t2i_parts, tmp_path, "secmi", "--set", "attack.bootstrap=0")
    assert res["figures"]["t_sec"] == 150 and res["figures"]["t_sec_setting"] == "secmi_t_latent"
    assert res["figures"]["compared_levels"] == [140, 150]        # the official offset: t_sec - k and t_sec
    code, _, err = cli("attack", "--model", t2i_parts["random"], "--members", t2i_parts["members"], "--nonmembers",
                       t2i_parts["nonmembers"], "--attack", "secmi", "--runs-dir", tmp_path, "--device", "cpu",
                       "--set", "attack.secmi_k=20")
    assert code == 2 and "attack.secmi_t_latent=150" in err and "Traceback" not in err, err
