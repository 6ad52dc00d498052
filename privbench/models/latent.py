"""Latent text-to-image targets: diffusers ``StableDiffusionPipeline``-layout folders, optionally with a LoRA adapter.

``load_sd_pipeline(folder)`` reads the components (class names in ``model_index.json`` are checked, never imported
by name), strictly from safetensors (:func:`strict_load`; memory: at most the weight files' size on top of the
modules), and a UNet LoRA through diffusers' ``load_lora_adapter``. :class:`LatentTarget` is queried in latent
space, the condition of a record being its caption's row in a :class:`CaptionTable`, so the pixel-space attacks
run unchanged. What is read, refused and how the attacks see the model: docs/external-models.md ("Text-to-image").
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ..core.config import MAX_PARAMETERS
from ..core.constants import OUTSIDE
from ..core.errors import BadInput
from ..core.extras import require
from ..core.jsonio import regular_file
from .external_base import (
    CONVERSIONS,
    DISCRETE_SCHEDULERS,
    _device,
    _sha256_files,
    _weight_files,
    model_where,
    read_json,
    schedule_from_config,
    to_epsilon,
)
from .outside_config import caption_tokens, check_text_encoder, check_unet_or_vae, sample_side, scaling_factor
from .safe_load import check_finite, check_size, meta_build, safetensors_tensors
from .target import Calls, Target, TargetCapabilities

PIPELINE_COMPONENTS = {"vae": "AutoencoderKL", "text_encoder": "CLIPTextModel", "tokenizer": "CLIPTokenizer",
                       "unet": "UNet2DConditionModel"}
TOKENIZER_CLASSES = ("CLIPTokenizer", "CLIPTokenizerFast")
LORA_FILE = "pytorch_lora_weights.safetensors"
ENCODE_BATCH = 32
TEXT_BATCH = 64
#: AutoencoderKL's default ``scaling_factor`` (Stable Diffusion 1.x's), used when a VAE config leaves it out
SD_SCALING_FACTOR = 0.18215


# ---------------------------------------------------------------------- strict safetensors loading

def component_files(folder: Path, where: str) -> list[Path]:
    """The safetensors files of one component folder (its index's shards, the standard file, or one variant)."""
    if not folder.is_dir():
        raise BadInput(f"{where}: missing (the pipeline's model_index.json names it)")
    safe, other = _weight_files(folder)
    if not safe:
        if other:
            raise BadInput(f"{where}: holds only pickled weights ({other[0].name}); privbench loads safetensors only "
                           f"(a pickle can run code): re-save with save_pretrained(safe_serialization=True)")
        raise BadInput(f"{where}: no .safetensors weights")
    index = [f for f in folder.iterdir() if f.name.endswith(".safetensors.index.json")]
    if index:
        shards = sorted(set(read_json(index[0], where).get("weight_map", {}).values()))
        files = [folder / s for s in shards]
        if not files or any(not f.is_file() or f.parent != folder for f in files):
            raise BadInput(f"{where}: {index[0].name} names shards that are not in the folder")
        return files
    plain = [f for f in safe if f.name.count(".") == 1]
    if len(plain) == 1:
        return plain
    if len(safe) == 1:
        return safe
    raise BadInput(f"{where}: several safetensors files ({', '.join(sorted(f.name for f in safe)[:3])}) and no "
                   f"index; keep one")


def strict_load(module: torch.nn.Module, files: list[Path], where: str) -> torch.nn.Module:
    """Load ``files`` (safetensors) into ``module``: every tensor present with its shape, none left over (a
    non-persistent buffer of the module may be in the file). Float weights are cast to float32."""
    state: dict = {}
    for f in files:
        try:
            state.update(load_file(str(f), device="cpu"))
        except (SafetensorError, OSError, ValueError) as e:
            raise BadInput(f"{where}: {f.name} is not a readable safetensors file ({type(e).__name__})") from None
    own = module.state_dict()
    extra_ok = {n for n, _ in module.named_buffers()} - set(own)
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own) - extra_ok)
    if missing or unexpected:
        part = [f"{len(missing)} missing (e.g. {missing[0]})"] if missing else []
        part += [f"{len(unexpected)} unexpected (e.g. {unexpected[0]})"] if unexpected else []
        raise BadInput(f"{where}: the weights do not match config.json: {'; '.join(part)} tensors")
    bad = [k for k, v in own.items() if tuple(state[k].shape) != tuple(v.shape)]
    if bad:
        raise BadInput(f"{where}: tensor {bad[0]} has shape {tuple(state[bad[0]].shape)}, config.json implies "
                       f"{tuple(own[bad[0]].shape)}")
    state = {k: (v.float() if v.is_floating_point() else v) for k, v in state.items() if k in own}
    module.load_state_dict(state, strict=True)
    return module.float().eval()


