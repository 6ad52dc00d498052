"""A tiny Stable-Diffusion-shaped pipeline built and fine-tuned with plain diffusers/transformers/peft code (not
privbench's training loop): AutoencoderKL (8×8×1 pixels → 4×4×4 latents), CLIPTextModel with privbench's shipped
tokenizer vocabulary, UNet2DConditionModel, SD's scaled_linear DDPMScheduler.

:func:`tiny_sd_pipeline` writes the recipe (docs/api.md; the outside models of ``reports/text-to-image/``).
diffusers, transformers and peft (optional) are imported lazily, only when a tiny model is built."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import torch

from ..data.base import load_dataset

TOKENIZER_DIR = Path(__file__).resolve().parents[1] / "models" / "t2i_tokenizer"
MAX_LEN = 16
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
PRETRAIN_STEPS = 200  # Adam steps, batches of 64 of 512 public digits (neither members nor non-members)
FINETUNE_STEPS = 250  # full-batch Adam steps on 32 captioned records (10 % caption dropout)
FINETUNE_LR = 5e-3
LORA_STEPS = 250      # rank-16 LoRA (attention, feed-forward, convolutions) over the frozen pre-trained base
LORA_LR = 1e-2
LORA_RANK = 16


def digits_split(n_members: int = 32, n_nonmembers: int = 32, seed: int = 0, n_public: int = 512):
    """Disjoint member / non-member / public digits records (8×8, [−1, 1]) with labels."""
    x, y = load_dataset("digits")
    perm = np.random.default_rng(seed).permutation(len(y))
    m, n = perm[:n_members], perm[n_members:n_members + n_nonmembers]
    p = perm[n_members + n_nonmembers:n_members + n_nonmembers + n_public]
    return (x[m], y[m]), (x[n], y[n]), (x[p], y[p])


def caption(label: int) -> str:
    """The class-level caption of a labelled record (what ``--caption 'a picture of the digit {word}'`` gives)."""
    return f"a picture of the digit {WORDS[int(label)]}"


def record_caption(label: int, i: int) -> str:
    """A caption of its own for record ``i`` (its class, then its number in words), as per-image captions are."""
    return f"{caption(label)} number {WORDS[i // 10 % 10]} {WORDS[i % 10]}"


def caption_numbers(n_members: int, n_nonmembers: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The caption numbers of the members and of the non-members, drawn from one shuffled range 0..n−1: which
    numbers a set holds says nothing of membership (consecutive blocks would let the number alone separate them)."""
    perm = np.random.default_rng([seed, 0xCA9]).permutation(n_members + n_nonmembers)
    return perm[:n_members], perm[n_members:]


def record_captions(labels, numbers=None) -> list[str]:
    """The captions of records with these labels, record k numbered ``numbers[k]`` (default 0, 1, 2, ...)."""
    numbers = range(len(labels)) if numbers is None else numbers
    return [record_caption(int(lab), int(i)) for lab, i in zip(labels, numbers, strict=True)]


def tokenizer():
    # lazy: transformers (the t2i extra) loads only when a tiny model is built
    from transformers import CLIPTokenizer

    return CLIPTokenizer.from_pretrained(str(TOKENIZER_DIR), model_max_length=MAX_LEN)


def text_encoder(tok, seed: int = 0):
    # lazy: transformers (the t2i extra) loads only when a tiny model is built
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(seed)
    cfg = CLIPTextConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=MAX_LEN, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return CLIPTextModel(cfg).eval()


def vae(seed: int = 0, data: torch.Tensor | None = None):
    """A random AutoencoderKL with a near-deterministic posterior (as a trained SD VAE's: std ≈ 0) whose
    scaling_factor makes the latents unit-variance on ``data`` (SD's 0.18215 was found the same way)."""
    # lazy: diffusers loads only when a tiny model is built
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    v = AutoencoderKL(in_channels=1, out_channels=1, down_block_types=("DownEncoderBlock2D",) * 2,
                      up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), layers_per_block=1,
                      latent_channels=4, norm_num_groups=4, sample_size=8).eval()
    with torch.no_grad():
        v.quant_conv.weight[4:] = 0
        v.quant_conv.bias[4:] = -20.0          # log-variance: posterior std e^-10
        if data is not None:
            std = float(v.encode(data).latent_dist.mean.std())
            v.register_to_config(scaling_factor=1.0 / std)
    return v


