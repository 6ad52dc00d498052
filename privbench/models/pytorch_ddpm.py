"""The UNet of the ``pytorch-ddpm`` code base (github.com/w86763777/pytorch-ddpm, ``model.py``), written for privbench.

The official PIA (kong13661/PIA) and SecMI (jinhaoduan/SecMI) repositories train and attack their CIFAR-10 victims
with this network, so its module tree and state-dict keys are reproduced exactly (a ``ckpt.pt`` loads with
``strict=True``); the defaults are its CIFAR-10 flags, ε-prediction. Differences from the official code, none of
which changes a loaded checkpoint's predictions: docs/external-models.md ("On the command line").
"""
from __future__ import annotations

import math
import pickletools
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..core.config import MAX_TIMESTEPS
from ..core.errors import BadInput
from .safe_load import check_state_dict, meta_build, state_dict_info


@dataclass
class PytorchDDPMConfig:
    """The flags of pytorch-ddpm's ``main.py`` that shape the network and its schedule (CIFAR-10 defaults)."""
    T: int = 1000
    ch: int = 128
    ch_mult: list = field(default_factory=lambda: [1, 2, 2, 2])
    attn: list = field(default_factory=lambda: [1])
    num_res_blocks: int = 2
    dropout: float = 0.1
    in_channels: int = 3
    num_groups: int = 32
    img_size: int = 32
    beta_1: float = 1e-4
    beta_T: float = 0.02
    var_type: str = "fixedlarge"

    def to_dict(self) -> dict:
        return asdict(self)


def _sinusoid_table(T: int, dim: int) -> torch.Tensor:
    """T×dim table: row t holds sin/cos of t·10000^(−2i/dim), interleaved (sin at even, cos at odd columns)."""
    freq = torch.exp(-torch.arange(0, dim, 2).float() / dim * math.log(10000.0))
    angle = torch.arange(T).float()[:, None] * freq[None, :]
    return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(T, dim)