def _bounded(factory, where: str) -> None:
    """The component ``factory`` builds, counted on the meta device against privbench's size bound
    (:mod:`privbench.models.safe_load`): a config that describes a huge network is exit 2 before allocation."""
    try:
        meta = meta_build(factory, where)
    except BadInput:
        raise
    except Exception as e:  # noqa: BLE001 - diffusers/transformers raise many types for a bad config
        raise BadInput(f"{where}: not a usable config ({type(e).__name__}: {str(e)[:120]})") from None
    check_size(meta, where)


def _diffusers_component(folder: Path, cls_name: str, where: str):
    import diffusers  # lazy: diffusers (seconds to import) only when this runs

    cfg = read_json(folder / "config.json", where)
    if cfg.get("_class_name") != cls_name:
        raise BadInput(f"{where}: config.json describes {cfg.get('_class_name')!r}, expected {cls_name}")
    check_unet_or_vae(cfg, where)  # before the meta build: a zero group count divides by zero in it
    cls = getattr(diffusers, cls_name)
    _bounded(lambda: cls.from_config(cfg), where)  # counted on the meta device before any memory is allocated
    if cls_name == "UNet2DConditionModel":
        sample_side(cfg.get("sample_size"), where)
    else:
        scaling_factor(cfg.get("scaling_factor", SD_SCALING_FACTOR), where)
    try:
        module = cls.from_config(cfg)
    except Exception as e:  # noqa: BLE001 - diffusers raises many types for a bad config
        raise BadInput(f"{where}: not a usable {cls_name} config ({type(e).__name__}: {str(e)[:120]})") from None
    files = component_files(folder, where)
    return strict_load(module, files, where), files + [folder / "config.json"]


def _text_encoder(folder: Path, where: str):
    from transformers import CLIPTextConfig, CLIPTextModel  # lazy: the [t2i] extra (transformers) is optional

    cfg = read_json(folder / "config.json", where)
    arch = cfg.get("architectures") or ["CLIPTextModel"]
    if arch != ["CLIPTextModel"]:
        raise BadInput(f"{where}: architectures={arch}; only transformers CLIPTextModel is read")
    check_text_encoder(cfg, where)
    _bounded(lambda: CLIPTextModel(CLIPTextConfig(**{k: v for k, v in cfg.items() if k != "architectures"})), where)
    try:
        module = CLIPTextModel(CLIPTextConfig(**{k: v for k, v in cfg.items() if k != "architectures"}))
    except Exception as e:  # noqa: BLE001
        raise BadInput(f"{where}: not a usable CLIPTextConfig ({type(e).__name__}: {str(e)[:120]})") from None
    files = component_files(folder, where)
    return strict_load(module, files, where), files + [folder / "config.json"]


def _tokenizer(folder: Path, where: str):
    from transformers import CLIPTokenizer  # lazy: the [t2i] extra (transformers) is optional

    if not folder.is_dir():
        raise BadInput(f"{where}: missing (the pipeline's model_index.json names it)")
    vocab = [folder / n for n in ("vocab.json", "merges.txt") if (folder / n).is_file()]
    fast = folder / "tokenizer.json"
    if len(vocab) < 2 and not fast.is_file():
        raise BadInput(f"{where}: needs vocab.json + merges.txt (or tokenizer.json) of a CLIP tokenizer")
    try:
        tok = CLIPTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as e:  # noqa: BLE001
        raise BadInput(f"{where}: not a readable CLIP tokenizer ({type(e).__name__}: {str(e)[:120]})") from None
    files = vocab + ([fast] if fast.is_file() else []) + [f for f in (folder / "tokenizer_config.json",
                                                                      folder / "special_tokens_map.json")
                                                          if f.is_file()]
    return tok, files


