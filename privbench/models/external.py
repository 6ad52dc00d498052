"""Targets from models privbench did not train: diffusers folders, pytorch-ddpm checkpoints, objects in memory.

``load_external(path)`` reads a diffusers pipeline or ``UNet2DModel`` folder, or a pytorch-ddpm ``ckpt.pt``
(:mod:`.pytorch_ddpm`); Stable-Diffusion-layout pipelines go to :mod:`.latent`. Formats, schedules, the conversion
of each prediction type to ε and what is refused: docs/external-models.md. No code from the files runs:
safetensors or ``torch.load(weights_only=True)`` only, and only the ``UNet2DModel`` class is instantiated.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from ..core.constants import OUTSIDE
from ..core.errors import BadInput
from ..core.jsonio import read_json_object, regular_file
from ..core.validation import target_name
from .external_base import (
    CONVERSIONS,
    DEFAULT_SCHEDULE_NOTE,
    ExternalSchedule,
    _device,
    _sha256_files,
    _weight_files,
    default_scheduler_config,
    model_where,
    read_json,
    read_scheduler_config,
    schedule_from_config,
    state_dict_sha256,
    to_epsilon,
)
from .latent import load_sd_pipeline
from .outside_config import check_unet_or_vae, sample_side
from .pytorch_ddpm import PytorchDDPMUNet, load_ckpt
from .safe_load import check_finite, load_strict
from .target import Calls, Target


def build_target(net: torch.nn.Module, kind: str, schedule: ExternalSchedule, facts: dict, *, shape, num_classes,
                 device, provenance: dict, name: str = "model") -> Target:
    """A :class:`Target` whose ``predict_noise`` is ``net``'s output converted to ε (``eps_fn`` hook)."""
    check_finite({"": net}, model_where(provenance, name))
    device = _device(device)
    net = net.to(device).eval()
    pred = facts["prediction_type"]
    channels = int(shape[0])
    ac = schedule.alphas_cumprod(device)

    def net_eps(net_, x_t, t, y, _extra=None):
        """ε from one call of ``net_`` (the UNet, or a functional stand-in for it when gsa takes gradients)."""
        if kind == "diffusers":
            out = net_(x_t, t, class_labels=y if num_classes else None, return_dict=False)[0]
        else:
            out = net_(x_t, t)
        if out.shape[1] != channels:  # learned variance: ε first, then the variance channels
            out = out[:, :channels]
        return to_epsilon(out, x_t, ac[t], pred)

    def eps_fn(x_t, t, y):
        return net_eps(net, x_t, t, y)

    note = (f"external {provenance.get('format')} model, {pred} prediction"
            + ("" if pred == "epsilon" else " converted to eps")
            + f"; {provenance.get('weights_note', '')}").rstrip("; ")
    prov = dict(provenance)
    prov.update(prediction_type=pred, prediction_conversion=CONVERSIONS[pred], scheduler=facts,
                num_classes=num_classes, sample_shape=list(map(int, shape)),
                parameters=int(sum(p.numel() for p in net.parameters())))
    tgt = Target(name, OUTSIDE, net, schedule, device, num_classes, clip_sample=facts.get("clip_sample", True),
                 note=note, calls=Calls(eps_fn=eps_fn, net_eps=net_eps),
                 meta={"shape": tuple(int(s) for s in shape), "provenance": prov})
    return tgt