class _TimeEmbedding(nn.Module):
    def __init__(self, T: int, ch: int, tdim: int):
        super().__init__()
        # indices 0..3 are the official Sequential's: the table, Linear, Swish, Linear
        self.timembedding = nn.Sequential(nn.Embedding.from_pretrained(_sinusoid_table(T, ch)), nn.Linear(ch, tdim),
                                          nn.SiLU(), nn.Linear(tdim, tdim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.timembedding(t)


class _DownSample(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.main = nn.Conv2d(ch, ch, 3, stride=2, padding=1)

    def forward(self, x, temb):
        del temb  # the blocks' forward(x, temb) interface: resampling takes no time embedding
        return self.main(x)


class _UpSample(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.main = nn.Conv2d(ch, ch, 3, stride=1, padding=1)

    def forward(self, x, temb):
        del temb  # the blocks' forward(x, temb) interface: resampling takes no time embedding
        return self.main(F.interpolate(x, scale_factor=2, mode="nearest"))


class _AttnBlock(nn.Module):
    def __init__(self, ch: int, groups: int):
        super().__init__()
        self.group_norm = nn.GroupNorm(groups, ch)
        self.proj_q = nn.Conv2d(ch, ch, 1)
        self.proj_k = nn.Conv2d(ch, ch, 1)
        self.proj_v = nn.Conv2d(ch, ch, 1)
        self.proj = nn.Conv2d(ch, ch, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        n = self.group_norm(x)

        def tokens(m):  # B×C×H×W → B×(H·W)×C
            return m.flatten(2).transpose(1, 2)

        out = F.scaled_dot_product_attention(tokens(self.proj_q(n)), tokens(self.proj_k(n)), tokens(self.proj_v(n)))
        return x + self.proj(out.transpose(1, 2).reshape(b, c, h, w))


class _ResBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, tdim: int, dropout: float, attn: bool, groups: int):
        super().__init__()
        self.block1 = nn.Sequential(nn.GroupNorm(groups, in_ch), nn.SiLU(), nn.Conv2d(in_ch, out_ch, 3, padding=1))
        self.temb_proj = nn.Sequential(nn.SiLU(), nn.Linear(tdim, out_ch))
        self.block2 = nn.Sequential(nn.GroupNorm(groups, out_ch), nn.SiLU(), nn.Dropout(dropout),
                                    nn.Conv2d(out_ch, out_ch, 3, padding=1))
        self.shortcut = nn.Conv2d(in_ch, out_ch, 1) if in_ch != out_ch else nn.Identity()
        self.attn = _AttnBlock(out_ch, groups) if attn else nn.Identity()

    def forward(self, x, temb):
        h = self.block1(x) + self.temb_proj(temb)[:, :, None, None]
        h = self.block2(h) + self.shortcut(x)
        return self.attn(h)


class PytorchDDPMUNet(nn.Module):
    """``forward(x, t)`` → ε̂, with pytorch-ddpm's module tree and state-dict keys."""

    def __init__(self, cfg: PytorchDDPMConfig | None = None, **overrides):
        super().__init__()
        cfg = cfg or PytorchDDPMConfig(**overrides)
        if any(i >= len(cfg.ch_mult) or i < 0 for i in cfg.attn):
            raise BadInput(f"pytorch-ddpm: attn levels {cfg.attn} out of range for ch_mult {cfg.ch_mult}")
        self.cfg = cfg
        ch, tdim, g = cfg.ch, cfg.ch * 4, cfg.num_groups
        self.time_embedding = _TimeEmbedding(cfg.T, ch, tdim)
        self.head = nn.Conv2d(cfg.in_channels, ch, 3, padding=1)
        self.downblocks = nn.ModuleList()
        skips, now = [ch], ch
        last = len(cfg.ch_mult) - 1
        for level, mult in enumerate(cfg.ch_mult):
            for _ in range(cfg.num_res_blocks):
                self.downblocks.append(_ResBlock(now, ch * mult, tdim, cfg.dropout, level in cfg.attn, g))
                now = ch * mult
                skips.append(now)
            if level != last:
                self.downblocks.append(_DownSample(now))
                skips.append(now)
        self.middleblocks = nn.ModuleList([_ResBlock(now, now, tdim, cfg.dropout, True, g),
                                           _ResBlock(now, now, tdim, cfg.dropout, False, g)])
        self.upblocks = nn.ModuleList()
        for level in reversed(range(len(cfg.ch_mult))):
            for _ in range(cfg.num_res_blocks + 1):
                self.upblocks.append(_ResBlock(skips.pop() + now, ch * cfg.ch_mult[level], tdim, cfg.dropout,
                                               level in cfg.attn, g))
                now = ch * cfg.ch_mult[level]
            if level != 0:
                self.upblocks.append(_UpSample(now))
        self.tail = nn.Sequential(nn.GroupNorm(g, now), nn.SiLU(), nn.Conv2d(now, cfg.in_channels, 3, padding=1))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        temb = self.time_embedding(t)
        h = self.head(x)
        skips = [h]
        for layer in self.downblocks:
            h = layer(h, temb)
            skips.append(h)
        for layer in self.middleblocks:
            h = layer(h, temb)
        for layer in self.upblocks:
            if isinstance(layer, _ResBlock):
                h = torch.cat([h, skips.pop()], dim=1)
            h = layer(h, temb)
        return self.tail(h)


# ---------------------------------------------------------------------- state dicts and checkpoints

def strip_module_prefix(sd: dict) -> dict:
    """Drop ``module.`` (torch.nn.DataParallel) from every key, as PIA's ``get_model`` does."""
    return {(k[7:] if k.startswith("module.") else k): v for k, v in sd.items()}


def infer_config(sd: dict, base: PytorchDDPMConfig | None = None) -> PytorchDDPMConfig:
    """The network flags a pytorch-ddpm state dict was built with (T, ch, ch_mult, attn, num_res_blocks, channels).

    Settings that leave no trace in the weights (dropout, image size, schedule, GroupNorm groups) come from
    ``base`` (default: the CIFAR-10 flags)."""
    base = base or PytorchDDPMConfig()
    try:
        table = sd["time_embedding.timembedding.0.weight"]
        head = sd["head.weight"]
    except KeyError as e:
        raise BadInput(f"not a pytorch-ddpm state dict (no key {e.args[0]!r})") from None
    ch, in_ch = int(head.shape[0]), int(head.shape[1])
    blocks: dict[int, str] = {}
    for k in sd:
        if k.startswith("downblocks."):
            i = int(k.split(".")[1])
            kind = "down" if k.split(".")[2] == "main" else "res"
            blocks[i] = kind
    levels, cur = [], []
    for i in sorted(blocks):
        if blocks[i] == "down":
            levels.append(cur)
            cur = []
        else:
            cur.append(i)
    levels.append(cur)
    if not levels[0]:
        raise BadInput("not a pytorch-ddpm state dict (no residual blocks under downblocks.*)")
    n_res = len(levels[0])
    ch_mult, attn = [], []
    for level, idx in enumerate(levels):
        if len(idx) != n_res:
            raise BadInput(f"pytorch-ddpm state dict: level {level} has {len(idx)} residual blocks, "
                           f"level 0 has {n_res}")
        out = int(sd[f"downblocks.{idx[-1]}.block1.2.weight"].shape[0])
        if out % ch:
            raise BadInput(f"pytorch-ddpm state dict: level {level} width {out} is not a multiple of ch={ch}")
        ch_mult.append(out // ch)
        if f"downblocks.{idx[0]}.attn.proj_q.weight" in sd:
            attn.append(level)
    d = base.to_dict()
    d.update(T=int(table.shape[0]), ch=ch, ch_mult=ch_mult, attn=attn, num_res_blocks=n_res, in_channels=in_ch)
    return PytorchDDPMConfig(**d)


def read_ckpt(path: str | Path) -> dict:
    """A ``ckpt.pt`` as a dict, read with ``torch.load(weights_only=True)`` (a file that needs code to load is
    refused with one line, and that code never runs)."""
    path = Path(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure: refuse, never fall back to full pickle
        raise BadInput(f"--model {path}: not loadable as plain tensors with torch.load(weights_only=True) "
                       f"({_why(e, path)}); privbench never runs code from a checkpoint") from None
    if not isinstance(obj, dict):
        raise BadInput(f"--model {path}: a pytorch-ddpm ckpt.pt holds a dict with 'net_model'/'ema_model', "
                       f"this holds a {type(obj).__name__}")
    return obj


def _why(e: Exception, path: Path | None = None) -> str:
    """Why torch's weights_only unpickler refused a file: the globals it would have had to import (named by
    :func:`_blocked_globals`, without running them), else the refusal's own reason, cut at a word."""
    blocked = _blocked_globals(path) if path is not None else []
    if blocked:
        more = f" and {len(blocked) - 3} more" if len(blocked) > 3 else ""
        return f"it needs the blocked global{'s' if len(blocked) > 1 else ''} {', '.join(blocked[:3])}{more}"
    text = " ".join(str(e).split())
    m = re.search(r"WeightsUnpickler error: (.+?)(?: Check the documentation|$)", text)
    reason = (m.group(1) if m else f"{type(e).__name__}: {text}").strip() or type(e).__name__
    return reason if len(reason) <= 120 else reason[:120].rsplit(" ", 1)[0] + " ..."


#: pickle opcodes read at most when naming a plain pickle's globals (the file is never executed)
MAX_PICKLE_OPS = 1_000_000


def _blocked_globals(path: Path) -> list[str]:
    """``module.name`` of every global a checkpoint would import that ``weights_only`` does not allow: torch's
    own scan for its zip format, else a scan of the pickle's opcodes (``pickletools``, nothing executed)."""
    try:
        return sorted(set(torch.serialization.get_unsafe_globals_in_checkpoint(str(path))))
    except Exception:  # noqa: BLE001 - not torch's zip format (or an older torch): scan the plain pickle
        pass
    found, strings = [], []
    try:
        with open(path, "rb") as fh:
            for i, (op, arg, _pos) in enumerate(pickletools.genops(fh)):
                if i > MAX_PICKLE_OPS or op.name == "STOP":
                    break
                if op.name == "GLOBAL":
                    found.append(str(arg).replace(" ", "."))
                elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                    found.append(f"{strings[-2]}.{strings[-1]}")
                elif isinstance(arg, str):
                    strings.append(arg)
    except Exception:  # noqa: BLE001 - a truncated or malformed pickle: name what was seen
        pass
    allowed = {f"{g.__module__}.{g.__qualname__}" for g in torch.serialization.get_safe_globals()
               if hasattr(g, "__qualname__")}
    allowed |= {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter"}
    return sorted({g for g in found if g not in allowed and not (g.startswith("torch.") and g.endswith("Storage"))})


def load_ckpt(path: str | Path, use_ema: bool = True, base: PytorchDDPMConfig | None = None
              ) -> tuple[PytorchDDPMUNet, dict]:
    """(network with the checkpoint's weights, info) from a pytorch-ddpm ``ckpt.pt``.

    ``use_ema`` picks ``ema_model`` (default, as PIA's ``get_model(WA=True)``) or ``net_model``; a bare state dict
    (no such keys) is accepted and reported as ``weights: state_dict``. ``info`` says which weights were used."""
    obj = read_ckpt(path)
    want = "ema_model" if use_ema else "net_model"
    if want in obj:
        sd, used = obj[want], want
    elif "ema_model" in obj or "net_model" in obj:
        have = [k for k in ("ema_model", "net_model") if k in obj]
        raise BadInput(f"--model {path}: has no {want!r} weights (it has {', '.join(have)}); "
                       f"{'pass --no-ema' if use_ema else 'drop --no-ema'} to use them")
    elif "head.weight" in obj or "module.head.weight" in obj:
        sd, used = obj, "state_dict"
    else:
        keys = ", ".join(sorted(map(str, obj))[:6])
        raise BadInput(f"--model {path}: not a pytorch-ddpm checkpoint (keys: {keys}); expected 'net_model' and "
                       f"'ema_model' state dicts")
    if not isinstance(sd, dict) or not all(torch.is_tensor(v) for v in sd.values()):
        raise BadInput(f"--model {path}: {used!r} is not a state dict of tensors")
    sd = strip_module_prefix(sd)
    net = _bounded_net(sd, base, f"--model {path} ({used})")
    net.load_state_dict(sd, strict=True)
    info = {"weights": used, "ema": used == "ema_model", "step": _int_or_none(obj.get("step")),
            "config": net.cfg.to_dict()}
    return net.eval(), info


def _bounded_net(sd: dict, base: PytorchDDPMConfig | None, where: str) -> PytorchDDPMUNet:
    """The network ``sd`` was saved from, built only after its tensors' storage, its time table's T (at most
    MAX_TIMESTEPS) and its size (parameters + buffers, at most MAX_PARAMETERS, counted on the meta device) were
    checked and its keys, shapes and dtypes matched (:mod:`privbench.models.safe_load`)."""
    state_dict_info(sd, where)  # before any shape is believed: no zero or overlapping strides
    try:
        cfg = infer_config(sd, base)
    except (KeyError, ValueError, IndexError) as e:
        if isinstance(e, BadInput):
            raise BadInput(f"{where}: {e}") from None
        raise BadInput(f"{where}: not a pytorch-ddpm state dict ({type(e).__name__}: {str(e)[:80]})") from None
    if not 2 <= cfg.T <= MAX_TIMESTEPS:
        raise BadInput(f"{where}: its time table has T={cfg.T:,} rows; privbench loads 2..{MAX_TIMESTEPS:,}")
    if cfg.ch % cfg.num_groups:
        raise BadInput(f"{where}: ch={cfg.ch} is not divisible by the {cfg.num_groups} GroupNorm groups")
    check_state_dict(meta_build(lambda: PytorchDDPMUNet(cfg), where), sd, where)
    return PytorchDDPMUNet(cfg)


def _int_or_none(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