# ---------------------------------------------------------------------- LoRA

def read_lora(path, where: str = "--lora") -> tuple[dict, Path]:
    """(UNet LoRA tensors with their ``unet.`` prefix, the file) of a diffusers LoRA file or folder."""
    p = Path(path).expanduser()
    if p.is_dir():
        cand = p / LORA_FILE
        if not cand.is_file():
            pickled = [f.name for f in p.iterdir() if f.suffix in (".bin", ".pt", ".ckpt", ".pth")]
            hint = (f" (only pickled {pickled[0]}: privbench reads safetensors only)" if pickled else "")
            raise BadInput(f"{where} {path}: no {LORA_FILE} in the folder{hint}")
        p = cand
    p = regular_file(p, where)  # a FIFO or a device would block the reader, a missing file is named as such
    if not p.name.endswith(".safetensors"):
        raise BadInput(f"{where} {path}: not a .safetensors file; privbench reads safetensors only (a pickle can "
                       f"run code)")
    _check_lora_header(p, f"{where} {p}")
    try:
        state = load_file(str(p), device="cpu")
    except (SafetensorError, OSError, ValueError) as e:
        raise BadInput(f"{where} {path}: not a readable safetensors file ({type(e).__name__})") from None
    nonfinite = sorted(k for k, v in state.items() if not bool(torch.isfinite(v).all()))
    if nonfinite:
        raise BadInput(f"{where} {p}: {len(nonfinite)} tensor(s) hold NaN or infinity ({_few(nonfinite)}); "
                       f"the adapter's weights must be finite")
    text = [k for k in state if k.startswith(("text_encoder", "lora_te"))]
    if text:
        raise BadInput(f"{where} {path}: holds a text-encoder LoRA ({text[0]}); only UNet adapters are applied")
    if not state or not all(k.startswith("unet.") for k in state):
        odd = next((k for k in state if not k.startswith("unet.")), "no tensors")
        raise BadInput(f"{where} {path}: not a diffusers UNet LoRA (key {odd!r}; expected unet.* keys as "
                       f"diffusers' save_lora_weights writes)")
    return state, p


def _check_lora_header(p: Path, where: str) -> None:
    """Before the adapter's data is read: every tensor a float (an integer LoRA would be cast silently into the
    UNet's weights) and all of them within privbench's parameter bound."""
    info = safetensors_tensors([p], where)
    odd = sorted(f"{k} {t.dtype}" for k, t in info.items() if t.dtype != "float")
    if odd:
        raise BadInput(f"{where}: {len(odd)} tensor(s) are not floating point ({_few(odd)}); a LoRA adapter's "
                       f"weights are floats")
    n = sum(math.prod(t.shape) for t in info.values())
    if n > MAX_PARAMETERS:
        raise BadInput(f"{where}: {n:,} values in the adapter; privbench loads at most {MAX_PARAMETERS:,}")


