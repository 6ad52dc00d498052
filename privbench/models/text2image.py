"""Native text-to-image targets: a tiny Stable-Diffusion-shaped pipeline built from configs (no download),
pre-trained on the public split, then fine-tuned on the members (methods ``t2i`` and ``dp-txt2img``; docs/methods.md).

Components, public pre-training, caption dropout and fine-tuning: docs/methods.md §7. Both the pre-trained and the
fine-tuned pipelines are written in ``StableDiffusionPipeline``'s folder layout and read back with the outside-model
loader (:func:`privbench.models.latent.load_sd_pipeline`), so native and outside pipelines share one reader. A
record's class label becomes the row of its class caption (row 0: the empty caption, rows 1…K: the classes').
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import shutil
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist

import torch
from torch import nn

from ..core import progress
from ..core.config import config_hash, register_section, setting
from ..core.errors import BadInput
from ..core.extras import require
from ..core.io import atomic_write_json, path_lock, read_json_or_none
from ..core.seeding import step_generator
from ..data.captions import check_template, template_captions
from .latent import CaptionTable, LatentTarget, load_sd_pipeline, vae_latents
from .loop import ema_capped
from .public_init import public_hash
from .trainable import apply_trainable
from .training import TrainData, diffusion_loss, is_trained, train_denoiser

TOKENIZER_DIR = Path(__file__).resolve().parent / "t2i_tokenizer"
#: bump when the pre-training changes (a new store folder)
T2I_PRETRAIN_VERSION = 1
PIPELINE = "pipeline"


@dataclasses.dataclass
class T2IConfig:
    caption: str = setting("a picture of the digit {word}",
                           help="caption of a record from its label: {label}, {word} (zero…nine), {name}")
    caption_dropout: float = setting(0.1, lo=0.0, hi=1.0, hi_open=True,
                                     help="probability that a record's caption is replaced by the empty one")
    trainable: str = setting("all", choices=["all", "lora", "attention"],
                             help="what the fine-tuning on the members trains (lora: peft adapters, base frozen)")
    lora_rank: int = setting(8, lo=1, hi=1024, help="rank of the LoRA adapters (t2i.trainable=lora)")
    latent_channels: int = setting(4, lo=1, hi=64)
    vae_channels: list = setting([16, 32], item=int, item_lo=1, item_hi=1024, min_len=1, max_len=4,
                                 help="AutoencoderKL block channels; the latents are 2^(levels−1)× smaller")
    vae_steps: int = setting(1500, lo=0, help="VAE training steps on the public records")
    vae_kl: float = setting(1e-6, lo=0.0, help="KL weight of the VAE loss (SD's VAE: 1e-6)")
    unet_channels: list = setting([32, 64], item=int, item_lo=1, item_hi=4096, min_len=1, max_len=4,
                                  help="UNet2DConditionModel block channels (cross-attention at every level)")
    text_dim: int = setting(32, lo=8, hi=4096, help="CLIP text encoder width (= the UNet's cross_attention_dim)")
    text_layers: int = setting(2, lo=1, hi=48)
    max_tokens: int = setting(16, lo=4, hi=77, help="tokenizer max length (captions are padded / truncated)")
    pretrain_steps: int = setting(3000, lo=0, help="UNet steps on the public latents with their captions")
    pretrain_lr: float = setting(1e-3, lo=0.0, lo_open=True)


register_section("t2i", T2IConfig, presets={
    "test": {"vae_steps": 10, "pretrain_steps": 10, "vae_channels": [8, 8], "unet_channels": [16],
             "text_dim": 16, "text_layers": 1},
    "paper": {"vae_channels": [64, 128, 256], "unet_channels": [128, 256, 256], "text_dim": 256, "text_layers": 6,
              "latent_channels": 4, "vae_steps": 20000, "pretrain_steps": 100000, "max_tokens": 32}})


# ---------------------------------------------------------------------- components

def require_t2i() -> None:
    require("transformers", "the text-to-image methods (CLIP text encoder)")


def validate_t2i(ctx) -> None:
    """What a text-to-image run needs before anything is written: the extra, and a caption template that fills
    every class within the caption bound."""
    require_t2i()
    class_captions(ctx.cfg, ctx.info.num_classes)


def tokenizer(max_tokens: int):
    from transformers import CLIPTokenizer  # lazy: the [t2i] extra (transformers) is optional

    return CLIPTokenizer.from_pretrained(str(TOKENIZER_DIR), model_max_length=int(max_tokens))


def _groups(channels) -> int:
    return math.gcd(*[int(c) for c in channels], 8) or 1


def build_components(cfg, channels: int, size: int, seed: int):
    """(vae, tokenizer, text encoder, unet) of the config, seeded."""
    # lazy: diffusers (seconds to import) and the optional [t2i] extra (transformers)
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    c = cfg.t2i
    levels = len(c.vae_channels)
    if size % (2 ** (levels - 1)):
        raise BadInput(f"t2i.vae_channels has {levels} levels; image size {size} must be divisible by "
                       f"{2 ** (levels - 1)}")
    latent = size // 2 ** (levels - 1)
    u_levels = len(c.unet_channels)
    if latent % (2 ** (u_levels - 1)):
        raise BadInput(f"t2i.unet_channels has {u_levels} levels; the {latent}x{latent} latents must be divisible "
                       f"by {2 ** (u_levels - 1)}")
    heads_dim = max(1, min(int(c.unet_channels[0]), 8))
    if any(int(ch) % heads_dim for ch in c.unet_channels):
        raise BadInput(f"t2i.unet_channels={c.unet_channels}: every level must be a multiple of {heads_dim}")
    torch.manual_seed(seed)
    vae = AutoencoderKL(in_channels=channels, out_channels=channels,
                        down_block_types=("DownEncoderBlock2D",) * levels, up_block_types=("UpDecoderBlock2D",) * levels,
                        block_out_channels=tuple(int(v) for v in c.vae_channels), layers_per_block=1,
                        latent_channels=int(c.latent_channels), norm_num_groups=_groups(c.vae_channels),
                        sample_size=size)
    tok = tokenizer(c.max_tokens)
    te = CLIPTextModel(CLIPTextConfig(vocab_size=len(tok), hidden_size=int(c.text_dim),
                                      intermediate_size=2 * int(c.text_dim), num_hidden_layers=int(c.text_layers),
                                      num_attention_heads=max(1, int(c.text_dim) // 16),
                                      max_position_embeddings=int(c.max_tokens), bos_token_id=tok.bos_token_id,
                                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)).eval()
    unet = UNet2DConditionModel(sample_size=latent, in_channels=int(c.latent_channels),
                                out_channels=int(c.latent_channels),
                                block_out_channels=tuple(int(v) for v in c.unet_channels), layers_per_block=1,
                                down_block_types=("CrossAttnDownBlock2D",) * u_levels,
                                up_block_types=("CrossAttnUpBlock2D",) * u_levels,
                                mid_block_type=None if u_levels == 1 else "UNetMidBlock2DCrossAttn",
                                cross_attention_dim=int(c.text_dim), attention_head_dim=heads_dim,
                                norm_num_groups=_groups(c.unet_channels))
    return vae, tok, te, unet


class TextDenoiser(nn.Module):
    """``forward(z_t, t, y)`` = ``unet(z_t, t, encoder_hidden_states=table[y])``: the privbench denoiser interface
    over a UNet2DConditionModel, ``y`` a caption row (the table is a frozen, non-persistent buffer)."""

    def __init__(self, unet: nn.Module, table: torch.Tensor):
        super().__init__()
        self.unet = unet
        self.register_buffer("table", table.detach().clone(), persistent=False)

    def forward(self, x, t, y=None, extra=None):
        del extra  # the denoiser interface net(x_t, t, y, extra); the caption table is the condition here
        if y is None:
            y = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)  # the null caption
        return self.unet(x, t, encoder_hidden_states=self.table[y], return_dict=False)[0]


@lru_cache(maxsize=None)
def _drop_threshold(p: float) -> float:
    return NormalDist().inv_cdf(1.0 - p)  # Φ⁻¹(1 − p)


def dropped(rows: torch.Tensor, noise: torch.Tensor, p: float) -> torch.Tensor:
    """``rows`` with a record's caption replaced by the empty one (row 0) when the first element of its noise draw
    exceeds the (1 − p)-quantile of N(0, 1): probability p, from the step's seeded draws, so a resume follows the
    uninterrupted run (the plain loop's loss sees the noise, not the generator)."""
    if p <= 0:
        return rows
    return torch.where(noise.flatten(1)[:, 0] > _drop_threshold(p), torch.zeros_like(rows), rows)


def dropout_loss(p: float):
    """The diffusion loss of the plain loop with caption dropout (:func:`dropped`)."""
    def loss(model, x0, y, extra, t, noise, ac):
        return diffusion_loss(model, x0, dropped(y, noise, p), extra, t, noise, ac)

    return loss


def class_captions(cfg, num_classes: int) -> list[str]:
    """The caption of each class, in label order (``t2i.caption`` filled from the label)."""
    check_template(cfg.t2i.caption)
    return list(template_captions(cfg.t2i.caption, torch.arange(num_classes), None, "t2i.caption"))


# ---------------------------------------------------------------------- the pipeline folder

def save_pipeline(root: Path, unet, vae, tok, te, schedule) -> Path:
    """``StableDiffusionPipeline``'s folder layout (safetensors), written with each component's save_pretrained."""
    from diffusers import DDPMScheduler  # lazy: diffusers (seconds to import) only when this runs

    root.mkdir(parents=True, exist_ok=True)
    unet.save_pretrained(str(root / "unet"), safe_serialization=True)
    vae.save_pretrained(str(root / "vae"), safe_serialization=True)
    te.save_pretrained(str(root / "text_encoder"), safe_serialization=True)
    tok.save_pretrained(str(root / "tokenizer"))
    DDPMScheduler(num_train_timesteps=schedule.num_timesteps, beta_start=schedule.beta_start,
                  beta_end=schedule.beta_end, beta_schedule=schedule.beta_schedule,
                  variance_type=schedule.variance_type, clip_sample=False,
                  prediction_type="epsilon").save_pretrained(str(root / "scheduler"))
    import diffusers  # lazy: diffusers (seconds to import) only when this runs

    index = {"_class_name": "StableDiffusionPipeline", "_diffusers_version": diffusers.__version__,
             "scheduler": ["diffusers", "DDPMScheduler"], "text_encoder": ["transformers", "CLIPTextModel"],
             "tokenizer": ["transformers", "CLIPTokenizer"], "unet": ["diffusers", "UNet2DConditionModel"],
             "vae": ["diffusers", "AutoencoderKL"], "safety_checker": [None, None],
             "feature_extractor": [None, None], "requires_safety_checker": False}
    (root / "model_index.json").write_text(json.dumps(index, indent=1))
    return root


def load_pipeline(root: Path, device, captions: list[str], name: str = "model"):
    """(NativeLatentTarget, provenance) of a pipeline folder, read by the outside-model loader; ``captions`` (the
    classes', in label order) take rows 1…K of its caption table."""
    tgt, prov = load_sd_pipeline(Path(root), f"pipeline {root.name}", None, None, device, name,
                                 cls=NativeLatentTarget)
    rows = tgt.text.ids(captions)
    if rows.tolist() != list(range(1, len(captions) + 1)):
        raise BadInput(f"t2i.caption={captions[0]!r}: the classes' captions must be distinct and non-empty")
    tgt.sample_rows = rows
    return tgt, prov


# ---------------------------------------------------------------------- public pre-training

def pretrain_settings(cfg) -> dict:
    """What decides the pre-trained pipeline besides the public records (never the members, never the run seed)."""
    t = cfg.t2i
    keep = ("caption", "caption_dropout", "latent_channels", "vae_channels", "vae_steps", "vae_kl", "unet_channels",
            "text_dim", "text_layers", "max_tokens", "pretrain_steps", "pretrain_lr")
    train = {k: getattr(cfg.train, k) for k in ("batch_size", "weight_decay", "warmup", "grad_clip", "ema_decay")}
    return {"version": T2I_PRETRAIN_VERSION, "dataset": cfg.dataset, "resolution": cfg.data.resolution,
            "t2i": {k: getattr(t, k) for k in keep}, "diffusion": dataclasses.asdict(cfg.diffusion),
            "train": train, "seed": cfg.train.public_seed}


def pretrain_dir(ctx) -> Path:
    key = config_hash({"public": public_hash(ctx.split.public), **pretrain_settings(ctx.cfg)})
    return Path(ctx.store_root) / f"t2i-pretrain-{ctx.cfg.dataset}-{key}"


def pretrained_pipeline(ctx) -> Path:
    """The pre-trained pipeline folder of the run's public split (trained once under a lock, then reused)."""
    public = list(ctx.split.public)
    if not public:
        raise BadInput(f"method {ctx.cfg.method}: the run has no public split to pre-train on; set data.public=pool "
                       f"(or classes:A-B) and data.n_public")
    out = pretrain_dir(ctx)
    done = out / "pretrain.json"
    if read_json_or_none(done, "corrupt; remove the folder") is None:
        with path_lock(out.parent, out.name, "is pre-training the text-to-image pipeline on the public split"):
            if read_json_or_none(done, "corrupt; remove the folder") is None:
                _pretrain(ctx, public, out)
    return out / PIPELINE


def _train_vae(vae, x: torch.Tensor, cfg, seed: int, device, log) -> None:
    steps, kl = int(cfg.t2i.vae_steps), float(cfg.t2i.vae_kl)
    vae.to(device).train()
    opt = torch.optim.Adam(vae.parameters(), lr=1e-3)
    B = min(int(cfg.train.batch_size), len(x))
    bar = progress.bar(total=steps, desc="pre-train VAE on public records", unit="step")
    for step in range(steps):
        g = step_generator(seed, step, device)
        xb = x[torch.randint(0, len(x), (B,), generator=g, device=device)]
        post = vae.encode(xb).latent_dist
        rec = vae.decode(post.sample(generator=g)).sample
        loss = ((rec - xb) ** 2).mean() + kl * post.kl().mean() / xb[0].numel()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % max(1, int(cfg.train.log_every)) == 0 or step + 1 == steps:
            log(f"[pretrain-vae] step {step + 1}/{steps} loss {loss.detach().item():.5f}")
        bar.update(1)
    bar.close()
    vae.eval()


def _pretrain(ctx, public: list[int], out: Path) -> None:
    cfg, dev = ctx.cfg, ctx.device
    out.mkdir(parents=True, exist_ok=True)
    seed = int(cfg.train.public_seed)
    x, y = ctx.records(public)
    c, h, _ = ctx.image_shape
    vae, tok, te, unet = build_components(cfg, c, h, seed)
    x = x.to(dev)
    ctx.log(f"[pretrain] text-to-image pipeline on {len(public)} public records in {out}")
    _train_vae(vae, x, cfg, seed, dev, ctx.log)
    z = vae_latents(vae.eval(), x, 1.0, dev)
    std = max(float(z.std()), 1e-6)
    vae.register_to_config(scaling_factor=1.0 / std)  # unit-variance latents on the public records
    z = z * vae.config.scaling_factor
    text = CaptionTable(tok, te, dev)  # row 0: the empty caption, then the classes' captions in label order
    text.ids(class_captions(cfg, ctx.info.num_classes))
    table = text.table
    tcfg = dataclasses.replace(cfg.train, lr=float(cfg.t2i.pretrain_lr))
    net = TextDenoiser(unet, table)
    ema = train_denoiser(net, TrainData(z, (y + 1).to(dev)), ctx.schedule.alphas_cumprod(), tcfg,
                         out / "checkpoints", name="public", seed=seed, device=dev,
                         steps=int(cfg.t2i.pretrain_steps), desc="pre-train text-to-image UNet on public records",
                         loss_fn=dropout_loss(float(cfg.t2i.caption_dropout)))
    save_pipeline(out / PIPELINE, ema.unet.cpu(), vae.cpu(), tok, te.cpu(), ctx.schedule)
    atomic_write_json(out / "pretrain.json", {"n_public": len(public), "public_sha256": public_hash(public),
                                              "public_mode": ctx.split.public_mode,
                                              "scaling_factor": vae.config.scaling_factor, **pretrain_settings(cfg),
                                              "note": "non-private pre-training of the VAE and the UNet on the "
                                                      "public split only; the text encoder is a seeded random "
                                                      "initialisation, frozen; no member is read"})


# ---------------------------------------------------------------------- fine-tuning and the target

class NativeLatentTarget(LatentTarget):
    """The :class:`~privbench.models.latent.LatentTarget` of a native run: ``sample(n, y)`` takes class labels (row =
    label + 1) and returns class labels, as every native target's sampler does; with ``y=None`` it draws from the
    classes' captions."""

    def sample(self, n, y=None, **kw):
        rows = None if y is None else torch.as_tensor(y, dtype=torch.long) + 1
        images, rows = super().sample(n, rows, **kw)
        return images, rows - 1

    def query_inputs(self, x, y):
        return self.encode(x), torch.as_tensor(y, dtype=torch.long) + 1


def finetune_network(ctx, pretrained: Path) -> tuple[TextDenoiser, dict, object]:
    """(the pre-trained UNet wrapped as a TextDenoiser with ``t2i.trainable`` applied, the trainable record, the
    pre-trained target) — the fine-tuning starts here."""
    base, _ = load_pipeline(pretrained, ctx.device, class_captions(ctx.cfg, ctx.info.num_classes))
    unet = copy.deepcopy(base.model).train()
    for p in unet.parameters():
        p.requires_grad_(True)
    net = TextDenoiser(unet, base.text.table)
    trained = apply_trainable(net, ctx.cfg.t2i.trainable, ctx.cfg.t2i.lora_rank, ctx.cfg.seed)
    return net, trained, base


def member_latents(ctx, base) -> tuple[torch.Tensor, torch.Tensor]:
    """The members' latents (the pre-trained VAE) and caption rows."""
    x, y = ctx.records(ctx.split.members)
    return base.encode(x).to(ctx.device), (y + 1).to(ctx.device)


def export_finetuned(run_dir: Path, model: TextDenoiser, pretrained: Path) -> Path:
    """The fine-tuned pipeline in SD's layout: the pre-trained VAE, tokenizer and text encoder, the fine-tuned UNet
    (LoRA adapters merged into a copy), for auditing it as an outside model."""
    out = run_dir / PIPELINE
    tmp = run_dir / f".{PIPELINE}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(pretrained, tmp)
    unet = copy.deepcopy(model.unet).cpu()
    if any("lora_" in n for n, _ in unet.named_parameters()):
        unet = _merged(unet)
    shutil.rmtree(tmp / "unet")
    unet.save_pretrained(str(tmp / "unet"), safe_serialization=True)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def _merged(unet):
    """A UNet with peft adapters (injected by inject_adapter_in_model) folded into its base weights."""
    from peft.tuners.lora import LoraLayer  # lazy: peft (the [t2i] or [dp] extra) is optional

    for mod in unet.modules():
        if isinstance(mod, LoraLayer):
            mod.merge()
    from diffusers import UNet2DConditionModel  # lazy: diffusers (seconds to import) only when this runs

    plain = UNet2DConditionModel.from_config(unet.config)
    state = {}
    for k, v in unet.state_dict().items():
        if "lora_" in k:
            continue
        state[k.replace(".base_layer.", ".")] = v
    plain.load_state_dict(state, strict=True)
    return plain


def finetune_plain(ctx, name: str = "model") -> dict:
    """Non-private fine-tuning of the pre-trained pipeline on the members (the plain loop); returns the trainable
    record."""
    cfg = ctx.cfg
    pre = pretrained_pipeline(ctx)
    net, trained, base = finetune_network(ctx, pre)
    z, rows = member_latents(ctx, base)
    ctx.log(f"[{name}] fine-tuning the text-to-image UNet on {len(z)} members: trains {trained['trainable']} "
            f"({trained['n_trainable']:,} of {trained['n_total']:,} parameters), {cfg.train.steps} steps")
    ema = train_denoiser(net, TrainData(z, rows), ctx.schedule.alphas_cumprod(), ema_capped(cfg.train, cfg.train.steps),
                         ctx.ckpt_dir, name=name,
                         seed=cfg.seed, device=ctx.device, desc=f"fine-tune {cfg.method}",
                         loss_fn=dropout_loss(float(cfg.t2i.caption_dropout)))
    export_finetuned(ctx.run_dir, ema, pre)
    return trained


def is_finetuned(ctx, steps: int, name: str = "model") -> bool:
    return is_trained(ctx.ckpt_dir, name, steps) and (ctx.run_dir / PIPELINE / "model_index.json").is_file()


def load_finetuned(ctx, method: str, note: str, name: str = "model"):
    """The fine-tuned target (the run's exported pipeline, read by the outside-model loader)."""
    tgt, prov = load_pipeline(ctx.run_dir / PIPELINE, ctx.device, class_captions(ctx.cfg, ctx.info.num_classes),
                              name)
    tgt.method, tgt.note = method, note
    tgt.meta["provenance"] = dict(prov, pretrain_dir=pretrain_dir(ctx).name)
    return tgt
