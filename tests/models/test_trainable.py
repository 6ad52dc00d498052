"""dp.trainable (models/trainable.py): LoRA adapters and attention-only training, with exact per-record gradients."""
from __future__ import annotations

import pytest
import torch
from helpers import assert_clipped_sum_matches, per_example_grads, train_cfg

from privbench.core.errors import BadInput
from privbench.core.mechanisms import flat_norms
from privbench.models.grad_sample import PerSampleGrads
from privbench.models.trainable import apply_trainable, lora_targets

pytestmark = pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")


def _denoiser(tmp_path, **sets):
    from privbench.runs import train as api

    sets.setdefault("model__attention_levels", "[1]")
    cfg = train_cfg("dpdm", "tiny", **sets)
    ctx = api.make_method(cfg, tmp_path / "run", "cpu").ctx
    return ctx.new_denoiser(), ctx.schedule.alphas_cumprod()


def _records(n=4, k=2, seed=3):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand((n, 1, 8, 8), generator=g) * 2 - 1, torch.randint(0, 10, (n,), generator=g),
            torch.randint(0, 1000, (n, k), generator=g), torch.randn((n, k, 1, 8, 8), generator=g))




@pytest.mark.parametrize("mode", ["lora", "attention"])
@pytest.mark.parametrize("backend", ["hooks", "ghost"])
def test_per_record_gradients_of_adapters_equal_per_example_autograd(tmp_path, mode, backend):
    from privbench.models.dp_sgd import multi_draw_loss

    model, ac = _denoiser(tmp_path)
    info = apply_trainable(model, mode, rank=3)
    with torch.no_grad():  # B = 0 at peft's init would make every lora_A gradient zero: move off it
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert info["n_trainable"] == sum(p.numel() for p in model.parameters() if p.requires_grad) < info["n_total"]
    assert any(n.startswith("label_emb") for n in names)
    if mode == "lora":
        assert all("lora_" in n or n.startswith("label_emb") for n in names)
        assert any(".attentions." in n and "to_q.lora_A" in n for n in names)  # attention Linear adapted
        assert any("resnets" in n and "conv1.lora_A" in n for n in names)      # convolutions adapted
    else:
        assert all(".attentions." in n or n.startswith("label_emb") for n in names)
    loss_fn = multi_draw_loss(ac)
    records = _records()
    ref = per_example_grads(model, loss_fn, records)
    ref_norms = flat_norms(ref)
    assert torch.all(ref_norms > 0) and all(r.abs().sum() > 0 for r, n in zip(ref, names) if "lora_A" in n)
    assert_clipped_sum_matches(PerSampleGrads(model, backend), loss_fn, records, ref, names, 2e-5, 1e-6)


def test_lora_starts_equal_to_the_base_network_and_attention_needs_attention(tmp_path):
    model, _ = _denoiser(tmp_path)
    x, y = torch.randn(2, 1, 8, 8), torch.tensor([1, 2])
    t = torch.tensor([10, 500])
    with torch.no_grad():
        before = model(x, t, y)
        apply_trainable(model, "lora", rank=2)
        after = model(x, t, y)
    assert torch.equal(before, after)  # B = 0: the adapted network is the pre-trained one until DP-SGD moves it
    assert any(n.startswith("unet.conv_in") for n in lora_targets(_denoiser(tmp_path)[0]))
    plain, _ = _denoiser(tmp_path, model__attention_levels="[]")
    with pytest.raises(BadInput, match="dp.trainable=attention: the UNet has no attention block"):
        apply_trainable(plain, "attention")
