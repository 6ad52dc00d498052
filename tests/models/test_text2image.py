"""The native text-to-image methods (models/text2image.py, methods txt2img and dp-txt2img): exact per-record gradients of
the conditional UNet (every parameter and LoRA adapters), a public pre-training that never reads a member, the
exported pipeline equal to plain diffusers calls, DP accounting equal to `privbench account`, and the end-to-end
runs through the CLI."""
from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from helpers import assert_clipped_sum_matches, per_example_grads, train_cfg

from privbench.cli import main
from privbench.core.mechanisms import flat_norms
from privbench.models.grad_sample import PerSampleGrads

pytestmark = [pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]
pytest.importorskip("transformers")


def _net(mode: str):
    from privbench.models import text2image as T
    from privbench.models.trainable import apply_trainable

    cfg = train_cfg("txt2img", "test")
    vae, tok, te, unet = T.build_components(cfg, 1, 8, seed=0)
    from privbench.models.latent import CaptionTable

    text = CaptionTable(tok, te, "cpu")
    text.ids(T.class_captions(cfg, 10))
    net = T.TextDenoiser(unet, text.table)
    info = apply_trainable(net, mode, rank=3, seed=0)
    with torch.no_grad():  # peft's B = 0 would make every lora_A gradient zero: move off it
        for n, p in net.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    return net, info, cfg




@pytest.mark.parametrize("mode", ["all", "lora"])
@pytest.mark.parametrize("backend", ["hooks", "ghost"])
def test_per_record_gradients_of_the_conditional_unet_equal_per_example_autograd(mode, backend):
    from privbench.core.schedule import alphas_cumprod
    from privbench.models.dp_sgd import multi_draw_loss

    net, info, _ = _net(mode)
    names = [n for n, p in net.named_parameters() if p.requires_grad]
    if mode == "lora":
        assert all("lora_" in n for n in names) and info["n_trainable"] < info["n_total"]
        assert any("attn2.to_k.lora_A" in n for n in names)  # the cross-attention's key (reads the text) adapted
    g = torch.Generator().manual_seed(3)
    n, k = 4, 2
    records = (torch.randn((n, 4, 4, 4), generator=g), torch.randint(0, 11, (n,), generator=g),
               torch.randint(0, 1000, (n, k), generator=g), torch.randn((n, k, 4, 4, 4), generator=g))
    loss_fn = multi_draw_loss(alphas_cumprod().float())
    ref = per_example_grads(net, loss_fn, records)
    ref_norms = flat_norms(ref)
    assert torch.all(ref_norms > 0)
    assert_clipped_sum_matches(PerSampleGrads(net, backend), loss_fn, records, ref, names, 5e-5, 1e-5)


def test_caption_dropout_drops_with_its_probability_and_only_to_the_null_row():
    from privbench.models.text2image import dropped

    g = torch.Generator().manual_seed(0)
    rows = torch.randint(1, 11, (20000,), generator=g)
    out = dropped(rows, torch.randn((20000, 4, 4, 4), generator=g), 0.1)
    frac = float((out == 0).float().mean())
    assert 0.09 < frac < 0.11
    assert torch.equal(out[out != 0], rows[out != 0])
    assert torch.equal(dropped(rows, torch.randn((20000, 4, 4, 4)), 0.0), rows)


def _cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def t2i_run(runs_dir):
    """A t2i run of the test preset (its pre-training and fine-tuning), trained through the API."""
    from privbench.runs import train as api

    cfg = train_cfg("txt2img", "test")
    method = api.train(cfg, runs_dir, "cpu")
    return cfg, method


def test_pretraining_never_reads_a_member(tmp_path, monkeypatch):
    """The pre-training reads the public records only (a member or non-member index requested → the test fails)."""
    from privbench.models import text2image as T
    from privbench.models.method import RunContext

    cfg = train_cfg("txt2img", "test", train__public_seed=7)  # its own pre-training (not the cached one)
    ctx = RunContext(cfg, tmp_path / "run", torch.device("cpu"), runs_root=tmp_path)
    private = set(ctx.split.members) | set(ctx.split.nonmembers)
    assert ctx.split.public and not private & set(ctx.split.public)
    read = RunContext.records

    def records(self, indices):
        idx = [int(i) for i in indices]
        assert not private & set(idx), "the pre-training read a member or non-member"
        return read(self, idx)

    monkeypatch.setattr(RunContext, "records", records)
    folder = T.pretrained_pipeline(ctx)
    assert (folder / "model_index.json").is_file()
    rec = json.loads((folder.parent / "pretrain.json").read_text())
    assert rec["n_public"] == len(ctx.split.public) and rec["seed"] == 7


