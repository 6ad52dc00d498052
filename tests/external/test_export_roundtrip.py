"""privbench export → diffusers from_pretrained → the same ε; attack --model on the export → the native scores."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from ext_helpers import cli, files_under
from helpers import train_cfg


@pytest.fixture(scope="module", params=["conditional", "unconditional"])
def trained(request, runs_dir):
    from privbench.runs import train as api

    sets = {} if request.param == "conditional" else {"model__class_conditional": False}
    cfg = train_cfg("centralized", "test", **sets)
    method = api.train(cfg, runs_dir, "cpu")
    return request.param, method, cfg


def _export(run_dir, out):
    code, stdout, err = cli("export", run_dir, "--out", out, "--json")
    assert code == 0, err
    return json.loads(stdout)


def test_export_from_pretrained_predicts_like_the_target(trained, tmp_path):
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    import privbench

    kind, method, cfg = trained
    run_dir = method.ctx.run_dir
    out = tmp_path / "export"
    meta = _export(run_dir, out)
    tgt = privbench.load_target(run_dir, device="cpu")
    if kind == "conditional":
        assert meta["layout"] == "unet+scheduler" and (out / "config.json").is_file()
        unet = UNet2DModel.from_pretrained(str(out), use_safetensors=True)
        sched = DDPMScheduler.from_pretrained(str(out))
        assert unet.config.num_class_embeds == 10 and unet.config.class_embed_type is None
    else:
        assert meta["layout"] == "pipeline" and (out / "model_index.json").is_file()
        pipe = DDPMPipeline.from_pretrained(str(out), use_safetensors=True)
        unet, sched = pipe.unet, pipe.scheduler
        assert unet.config.num_class_embeds is None
    assert not list(out.rglob("*.bin")), "weights are written as safetensors only"
    assert sched.config.num_train_timesteps == 1000 and sched.config.prediction_type == "epsilon"
    assert np.allclose(sched.alphas_cumprod.numpy(), tgt.alphas_cumprod.numpy(), atol=1e-6)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(16, 1, 8, 8, generator=g)
    t = torch.randint(0, 1000, (16,), generator=g)
    y = torch.randint(0, 10, (16,), generator=g) if kind == "conditional" else None
    with torch.no_grad():
        ours = tgt.predict_noise(x, t, y)
        theirs = unet(x, t, class_labels=y).sample
    assert (ours - theirs).abs().max() <= 1e-6
    if kind == "conditional":  # the labels matter: another label gives another prediction
        with torch.no_grad():
            assert (unet(x, t, class_labels=(y + 1) % 10).sample - theirs).abs().max() > 1e-4
    assert meta["source_run"] == str(Path(run_dir).resolve()) and meta["privacy"] is None


def test_attack_on_the_export_gives_the_native_scores(trained, runs_dir, tmp_path):
    kind, method, cfg = trained
    run_dir = method.ctx.run_dir
    common = ["--attack", "pia", "--preset", "test", "--device", "cpu", "--json"]
    extra = [] if kind == "conditional" else ["--set", "model.class_conditional=false"]
    code, out, err = cli("attack", "--method", "centralized", "--runs-dir", runs_dir, *common, *extra)
    assert code == 0, err
    native = json.loads(out)
    export = tmp_path / "export"
    _export(run_dir, export)
    split = json.loads((run_dir / "split.json").read_text())
    np.save(tmp_path / "members.npy", np.asarray(split["members"]))
    np.save(tmp_path / "nonmembers.npy", np.asarray(split["nonmembers"]))
    code, out, err = cli("attack", "--model", export, "--members", tmp_path / "members.npy", "--nonmembers",
                         tmp_path / "nonmembers.npy", "--dataset", "digits", "--runs-dir", tmp_path / "runs", *common)
    assert code == 0, err
    ext = json.loads(out)
    a, b = np.load(native["scores_path"]), np.load(ext["scores_path"])
    assert list(a["index"]) == list(b["index"]) and list(a["labels"]) == list(b["labels"])
    assert np.allclose(a["scores"], b["scores"], rtol=1e-5, atol=1e-7)
    assert ext["metrics"]["auc"] == pytest.approx(native["metrics"]["auc"], abs=1e-12)
    assert ext["dataset"] == "digits" and ext["provenance"]["members"]["kind"] == "dataset-indices"


def test_gsa_gradients_on_the_export_equal_the_native_targets(trained, tmp_path):
    """gsa takes per-record gradients through an outside model's own call (diffusers' ``class_labels``,
    ``return_dict``) and prediction-type conversion (``Target.network_eps``): on the export of a native target the
    per-parameter gradient norms are the native ones (an outside model is not refused as "composing several
    networks")."""
    from privbench.attacks.base import Records
    from privbench.attacks.gsa import gradient_features
    from privbench.models.external import load_external
    from privbench.runs import train as api

    kind, method, cfg = trained
    _export(method.ctx.run_dir, tmp_path / "export")
    native = api.load_target(method.ctx.run_dir, device="cpu")
    outside = load_external(tmp_path / "export", device="cpu")[0]
    assert outside.white_box and native.white_box
    idx = method.ctx.split.members[:6]
    x, y = method.ctx.records(idx)
    recs = Records(x, y, torch.ones(len(idx), dtype=torch.long), torch.as_tensor(idx))
    for variant in (1, 2):
        a, b = (gradient_features(t, recs, [10, 200, 600], variant=variant, seed=0, batch_size=4)
                for t in (native, outside))
        # one norm per parameter tensor; the two networks list their tensors in another order (label_emb last)
        assert a.shape == b.shape and np.allclose(np.sort(a, 1), np.sort(b, 1), rtol=1e-4, atol=1e-7)


def test_export_refuses_to_overwrite(trained, tmp_path):
    kind, method, cfg = trained
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, stdout, err = cli("export", method.ctx.run_dir, "--out", out)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "refusing to overwrite" in err
    assert files_under(out) == [out / "keep.txt"] and (out / "keep.txt").read_text() == "mine"
    code, stdout, err = cli("export", tmp_path, "--out", tmp_path / "x")
    assert code == 2 and "not a privbench run directory" in err and not (tmp_path / "x").exists()
    # an --out that cannot be created is named as given (not the temporary folder export writes first)
    code, stdout, err = cli("export", method.ctx.run_dir, "--out", out / "keep.txt" / "sub")
    assert code == 2 and err.strip().endswith(f"--out {out / 'keep.txt' / 'sub'}: {out / 'keep.txt'} is not a folder")


def test_networks_with_an_extra_condition_are_not_exported():
    """PFDM client models add a clipped/unclipped flag embedding: diffusers' UNet2DModel has no such input."""
    from privbench.core.errors import BadInput
    from privbench.models.unet import Denoiser
    from privbench.runs.export import to_diffusers_unet

    with pytest.raises(BadInput, match="extra condition"):
        to_diffusers_unet(Denoiser(1, 8, (8, 16), norm_num_groups=4, num_classes=10, num_extra=2))
    with pytest.raises(BadInput, match="not privbench's Denoiser"):
        to_diffusers_unet(torch.nn.Linear(2, 2))