def _unet_facts(unet, where: str) -> tuple[tuple[int, int, int], int | None]:
    """(C, H, W) and the number of classes of a diffusers UNet2DModel; BadInput for what is left out."""
    c = unet.config
    if getattr(c, "time_embedding_type", "positional") == "fourier":
        raise BadInput(f"{where}: Fourier (continuous-sigma, score-SDE) time embedding; only discrete-timestep "
                       f"DDPM-family UNets are supported")
    if c.class_embed_type is not None:
        raise BadInput(f"{where}: class_embed_type={c.class_embed_type!r} takes a vector, not a class label; "
                       f"only num_class_embeds (class_embed_type null) is supported")
    if c.out_channels not in (c.in_channels, 2 * c.in_channels):
        raise BadInput(f"{where}: out_channels={c.out_channels} is neither in_channels={c.in_channels} nor twice it "
                       f"(learned variance); not a noise/v/x0 predictor")
    ss = c.sample_size
    if ss is None:
        raise BadInput(f"{where}: config.json has no sample_size")
    h, w = (ss, ss) if isinstance(ss, int) else (int(ss[0]), int(ss[1]))
    return (int(c.in_channels), h, w), (int(c.num_class_embeds) if c.num_class_embeds else None)


# ---------------------------------------------------------------------- files

def _unet_weight_files(folder: Path, safe: list[Path], where: str) -> list[Path]:
    """The safetensors files diffusers' ``from_pretrained`` would read: ``diffusion_pytorch_model.safetensors``,
    else the shards its ``.index.json`` names, else the first variant (``diffusion_pytorch_model.<v>.safetensors``
    or its index)."""
    stem = "diffusion_pytorch_model"
    variants = sorted({f.name.split(".")[1] for f in safe if f.name.startswith(stem) and f.name.count(".") == 2})
    for v in [""] + [f".{v}" for v in variants]:
        single = folder / f"{stem}{v}.safetensors"
        if single.is_file():
            return [single]
        index = folder / f"{stem}{v}.safetensors.index.json"
        if index.exists():
            weight_map = read_json_object(index, "--model").get("weight_map")
            names = sorted(set(weight_map.values())) if isinstance(weight_map, dict) else []
            if not names or not all(isinstance(n, str) and "/" not in n and "\\" not in n for n in names):
                raise BadInput(f"{where}: {index.name} has no weight_map of shard file names")
            return [regular_file(folder / n, f"{where}: shard") for n in names]
    raise BadInput(f"{where}: no {stem}.safetensors (nor a sharded index or variant of it)")


def load_unet_folder(folder: Path, where: str):
    """(UNet2DModel, the weight files read) from a ``save_pretrained`` folder, safetensors only, loaded strictly
    and within bounds (:mod:`privbench.models.safe_load`)."""
    cfg_path = folder / "config.json"
    cfg = read_json(cfg_path, "--model")
    cls = cfg.get("_class_name")
    if cls != "UNet2DModel":
        hint = (" (a UNet2DConditionModel is read inside a Stable-Diffusion-layout pipeline folder: model_index.json, "
                "vae/, text_encoder/, tokenizer/, unet/, scheduler/)" if cls == "UNet2DConditionModel" else "")
        raise BadInput(f"{where}: {cfg_path.name} describes {cls!r}, not a diffusers UNet2DModel{hint}")
    if cfg.get("time_embedding_type") == "fourier":
        raise BadInput(f"{where}: Fourier (continuous-sigma, score-SDE) time embedding; only discrete-timestep "
                       f"DDPM-family UNets are supported")
    sample_side(cfg.get("sample_size"), where)
    check_unet_or_vae(cfg, where)  # before the meta build: a zero group count divides by zero in it
    safe, other = _weight_files(folder)
    if not safe:
        if other:
            raise BadInput(f"{where}: holds only pickled weights ({other[0].name}); privbench loads safetensors only "
                           f"(a pickle can run code): re-save with save_pretrained(safe_serialization=True)")
        raise BadInput(f"{where}: no .safetensors weights next to {cfg_path.name}")
    from diffusers import UNet2DModel  # lazy: diffusers (seconds to import) only when this runs

    files = _unet_weight_files(folder, safe, where)
    unet = load_strict(lambda: UNet2DModel.from_config(cfg), files, where)
    return unet, sorted(safe) + [cfg_path]