def test_the_exported_pipeline_is_what_the_target_queries(t2i_run):
    """The run's pipeline/ folder, called with plain diffusers/transformers code, gives the target's ε̂."""
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTokenizer

    cfg, method = t2i_run
    tgt = method.load_target()
    folder = method.ctx.run_dir / "pipeline"
    unet = UNet2DConditionModel.from_pretrained(str(folder / "unet")).eval()
    vae = AutoencoderKL.from_pretrained(str(folder / "vae")).eval()
    te = CLIPTextModel.from_pretrained(str(folder / "text_encoder")).eval()
    tok = CLIPTokenizer.from_pretrained(str(folder / "tokenizer"))
    x, y = method.ctx.records(method.ctx.split.members[:6])
    z, rows = tgt.query_inputs(x, y)
    with torch.no_grad():
        z_ref = vae.encode(x).latent_dist.mean * vae.config.scaling_factor
        caps = [f"a picture of the digit {w}" for w in
                ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")]
        ids = tok([caps[int(v)] for v in y], padding="max_length", max_length=tok.model_max_length,
                  truncation=True, return_tensors="pt").input_ids
        emb = te(ids)[0]
        t = torch.full((len(x),), 300)
        noise = torch.randn(z_ref.shape, generator=torch.Generator().manual_seed(0))
        a = tgt.alphas_cumprod[t].view(-1, 1, 1, 1)
        z_t = a.sqrt() * z_ref + (1 - a).sqrt() * noise
        ref = unet(z_t, t, encoder_hidden_states=emb).sample
        got = tgt.predict_noise(z_t, t, rows)
    assert torch.allclose(z, z_ref, atol=1e-5)
    assert torch.allclose(got, ref, atol=1e-5)
    images, labels = tgt.sample(4, torch.tensor([1, 2, 3, 4]), seed=0, sampler="ddim", ddim_steps=5)
    assert images.shape == (4, 1, 8, 8) and labels.tolist() == [1, 2, 3, 4]
    assert float(images.min()) >= -1 and float(images.max()) <= 1


def test_t2i_runs_through_the_cli_and_its_pipeline_audits_as_an_outside_model(t2i_run, runs_dir, tmp_path):
    """`privbench attack --method txt2img` and `attack --model <run>/pipeline` on the same records give the same loss
    scores (one reader for native and outside pipelines)."""
    import numpy as np

    cfg, method = t2i_run
    code, out, err = _cli("attack", "--method", "txt2img", "--attack", "loss", "--preset", "test", "--runs-dir",
                          runs_dir, "--device", "cpu", "--json")
    assert code == 0, err
    native = json.loads(out)
    assert native["method"] == "txt2img"
    ctx = method.ctx
    for name, idx in (("members", ctx.split.members), ("nonmembers", ctx.split.nonmembers)):
        x, y = ctx.records(idx)
        np.savez(tmp_path / f"{name}.npz", images=x.numpy(), labels=y.numpy())
    code, out, err = _cli("attack", "--model", ctx.run_dir / "pipeline", "--members", tmp_path / "members.npz",
                          "--nonmembers", tmp_path / "nonmembers.npz", "--attack", "loss", "--caption",
                          "a picture of the digit {word}", "--runs-dir", tmp_path / "ext", "--device", "cpu",
                          "--json")
    assert code == 0, err
    outside = json.loads(out)
    assert outside["provenance"]["model"]["format"] == "diffusers-sd-pipeline"
    assert native["metrics"]["auc"] == pytest.approx(outside["metrics"]["auc"], abs=1e-9), (native["metrics"],
                                                                                           outside["metrics"])


def test_dp_t2i_lora_accounts_like_privbench_account(runs_dir):
    from privbench.privacy.dpsgd import account_dpsgd
    from privbench.runs import train as api

    cfg = train_cfg("dp-txt2img", "test", t2i__trainable="lora", dp__epsilon=8.0)
    method = api.train(cfg, runs_dir, "cpu")
    p = method.privacy("model")
    plan = method.plan()
    acc = account_dpsgd(plan.noise_multiplier, plan.sample_rate, plan.steps, plan.delta, accountant=plan.accountant)
    assert p["epsilon"] == pytest.approx(acc["epsilon"]) and p["epsilon"] <= 8.0
    assert p["trained"]["trainable"] == "lora" and p["trained"]["n_trainable"] < p["trained"]["n_total"]
    assert "public records only" in p["basis"]
    tgt = method.load_target()
    assert "DP-SGD" in tgt.note and (method.ctx.run_dir / "pipeline" / "unet" / "config.json").is_file()
