"""What DP-SGD updates (``dp.trainable``): every parameter, LoRA adapters, or the attention layers.

Layout and sources: docs/methods.md §0 ("what DP-SGD updates"). LoRA uses peft's initialisation (A Kaiming-uniform
from the seeded global RNG, B = 0). The label embedding stays trainable in ``lora`` and ``attention`` because the
private classes' embeddings under ``data.public=classes:A-B`` were never pre-trained.
"""
from __future__ import annotations

import torch
from torch import nn

from ..core.errors import BadInput
from ..core.extras import require

MODES = ("all", "lora", "attention")


def _attention_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    from diffusers.models.attention_processor import Attention  # lazy: diffusers (seconds to import) only when called

    return [(n, m) for n, m in model.named_modules() if isinstance(m, Attention)]


def lora_targets(model: nn.Module) -> list[str]:
    """Module names that get adapters: every Conv2d of the UNet and every Linear inside an attention block."""
    attn = [n for n, _ in _attention_blocks(model)]
    out = []
    for name, mod in model.named_modules():
        if not name.startswith("unet."):
            continue
        if isinstance(mod, nn.Conv2d) or (isinstance(mod, nn.Linear) and any(name.startswith(a + ".") for a in attn)):
            out.append(name)
    return out


def _embeddings(model: nn.Module) -> list[nn.Parameter]:
    return [p for n, p in model.named_parameters() if n.startswith(("label_emb.", "extra_emb."))]


def apply_trainable(model: nn.Module, mode: str, rank: int = 4, seed: int = 0) -> dict:
    """Make ``model`` train what ``mode`` says (in place; LoRA adapters are injected). Returns a record
    {trainable, lora_rank, n_trainable, n_total, n_base} for result.json and the report."""
    if mode not in MODES:
        raise BadInput(f"dp.trainable={mode!r}: choose {', '.join(MODES)}")
    n_base = sum(p.numel() for p in model.parameters())
    if mode == "lora":
        peft = require("peft", "dp.trainable=lora")
        LoraConfig, inject_adapter_in_model = peft.LoraConfig, peft.inject_adapter_in_model

        targets = lora_targets(model)
        torch.manual_seed(seed)  # the adapters' A initialisation
        inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=rank, lora_dropout=0.0, target_modules=targets,
                                           bias="none"), model)
        for n, p in model.named_parameters():
            p.requires_grad_("lora_" in n)
    elif mode == "attention":
        blocks = _attention_blocks(model)
        if not blocks:
            raise BadInput("dp.trainable=attention: the UNet has no attention block; set model.attention_levels "
                           "(e.g. [1])")
        keep = {id(p) for _, b in blocks for p in b.parameters()}
        for p in model.parameters():
            p.requires_grad_(id(p) in keep)
    if mode != "all":
        for p in _embeddings(model):
            p.requires_grad_(True)
    return {"trainable": mode, "lora_rank": rank if mode == "lora" else None,
            "n_trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "n_total": sum(p.numel() for p in model.parameters()), "n_base": n_base}