def _is_pickle(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return False
    return head[:1] == b"\x80" or head[:2] == b"PK"  # pickle protocol >= 2, or torch's zip container


def load_external(path, *, arch: str | None = None, scheduler_config=None, use_ema: bool = True,
                  device="cpu", name: str = "model", lora=None) -> tuple[Target, dict]:
    """(Target, provenance) of a model privbench did not train (formats: docs/external-models.md).

    ``scheduler_config``: a diffusers scheduler config (JSON file or folder), overriding the model's own.
    ``use_ema``: pytorch-ddpm checkpoints only (``ema_model``, else ``net_model``).
    ``lora``: a LoRA adapter for a Stable-Diffusion-layout pipeline (:mod:`privbench.models.latent`)."""
    if arch not in (None, "diffusers", "pytorch-ddpm"):
        raise BadInput(f"--arch {arch!r}: choose pytorch-ddpm (or leave it out for diffusers folders)")
    p = Path(path).expanduser()
    where = f"--model {path}"
    if not p.exists():
        raise BadInput(f"{where}: no such file or directory")
    p = p.resolve()
    override = read_scheduler_config(scheduler_config) if scheduler_config is not None else None
    if override is not None and not isinstance(scheduler_config, dict):
        override_src = f"--scheduler-config {scheduler_config}"
    else:
        override_src = "scheduler_config argument"
    if arch == "pytorch-ddpm":
        return _load_pytorch_ddpm(p, where, override, override_src, use_ema, device, name)
    if p.is_file():
        kind = "a pickle" if _is_pickle(p) else "a file"
        raise BadInput(f"{where}: is {kind}, not a model folder; privbench reads diffusers folders (save_pretrained) "
                       f"or, with --arch pytorch-ddpm, a pytorch-ddpm ckpt.pt (never an arbitrary pickle)")
    if (p / "model_index.json").is_file() and _is_text_to_image(read_json(p / "model_index.json", "--model")):
        return load_sd_pipeline(p, where, override, override_src, device, name, lora=lora)
    if lora is not None:
        raise BadInput(f"--lora {lora}: applies to Stable-Diffusion-layout pipelines (text_encoder/, unet/ "
                       f"UNet2DConditionModel); {path} is not one")
    if (p / "model_index.json").is_file():
        return _load_pipeline(p, where, override, override_src, device, name)
    if (p / "config.json").is_file():
        return _load_unet_only(p, where, override, override_src, device, name)
    if (p / "ckpt.pt").is_file():
        raise BadInput(f"{where}: holds a ckpt.pt; pass --arch pytorch-ddpm to read it as a pytorch-ddpm checkpoint")
    raise BadInput(f"{where}: not a model folder (no model_index.json of a diffusers pipeline, no config.json of a "
                   f"UNet2DModel)")


def _is_text_to_image(index: dict) -> bool:
    """A pipeline with a text encoder or a UNet2DConditionModel goes to :mod:`privbench.models.latent`."""
    unet = index.get("unet")
    return bool(index.get("text_encoder")) or (isinstance(unet, list) and unet[-1:] == ["UNet2DConditionModel"])


def _scheduler_for(override, override_src, own: Path | None, where: str) -> tuple[ExternalSchedule, dict, str]:
    if override is not None:
        cfg, src = override, override_src
    elif own is not None and os.path.lexists(own):  # there but unreadable or dangling: an error, not the default
        cfg, src = read_json(own, f"{where}:"), str(own)
    else:
        cfg, src = default_scheduler_config(), DEFAULT_SCHEDULE_NOTE
    sched, facts = schedule_from_config(cfg, src if src != DEFAULT_SCHEDULE_NOTE else "default schedule")
    facts["source"] = src
    return sched, facts, src


def _load_pipeline(p: Path, where, override, override_src, device, name):
    index = read_json(p / "model_index.json", "--model")
    for latent in ("vae", "vqvae"):
        if index.get(latent):
            raise BadInput(f"{where}: a pipeline with a {latent} (latent / text-conditional diffusion) is not "
                           f"supported; privbench attacks pixel-space UNet2DModel pipelines")
    unet_entry = index.get("unet")
    if not (isinstance(unet_entry, list) and len(unet_entry) == 2 and unet_entry[1] == "UNet2DModel"):
        raise BadInput(f"{where}: model_index.json names unet {unet_entry!r}; only diffusers UNet2DModel is supported")
    if not (p / "unet").is_dir():
        raise BadInput(f"{where}: model_index.json names a unet but the folder has no unet/")
    unet, files = load_unet_folder(p / "unet", f"{where} (unet/)")
    sched_file = p / "scheduler" / "scheduler_config.json"
    if override is None and not os.path.lexists(sched_file):
        raise BadInput(f"{where}: a pipeline without scheduler/scheduler_config.json; pass --scheduler-config FILE")
    sched, facts, _ = _scheduler_for(override, override_src, sched_file, where)
    files = files + ([sched_file] if sched_file.is_file() else [])
    return _finish(unet, "diffusers", sched, facts, p, files, "diffusers-pipeline", device, name,
                   pipeline=index.get("_class_name"))


def _load_unet_only(p: Path, where, override, override_src, device, name):
    unet, files = load_unet_folder(p, where)
    own = p / "scheduler_config.json"
    sched, facts, _ = _scheduler_for(override, override_src, own, where)
    if os.path.lexists(own) and override is None:
        files = files + [own]
    return _finish(unet, "diffusers", sched, facts, p, files, "diffusers-unet", device, name)


def _finish(unet, kind, sched, facts, root: Path, files, fmt, device, name, **extra):
    shape, num_classes = _unet_facts(unet, f"--model {root}")
    if sched.num_timesteps != facts["num_train_timesteps"]:
        raise BadInput(f"--model {root}: inconsistent schedule")
    prov = {"format": fmt, "path": str(root), "weights_files": [str(f.relative_to(root)) for f in files],
            "weights_sha256": _sha256_files(files, root), "class": "UNet2DModel", "ema": None,
            "weights": "as saved", "ema_note": "a diffusers folder does not record whether it holds EMA weights",
            **extra}
    prov["weights_note"] = "weights as saved"
    tgt = build_target(unet, kind, sched, facts, shape=shape, num_classes=num_classes, device=device,
                       provenance=prov, name=name)
    return tgt, tgt.meta["provenance"]


def _load_pytorch_ddpm(p: Path, where, override, override_src, use_ema, device, name):
    if p.is_dir():
        if not (p / "ckpt.pt").is_file():
            raise BadInput(f"{where}: --arch pytorch-ddpm expects a ckpt.pt (or a folder holding one)")
        p = p / "ckpt.pt"
    net, info = load_ckpt(p, use_ema=use_ema)
    cfg = info["config"]
    if override is None:
        sc = {"_class_name": "DDPMScheduler", "num_train_timesteps": cfg["T"], "beta_start": cfg["beta_1"],
              "beta_end": cfg["beta_T"], "beta_schedule": "linear",
              "variance_type": "fixed_large" if cfg["var_type"] == "fixedlarge" else "fixed_small",
              "clip_sample": True, "prediction_type": "epsilon"}
        src = "pytorch-ddpm defaults: linear beta 1e-4..0.02, T=1000, epsilon, var_type fixedlarge"
    else:
        sc, src = override, override_src
    sched, facts = schedule_from_config(sc, src)
    facts["source"] = src
    if facts["num_train_timesteps"] != cfg["T"]:
        raise BadInput(f"{where}: the checkpoint's time table has T={cfg['T']} rows, the schedule "
                       f"{facts['num_train_timesteps']} steps")
    used = info["weights"]
    prov = {"format": "pytorch-ddpm", "path": str(p), "weights_files": [p.name],
            "weights_sha256": _sha256_files([p], p.parent), "class": "pytorch-ddpm UNet", "ema": info["ema"],
            "weights": used, "step": info["step"], "arch": {k: cfg[k] for k in
                                                            ("T", "ch", "ch_mult", "attn", "num_res_blocks",
                                                             "dropout", "in_channels")},
            "weights_note": f"{used} weights" + (" (EMA)" if info["ema"] else " (not EMA)")}
    shape = (cfg["in_channels"], cfg["img_size"], cfg["img_size"])
    tgt = build_target(net, "pytorch-ddpm", sched, facts, shape=shape, num_classes=None, device=device,
                       provenance=prov, name=name)
    return tgt, tgt.meta["provenance"]


# ---------------------------------------------------------------------- objects in memory

def wrap(model, scheduler=None, *, device=None, name: str = "model") -> Target:
    """``privbench.wrap(unet_or_pipeline, scheduler=None)`` → a Target of objects already in memory (docs/api.md §6).

    ``model`` may also be anything with ``.unet`` and ``.scheduler``, or a Target (returned as is); ``scheduler``
    also a config file."""
    if isinstance(model, Target):
        return model
    name = target_name(name, "wrap: name")
    from diffusers import UNet2DModel  # lazy: diffusers (seconds to import) only when this runs

    if not isinstance(model, torch.nn.Module) and hasattr(model, "unet"):
        if scheduler is None:
            scheduler = getattr(model, "scheduler", None)
        model = model.unet
    if isinstance(scheduler, (str, Path)):
        cfg, src = read_scheduler_config(scheduler), str(scheduler)
    elif isinstance(scheduler, dict):
        cfg, src = dict(scheduler), "scheduler config given"
    elif scheduler is not None and hasattr(scheduler, "config"):
        cfg = dict(scheduler.config)
        cfg.setdefault("_class_name", type(scheduler).__name__)
        src = f"{type(scheduler).__name__} given"
    elif scheduler is None:
        cfg, src = None, None
    else:
        raise BadInput(f"wrap: scheduler must be a diffusers scheduler, its config dict or a file, not "
                       f"{type(scheduler).__name__}")
    try:
        dev = next(model.parameters()).device if device is None else _device(device)
    except (StopIteration, AttributeError):
        dev = torch.device("cpu")
    if isinstance(model, UNet2DModel):
        if cfg is None:
            cfg, src = default_scheduler_config(), DEFAULT_SCHEDULE_NOTE
        sched, facts = schedule_from_config(cfg, src)
        facts["source"] = src
        shape, num_classes = _unet_facts(model, "wrap")
        prov = {"format": "in-memory", "class": "UNet2DModel", "weights_sha256": state_dict_sha256(model),
                "ema": None, "weights": "as given", "weights_note": "weights as given"}
        return build_target(model, "diffusers", sched, facts, shape=shape, num_classes=num_classes, device=dev,
                            provenance=prov, name=name)
    if isinstance(model, PytorchDDPMUNet):
        c = model.cfg
        if cfg is None:
            cfg = {"_class_name": "DDPMScheduler", "num_train_timesteps": c.T, "beta_start": c.beta_1,
                   "beta_end": c.beta_T, "beta_schedule": "linear",
                   "variance_type": "fixed_large" if c.var_type == "fixedlarge" else "fixed_small"}
            src = "pytorch-ddpm defaults"
        sched, facts = schedule_from_config(cfg, src)
        facts["source"] = src
        prov = {"format": "in-memory", "class": "pytorch-ddpm UNet", "weights_sha256": state_dict_sha256(model),
                "ema": None, "weights": "as given", "weights_note": "weights as given"}
        return build_target(model, "pytorch-ddpm", sched, facts, shape=(c.in_channels, c.img_size, c.img_size),
                            num_classes=None, device=dev, provenance=prov, name=name)
    raise BadInput(f"wrap: expected a diffusers pipeline or UNet2DModel, a pytorch-ddpm UNet or a Target, not "
                   f"{type(model).__name__}")
