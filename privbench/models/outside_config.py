"""Values of a ``config.json`` privbench did not write, checked before anything is built from it.

Values that get past :mod:`.safe_load`'s parameter count and still break (a ``norm_num_groups`` of 0 divides by
zero in the builder; 200 000 ``layers_per_block`` exhaust memory in the meta build itself) are refused here with one
line naming the component, the key and the bound (docs/external-models.md, "Bounds").
"""
from __future__ import annotations

import math

from ..core.config import MAX_CHANNELS
from ..core.errors import BadInput
from .external_base import MAX_SAMPLE_SIDE

#: residual and attention blocks one network may describe (SD 1.x's UNet: 44 by this count), so a
#: config beyond this is not a diffusion model but a way to exhaust memory while its modules are created
MAX_BLOCKS = 4096
#: a CLIP text encoder's transformer layers at most (CLIP ViT-L/14 has 12, OpenCLIP ViT-bigG 32)
MAX_TEXT_LAYERS = 256
#: the most levels (entries of ``block_out_channels``) a UNet or VAE may have, as privbench's own UNets
MAX_LEVELS = 8
#: a text encoder's positions at most: every caption is padded to them (CLIP has 77, Long-CLIP 248)
MAX_TEXT_POSITIONS = 1024


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _ints(v) -> list[int]:
    """Every integer in ``v`` (an int, or lists of them nested as SDXL's per-block layer counts are)."""
    if _is_int(v):
        return [v]
    if isinstance(v, (list, tuple)):
        return [i for x in v for i in _ints(x)]
    return []


def sample_side(value, where: str) -> tuple[int, int]:
    """(H, W) of a ``sample_size`` that is an integer or a pair in 1..:data:`MAX_SAMPLE_SIDE`."""
    if value is None:
        raise BadInput(f"{where}: config.json has no sample_size")
    sides = list(value) if isinstance(value, (list, tuple)) and len(value) == 2 else [value]
    if not all(_is_int(s) and 1 <= s <= MAX_SAMPLE_SIDE for s in sides):
        raise BadInput(f"{where}: config.json sample_size={value!r}; expected an integer (or a pair) in "
                       f"1..{MAX_SAMPLE_SIDE}")
    return (sides[0], sides[0]) if len(sides) == 1 else (sides[0], sides[1])


def scaling_factor(value, where: str) -> float:
    """A VAE's ``scaling_factor``: a finite number > 0 (it multiplies every latent; 0 would erase them)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise BadInput(f"{where}: config.json scaling_factor={value!r}; expected a finite number > 0 (it scales "
                       f"every latent)")
    return float(value)


def check_unet_or_vae(cfg: dict, where: str) -> None:
    """``block_out_channels``, ``norm_num_groups`` and the block count of a diffusers UNet or VAE config (the
    class defaults apply to keys it leaves out)."""
    for key in ("in_channels", "out_channels", "latent_channels"):
        v = cfg.get(key)
        if v is not None and (not _is_int(v) or not 1 <= v <= MAX_CHANNELS):
            raise BadInput(f"{where}: config.json {key}={_short(v)}; expected an integer in 1..{MAX_CHANNELS}")
    channels = cfg.get("block_out_channels")
    if channels is not None:
        # their size is the parameter count's to bound (safe_load.check_size); here their kind and number
        if not isinstance(channels, (list, tuple)) or not 1 <= len(channels) <= MAX_LEVELS or \
                not all(_is_int(c) and c >= 1 for c in channels):
            raise BadInput(f"{where}: config.json block_out_channels={_short(channels)}; expected 1..{MAX_LEVELS} "
                           f"positive integers")
    if "norm_num_groups" in cfg:
        g = cfg["norm_num_groups"]
        if not _is_int(g) or not 1 <= g <= MAX_CHANNELS:
            raise BadInput(f"{where}: config.json norm_num_groups={g!r}; expected an integer in 1..{MAX_CHANNELS}")
        bad = [c for c in channels or () if c % g]
        if bad:
            raise BadInput(f"{where}: config.json norm_num_groups={g} does not divide block_out_channels "
                           f"{list(channels)} (GroupNorm splits each level's channels into that many groups)")
    _check_blocks(cfg, len(channels) if channels is not None else 4, where)


def _check_blocks(cfg: dict, levels: int, where: str) -> None:
    """Blocks the config describes, counted from its numbers before a single module exists: each level has
    ``layers_per_block`` residual blocks down and one more up, each with its attention's transformer layers."""
    for key in ("layers_per_block", "transformer_layers_per_block", "reverse_transformer_layers_per_block"):
        v = cfg.get(key)
        if v is not None and any(i < 0 for i in _ints(v)):
            raise BadInput(f"{where}: config.json {key}={_short(v)}; expected non-negative integers")
    per_level = max(_ints(cfg.get("layers_per_block", 2)) or [2])
    depth = max(_ints([cfg.get("transformer_layers_per_block", 1), cfg.get("reverse_transformer_layers_per_block")])
                or [1])
    blocks = levels * (2 * per_level + 1) * (1 + depth) + 2 * (1 + depth)
    if blocks > MAX_BLOCKS:
        raise BadInput(f"{where}: config.json describes {blocks:,} residual and attention blocks (layers_per_block="
                       f"{per_level}, transformer layers {depth}, {levels} levels); privbench builds at most "
                       f"{MAX_BLOCKS:,}")


def check_text_encoder(cfg: dict, where: str) -> None:
    """A CLIP text config's layer count and position table (the caption length every query pads to; a
    tokenizer's own ``model_max_length`` is capped by it, :func:`caption_tokens`)."""
    layers = cfg.get("num_hidden_layers", 12)
    if not _is_int(layers) or not 1 <= layers <= MAX_TEXT_LAYERS:
        raise BadInput(f"{where}: config.json num_hidden_layers={_short(layers)}; expected an integer in "
                       f"1..{MAX_TEXT_LAYERS}")
    positions = cfg.get("max_position_embeddings", 77)
    if not _is_int(positions) or not 2 <= positions <= MAX_TEXT_POSITIONS:
        raise BadInput(f"{where}: config.json max_position_embeddings={_short(positions)}; expected an integer "
                       f"in 2..{MAX_TEXT_POSITIONS} (every caption is padded to it)")


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def caption_tokens(tokenizer, text_encoder) -> int:
    """Tokens every caption is padded and cut to: the text encoder's ``max_position_embeddings``, or the
    tokenizer's ``model_max_length`` where that is smaller. A tokenizer folder states its own length in
    ``tokenizer_config.json`` or not at all (transformers then says 10**30), so only the encoder's position table
    is a bound the queries can rely on."""
    positions = int(text_encoder.config.max_position_embeddings)
    own = getattr(tokenizer, "model_max_length", None)
    if isinstance(own, bool) or not isinstance(own, (int, float)) or not math.isfinite(own) or own < 2:
        return positions
    return min(int(own), positions)