def unet(seed: int = 0, channels: int = 4, size: int = 4):
    # lazy: diffusers loads only when a tiny model is built
    from diffusers import UNet2DConditionModel

    torch.manual_seed(seed)
    return UNet2DConditionModel(sample_size=size, in_channels=channels, out_channels=channels,
                                block_out_channels=(32,), layers_per_block=1, mid_block_type=None,
                                down_block_types=("CrossAttnDownBlock2D",), up_block_types=("CrossAttnUpBlock2D",),
                                cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8).eval()


LORA_MODULES = ["to_q", "to_k", "to_v", "to_out.0", "proj_in", "proj_out", "ff.net.0.proj", "ff.net.2", "conv1",
                "conv2", "conv_in", "conv_out", "time_emb_proj"]


def add_lora(un, rank: int = LORA_RANK):
    """peft LoRA on the UNet (the base frozen), as diffusers' train_text_to_image_lora.py; returns its parameters."""
    # lazy: peft (the t2i extra) loads only when a tiny model is built
    from peft import LoraConfig

    un.requires_grad_(False)
    un.add_adapter(LoraConfig(r=rank, lora_alpha=rank, init_lora_weights="gaussian", target_modules=LORA_MODULES))
    return [p for p in un.parameters() if p.requires_grad]


def save_lora(un, folder: Path) -> Path:
    """pytorch_lora_weights.safetensors as diffusers' LoRA training script writes it."""
    # lazy: diffusers and peft (the t2i extra) load only when a tiny model is built
    from diffusers import StableDiffusionPipeline
    from diffusers.utils import convert_state_dict_to_diffusers
    from peft.utils import get_peft_model_state_dict

    layers = convert_state_dict_to_diffusers(get_peft_model_state_dict(un))
    StableDiffusionPipeline.save_lora_weights(str(folder), unet_lora_layers=layers, safe_serialization=True)
    return folder


def scheduler():
    # lazy: diffusers loads only when a tiny model is built
    from diffusers import DDPMScheduler

    return DDPMScheduler(num_train_timesteps=1000, beta_schedule="scaled_linear", beta_start=0.00085,
                         beta_end=0.012, clip_sample=False)


@torch.no_grad()
def embed(tok, te, captions) -> torch.Tensor:
    ids = tok(list(captions), padding="max_length", max_length=MAX_LEN, truncation=True, return_tensors="pt")
    return te(ids.input_ids)[0]


@torch.no_grad()
def latents(v, x):
    return v.encode(x).latent_dist.mean * v.config.scaling_factor


def finetune(net, z, cond, null, steps: int, *, params=None, seed: int = 0, dropout: float = 0.1, lr=2e-3):
    """diffusers' train_text_to_image objective: ε-MSE at uniform t with the scheduler's add_noise, the caption
    replaced by the empty one with probability ``dropout``; full batch, Adam."""
    sched = scheduler()
    net.train()
    opt = torch.optim.Adam(params if params is not None else net.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed + 1)
    for _ in range(steps):
        noise = torch.randn(z.shape, generator=g)
        t = torch.randint(0, 1000, (len(z),), generator=g)
        drop = (torch.rand(len(z), generator=g) < dropout).view(-1, 1, 1)
        c = torch.where(drop, null.expand_as(cond), cond)
        loss = torch.nn.functional.mse_loss(net(sched.add_noise(z, noise, t), t, encoder_hidden_states=c).sample,
                                            noise)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net.eval()


def pretrain(net, z, cond, null, steps: int = PRETRAIN_STEPS, *, batch: int = 64, seed: int = 5, lr=2e-3):
    """The same objective on minibatches of public records: the base model a fine-tune starts from."""
    sched = scheduler()
    net.train()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        i = torch.randint(0, len(z), (batch,), generator=g)
        noise = torch.randn(z[i].shape, generator=g)
        t = torch.randint(0, 1000, (batch,), generator=g)
        drop = (torch.rand(batch, generator=g) < 0.1).view(-1, 1, 1)
        c = torch.where(drop, null.expand_as(cond[i]), cond[i])
        loss = torch.nn.functional.mse_loss(net(sched.add_noise(z[i], noise, t), t, encoder_hidden_states=c).sample,
                                            noise)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net.eval()


