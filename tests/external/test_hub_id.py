"""`--model org/name`: resolved offline from the local Hugging Face cache (a cache folder built here in
huggingface_hub's layout), safetensors only; one line and exit 2 otherwise (docs/external-models.md)."""
from __future__ import annotations

import json

import pytest
from ext_helpers import cli, digits_split, tiny_unet, write_npz

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _cached(cache, repo: str):
    """The snapshot folder of ``repo`` in a cache laid out as huggingface_hub writes it (refs/main → commit)."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(COMMIT)
    snap = folder / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    return snap


@pytest.fixture
def hub(tmp_path, monkeypatch):
    from diffusers import DDPMPipeline, DDPMScheduler

    cache = tmp_path / "hf-cache"
    DDPMPipeline(unet=tiny_unet(0), scheduler=DDPMScheduler(num_train_timesteps=1000)).save_pretrained(
        str(_cached(cache, "acme/tiny-ddpm")))
    pickled = _cached(cache, "acme/pickled")
    (pickled / "config.json").write_text(json.dumps({"_class_name": "UNet2DModel"}))
    (pickled / "diffusion_pytorch_model.bin").write_bytes(b"not loaded")
    (m, _), (n, _), _ = digits_split(16, 16, seed=0)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return {"members": write_npz(tmp_path / "m.npz", m), "nonmembers": write_npz(tmp_path / "n.npz", n),
            "runs": tmp_path / "runs"}


def test_a_cached_hub_id_is_attacked_from_the_cache(hub):
    code, out, err = cli("attack", "--model", "acme/tiny-ddpm", "--members", hub["members"], "--nonmembers",
                         hub["nonmembers"], "--attack", "loss", "--runs-dir", hub["runs"], "--device", "cpu", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["target"] == "tiny-ddpm"  # the id's name, not the snapshot's commit
    assert f"models--acme--tiny-ddpm/snapshots/{COMMIT}" in res["provenance"]["model"]["path"]


@pytest.mark.parametrize("model, says", [("acme/not-cached", "not in the local Hugging Face cache"),
                                         ("acme/pickled", "holds no .safetensors weights")])
def test_a_hub_id_that_cannot_be_read_offline_is_one_line_exit_2(hub, model, says):
    code, _out, err = cli("attack", "--model", model, "--members", hub["members"], "--nonmembers", hub["nonmembers"],
                          "--attack", "loss", "--runs-dir", hub["runs"])
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("privbench: error: --model " + model) and says in lines[0], err
    assert not hub["runs"].exists()  # refused before anything ran


def test_an_existing_path_is_never_taken_for_a_hub_id(tmp_path, monkeypatch):
    from privbench.models.hub_cache import hub_id_of, is_hub_id

    monkeypatch.chdir(tmp_path)
    assert is_hub_id("acme/tiny")
    (tmp_path / "acme" / "tiny").mkdir(parents=True)
    assert not is_hub_id("acme/tiny") and not is_hub_id("./model") and not is_hub_id("a/b/c")
    assert hub_id_of(f"/x/models--acme--tiny/snapshots/{COMMIT}") == "acme/tiny" and hub_id_of("/x/model") is None