def _few(names: list[str], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


#: older diffusers LoRA key spellings → peft's (diffusers' ``convert_state_dict_to_diffusers`` writes the old ones
#: for attention layers and peft's for the others, so one file can mix both)
_LORA_KEY_FORMS = ((re.compile(r"\.processor\.to_out_lora\.(down|up)\.weight$"), r".to_out.0.lora.\1.weight"),
                   (re.compile(r"\.processor\.(to_[qkv])_lora\.(down|up)\.weight$"), r".\1.lora.\2.weight"),
                   (re.compile(r"\.lora(?:_linear_layer)?\.down\.weight$"), ".lora_A.weight"),
                   (re.compile(r"\.lora(?:_linear_layer)?\.up\.weight$"), ".lora_B.weight"))


def peft_keys(state: dict) -> dict:
    """The adapter with every LoRA key in peft's spelling (``lora_A`` / ``lora_B``)."""
    out = {}
    for k, v in state.items():
        for pat, rep in _LORA_KEY_FORMS:
            k = pat.sub(rep, k)
        out[k] = v
    return out


def apply_lora(unet, state: dict, where: str) -> int:
    """Apply a UNet LoRA (``unet.*`` keys) with diffusers' loader; returns the number of LoRA tensors set.
    Refuses an adapter whose tensors do not all land in the UNet."""
    # lazy: diffusers (seconds to import) only when this runs
    from diffusers.loaders import StableDiffusionLoraLoaderMixin

    try:
        sd, alphas = StableDiffusionLoraLoaderMixin.lora_state_dict(dict(state))
        sd = peft_keys(sd)
        unet.load_lora_adapter(sd, network_alphas=alphas, prefix="unet", adapter_name="privbench_lora")
    except Exception as e:  # noqa: BLE001 - peft/diffusers raise many types for mismatched adapters
        raise BadInput(f"{where}: the adapter does not fit this UNet ({type(e).__name__}: {str(e)[:140]})") from None
    n_file = sum(1 for k in sd if "lora" in k and not k.endswith(".alpha"))
    n_set = sum(1 for n, _ in unet.named_parameters() if ".lora_A." in n or ".lora_B." in n)
    if n_set != n_file:
        raise BadInput(f"{where}: {n_file} LoRA tensors in the file, {n_set} placed in the UNet; the adapter does "
                       f"not fit this base")
    return n_set


# ---------------------------------------------------------------------- captions and the target

class CaptionTable:
    """Captions → rows of text embeddings (row 0: the empty caption, the null prompt)."""

    def __init__(self, tokenizer, text_encoder, device):
        self.tokenizer = tokenizer
        self.text_encoder = text_encoder.to(device).eval()
        self.device = device
        self.max_length = caption_tokens(tokenizer, self.text_encoder)
        self.captions: list[str] = []
        self.rows: dict[str, int] = {}
        self.table = None
        self.ids([""])

    @torch.no_grad()
    def _embed(self, captions: list[str]) -> torch.Tensor:
        tok = self.tokenizer
        out = []
        for lo in range(0, len(captions), TEXT_BATCH):
            ids = tok(captions[lo:lo + TEXT_BATCH], padding="max_length", max_length=self.max_length,
                      truncation=True, return_tensors="pt").input_ids.to(self.device)
            out.append(self.text_encoder(ids)[0].float())
        return torch.cat(out)

    def ids(self, captions) -> torch.Tensor:
        """The row of each caption (new captions are encoded once and appended)."""
        new = [c for c in dict.fromkeys(str(c) for c in captions) if c not in self.rows]
        if new:
            emb = self._embed(new)
            for c in new:
                self.rows[c] = len(self.captions)
                self.captions.append(c)
            self.table = emb if self.table is None else torch.cat([self.table, emb])
        return torch.as_tensor([self.rows[str(c)] for c in captions], dtype=torch.long)

    def __len__(self) -> int:
        return len(self.captions)


@torch.no_grad()
def vae_latents(vae, x: torch.Tensor, scaling: float, device) -> torch.Tensor:
    """Pixels N×C×H×W in [−1, 1] → the VAE posterior mean × ``scaling``, in batches of :data:`ENCODE_BATCH`, on
    ``device``."""
    return torch.cat([vae.encode(x[lo:lo + ENCODE_BATCH].to(device)).latent_dist.mean
                      for lo in range(0, len(x), ENCODE_BATCH)]) * scaling


class LatentTarget(Target):
    """A text-conditional latent target: ``predict_noise(z_t, t, y)`` with ``y`` the caption row.

    ``predict_noise`` is ``unet(z_t, t, encoder_hidden_states=E[y])`` converted to ε as for every outside model."""

    def __init__(self, *a, vae=None, scaling: float = 1.0, text: CaptionTable, pixel_shape, **kw):
        self.text = text
        super().__init__(*a, **kw)
        self.vae = vae.to(self.device).eval() if vae is not None else None
        self.scaling = float(scaling)
        self.pixel_shape = tuple(int(s) for s in pixel_shape)
        self._latents: dict[str, torch.Tensor] = {}
        self.sample_rows: torch.Tensor | None = None  # caption rows samples are drawn from (members' captions)

    @property
    def capabilities(self) -> TargetCapabilities:
        return dataclasses.replace(super().capabilities, latent=True, text_conditioned=True,
                                   record_shape=self.pixel_shape)

    @property
    def num_classes(self):  # the caption table's size: attacks pass each record's row as its condition
        return len(self.text)

    @num_classes.setter
    def num_classes(self, _value):  # Target.__init__ assigns it; the caption table decides
        pass

    @torch.no_grad()
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Pixels N×C×H×W in [−1, 1] → latents (posterior mean × scaling_factor), batched, cached per records."""
        key = hashlib.sha256(x.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()).hexdigest()
        if key not in self._latents:
            if self.vae is None:
                z = x.detach().to("cpu", torch.float32).clone()
            else:
                z = vae_latents(self.vae, x, self.scaling, self.device).cpu()
            self._latents[key] = z.float().contiguous()
        return self._latents[key]

    @torch.no_grad()
    def sample(self, n: int, y=None, *, seed: int = 0, sampler: str = "ddpm", ddim_steps: int = 100,
               batch_size: int = 500):
        """``n`` images in **pixel space** (the latents decoded), conditioned on caption rows ``y`` — by default
        drawn uniformly (seeded) from :attr:`sample_rows` (the members' captions once records are set), else from
        every non-null caption. No classifier-free guidance (guidance scale 1)."""
        if y is None:
            rows = self.sample_rows if self.sample_rows is not None else torch.arange(1, max(2, len(self.text)))
            g = torch.Generator().manual_seed(seed)
            y = rows[torch.randint(0, len(rows), (n,), generator=g)]
        z, y = self.sample_chain(n, y, seed=seed, sampler=sampler, ddim_steps=ddim_steps, batch_size=batch_size)
        return self.decode(z), y

    @torch.no_grad()
    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Latents → pixels in [−1, 1] (the VAE decoder of ``z / scaling_factor``)."""
        if self.vae is None:
            return z.clamp(-1, 1)
        return torch.cat([self.vae.decode(z[lo:lo + ENCODE_BATCH].to(self.device) / self.scaling).sample.cpu()
                          for lo in range(0, len(z), ENCODE_BATCH)]).clamp(-1, 1)


def build_latent_target(unet, vae, tokenizer, text_encoder, schedule, facts, *, device, provenance, name="model",
                        cls=None):
    """A :class:`LatentTarget` (or subclass ``cls``) of loaded components (also used for pipelines built in
    memory)."""
    check_finite({"unet/": unet, "vae/": vae, "text_encoder/": text_encoder}, model_where(provenance, name))
    device = _device(device)
    unet = unet.to(device).eval()
    text = CaptionTable(tokenizer, text_encoder, device)
    pred = facts["prediction_type"]
    ac = schedule.alphas_cumprod(device)
    c = int(unet.config.in_channels)

    def eps_fn(z_t, t, y):
        out = unet(z_t, t, encoder_hidden_states=text.table[y], return_dict=False)[0]
        return to_epsilon(out[:, :c], z_t, ac[t], pred)

    where = f"--model {provenance.get('path')}"
    h, w = sample_side(unet.config.sample_size, f"{where} (unet/)")
    if vae is None:
        scaling, pixel_shape = 1.0, (c, h, w)
    else:
        scaling = scaling_factor(getattr(vae.config, "scaling_factor", SD_SCALING_FACTOR), f"{where} (vae/)")
        factor = 2 ** (len(vae.config.block_out_channels) - 1)
        if int(vae.config.latent_channels) != c:
            raise BadInput(f"{where}: the VAE has {vae.config.latent_channels} latent "
                           f"channels, the UNet takes {c}")
        pixel_shape = (int(vae.config.in_channels), h * factor, w * factor)
    prov = dict(provenance)
    prov.update(prediction_type=pred, prediction_conversion=CONVERSIONS[pred], scheduler=facts, num_classes=None,
                sample_shape=[c, h, w], pixel_shape=list(pixel_shape), vae_scaling_factor=scaling,
                latent_encoding="VAE posterior mean x scaling_factor" if vae is not None else "identity (pixels)",
                conditioning="CLIP text embedding of each record's caption (row 0: empty caption)",
                parameters=int(sum(p.numel() for p in unet.parameters())))
    note = f"latent text-to-image model ({prov.get('format')}), {pred} prediction"
    return (cls or LatentTarget)(name, OUTSIDE, unet, schedule, device, None, clip_sample=False, note=note,
                                 calls=Calls(eps_fn=eps_fn), meta={"shape": (c, h, w), "provenance": prov}, vae=vae,
                                 scaling=scaling, text=text, pixel_shape=pixel_shape)


def _index_entry(index: dict, key: str, where: str, allowed) -> bool:
    """True when the pipeline has component ``key`` of an allowed class; False for an identity (null) entry."""
    e = index.get(key)
    if e is None or e == [None, None]:
        return False
    if not (isinstance(e, list) and len(e) == 2 and e[1] in allowed):
        raise BadInput(f"{where}: model_index.json names {key} {e!r}; privbench reads {' / '.join(allowed)}")
    return True


def load_sd_pipeline(p: Path, where: str, override, override_src, device, name, lora=None, cls=None):
    """(LatentTarget, provenance) of a StableDiffusionPipeline-layout folder (see the module doc)."""
    require("transformers", "a text-to-image pipeline (CLIP text encoder)")
    if lora is not None:
        require("peft", "--lora")
    index = read_json(p / "model_index.json", "--model")
    for key in ("text_encoder", "tokenizer", "unet"):
        if not _index_entry(index, key, where, (PIPELINE_COMPONENTS[key],) + (
                TOKENIZER_CLASSES if key == "tokenizer" else ())):
            raise BadInput(f"{where}: a text-to-image pipeline needs a {key}; model_index.json has none")
    has_vae = _index_entry(index, "vae", where, ("AutoencoderKL",))
    unet, unet_files = _diffusers_component(p / "unet", "UNet2DConditionModel", f"{where} (unet/)")
    vae, vae_files = (_diffusers_component(p / "vae", "AutoencoderKL", f"{where} (vae/)") if has_vae
                      else (None, []))
    text_encoder, te_files = _text_encoder(p / "text_encoder", f"{where} (text_encoder/)")
    tokenizer, tok_files = _tokenizer(p / "tokenizer", f"{where} (tokenizer/)")
    sched_file = p / "scheduler" / "scheduler_config.json"
    if override is None:
        if not sched_file.is_file():
            raise BadInput(f"{where}: a pipeline without scheduler/scheduler_config.json; pass --scheduler-config")
        cfg, src = read_json(sched_file, where), str(sched_file)
    else:
        cfg, src = override, override_src
    if cfg.get("_class_name", "DDPMScheduler") not in DISCRETE_SCHEDULERS:
        raise BadInput(f"{where}: scheduler {cfg.get('_class_name')!r} has no discrete beta schedule")
    sched, facts = schedule_from_config(cfg, src)
    facts["source"] = src
    parts = {"unet": unet_files, "vae": vae_files, "text_encoder": te_files + tok_files}
    prov = {"format": "diffusers-sd-pipeline", "path": str(p), "pipeline": index.get("_class_name"),
            "class": "UNet2DConditionModel", "weights": "as saved", "ema": None,
            "components_sha256": {k: (_sha256_files(v, p) if v else None) for k, v in parts.items()},
            "weights_files": [str(f.relative_to(p)) for v in parts.values() for f in v]}
    if lora is not None:
        state, lora_file = read_lora(lora)
        n = apply_lora(unet, state, f"--lora {lora}")
        prov["lora"] = {"path": str(lora_file), "sha256": _sha256_files([lora_file], lora_file.parent),
                        "tensors": n, "applied": "diffusers load_lora_adapter (unfused, scale 1)"}
        prov["weights"] = "as saved + LoRA adapter"
    h = hashlib.sha256(repr(sorted(prov["components_sha256"].items())).encode())
    h.update((prov.get("lora") or {}).get("sha256", "").encode())
    if sched_file.is_file() and override is None:
        h.update(sched_file.read_bytes())
    prov["weights_sha256"] = h.hexdigest()
    tgt = build_latent_target(unet, vae, tokenizer, text_encoder, sched, facts, device=device, provenance=prov,
                              name=name, cls=cls)
    return tgt, tgt.meta["provenance"]
