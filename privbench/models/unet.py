"""UNet factory: a diffusers ``UNet2DModel`` with class conditioning and one optional extra condition.

The class label and the extra discrete condition (e.g. PFDM's clipped/unclipped flag) each have a learned
embedding; their sum is added to the time embedding (diffusers' ``class_embed_type="identity"`` path).
"""
from __future__ import annotations

import torch
from torch import nn

from ..core.errors import BadInput
from ..core.threads import fit_threads_to_model


class Denoiser(nn.Module):
    """ε-prediction network ``forward(x_t, t, y=None, extra=None)``."""

    def __init__(self, in_channels: int, sample_size: int, block_out_channels=(16, 32), layers_per_block: int = 1,
                 attention_levels=(), dropout: float = 0.0, norm_num_groups: int = 8, num_classes: int | None = 10,
                 num_extra: int = 0):
        super().__init__()
        from diffusers import UNet2DModel  # lazy: diffusers (seconds to import) only when this runs

        levels = len(block_out_channels)
        attn = set(attention_levels)
        down = tuple("AttnDownBlock2D" if i in attn else "DownBlock2D" for i in range(levels))
        up = tuple("AttnUpBlock2D" if (levels - 1 - i) in attn else "UpBlock2D" for i in range(levels))
        time_dim = block_out_channels[0] * 4
        self.num_classes = num_classes
        self.num_extra = num_extra
        conditional = bool(num_classes) or num_extra > 0
        self.unet = UNet2DModel(
            sample_size=sample_size, in_channels=in_channels, out_channels=in_channels,
            block_out_channels=tuple(block_out_channels), layers_per_block=layers_per_block,
            down_block_types=down, up_block_types=up, dropout=dropout, norm_num_groups=norm_num_groups,
            add_attention=bool(attn), attention_head_dim=None if not attn else block_out_channels[0] // 4 or 1,
            class_embed_type="identity" if conditional else None,
        )
        self.label_emb = nn.Embedding(num_classes, time_dim) if num_classes else None
        self.extra_emb = nn.Embedding(num_extra, time_dim) if num_extra else None
        self.time_dim = time_dim

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor | None = None,
                extra: torch.Tensor | None = None) -> torch.Tensor:
        cond = None
        if self.label_emb is not None:
            if y is None:
                raise ValueError("this denoiser is class-conditional: pass y")
            cond = self.label_emb(y)
        if self.extra_emb is not None:
            if extra is None:
                raise ValueError("this denoiser has an extra condition: pass extra")
            e = self.extra_emb(extra)
            cond = e if cond is None else cond + e
        return self.unet(x, t, class_labels=cond, return_dict=False)[0]


def build_denoiser(model_cfg, channels: int, size: int, num_classes: int | None, num_extra: int = 0) -> Denoiser:
    n_levels = len(model_cfg.block_out_channels)
    if size % (2 ** (n_levels - 1)) != 0:
        raise BadInput(f"model.block_out_channels has {n_levels} levels; image size {size} must be divisible "
                       f"by {2 ** (n_levels - 1)}")
    net = Denoiser(channels, size, tuple(model_cfg.block_out_channels), model_cfg.layers_per_block,
                   tuple(model_cfg.attention_levels), model_cfg.dropout, model_cfg.norm_num_groups,
                   num_classes if model_cfg.class_conditional else None, num_extra)
    fit_threads_to_model(net)  # a small model: one thread unless the count was given (core/threads.py)
    return net