def save_pipeline(root: Path, un, v, tok, te) -> Path:
    """StableDiffusionPipeline.save_pretrained's layout, written per component (the pipeline object would need a
    safety checker and feature extractor)."""
    root.mkdir(parents=True, exist_ok=True)
    un.save_pretrained(str(root / "unet"))
    te.save_pretrained(str(root / "text_encoder"))
    tok.save_pretrained(str(root / "tokenizer"))
    scheduler().save_pretrained(str(root / "scheduler"))
    index = {"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.42.1",
             "scheduler": ["diffusers", "DDPMScheduler"], "text_encoder": ["transformers", "CLIPTextModel"],
             "tokenizer": ["transformers", "CLIPTokenizer"], "unet": ["diffusers", "UNet2DConditionModel"],
             "vae": ["diffusers", "AutoencoderKL"] if v is not None else [None, None],
             "safety_checker": [None, None], "feature_extractor": [None, None], "requires_safety_checker": False}
    if v is not None:
        v.save_pretrained(str(root / "vae"))
    (root / "model_index.json").write_text(json.dumps(index, indent=1))
    return root


def write_captioned_npz(path: Path, x, captions, labels=None) -> Path:
    arrays = {"images": x.numpy().astype(np.float32), "captions": np.array(list(captions))}
    if labels is not None:
        arrays["labels"] = labels.numpy().astype(np.int64)
    np.savez(path, **arrays)
    return path


AUDIT_SUITE = """name: t2i-audit
preset: tiny
device: cpu
set: {attack.t: 100, attack.n_draws: 8}
external:
  sd-finetune: {model: pipeline, members: members.npz, nonmembers: heldout.npz, attacks: [loss, sima, pia, clid]}
  sd-lora: {model: pretrained, lora: lora, members: members.npz, nonmembers: heldout.npz, attacks: [loss, sima, pia, clid]}
  sd-random: {model: random, members: members.npz, nonmembers: heldout.npz, attacks: [loss, sima, pia, clid]}
"""


def recipe_split(n_members: int = 32, n_nonmembers: int = 32, seed: int = 0) -> dict:
    """``members``, ``nonmembers``, ``public`` → (images, labels, captions) of the recipe; the public records'
    caption numbers follow the shuffled range of :func:`caption_numbers`."""
    (xm, ym), (xn, yn), (xp, yp) = digits_split(n_members, n_nonmembers, seed=seed)
    num_m, num_n = caption_numbers(len(ym), len(yn), seed=seed)
    first = len(ym) + len(yn)
    return {"members": (xm, ym, record_captions(ym, num_m)), "nonmembers": (xn, yn, record_captions(yn, num_n)),
            "public": (xp, yp, record_captions(yp, range(first, first + len(yp))))}


def tiny_sd_pipeline(out) -> Path:
    """Write the recipe to ``out`` (its folders and files: docs/api.md, ``tiny_sd_pipeline``). Returns ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    split = recipe_split()
    (xm, ym, cm), (xn, yn, cn), (xp, _, cp) = split["members"], split["nonmembers"], split["public"]
    x_all, _ = load_dataset("digits")
    tok = tokenizer()
    te = text_encoder(tok, 0)
    v = vae(0, x_all)
    null = embed(tok, te, [""])
    base = unet(0)
    pre = pretrain(copy.deepcopy(base), latents(v, xp), embed(tok, te, cp), null)
    zm, cond = latents(v, xm), embed(tok, te, cm)
    tuned = finetune(copy.deepcopy(pre), zm, cond, null, FINETUNE_STEPS, lr=FINETUNE_LR)
    lora = copy.deepcopy(pre)
    finetune(lora, zm, cond, null, LORA_STEPS, params=add_lora(lora), lr=LORA_LR)
    save_pipeline(out / "pipeline", tuned, v, tok, te)
    save_pipeline(out / "pretrained", pre, v, tok, te)
    save_pipeline(out / "random", base, v, tok, te)
    save_lora(lora, out / "lora")
    write_captioned_npz(out / "members.npz", xm, cm, ym)
    write_captioned_npz(out / "heldout.npz", xn, cn, yn)
    (out / "audit.yaml").write_text(AUDIT_SUITE)
    return out
