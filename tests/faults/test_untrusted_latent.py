"""For text-to-image pipelines: a Stable-Diffusion component whose config describes a huge network is
refused (exit 2 material) from its meta-device size, before any memory is allocated."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from privbench.core.errors import BadInput
from privbench.models import latent


def test_a_huge_unet_config_is_refused_before_allocation(tmp_path):
    d = tmp_path / "unet"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "_class_name": "UNet2DConditionModel", "block_out_channels": [10000, 10000],
        "down_block_types": ["DownBlock2D", "DownBlock2D"], "up_block_types": ["UpBlock2D", "UpBlock2D"],
        "cross_attention_dim": 32, "norm_num_groups": 8}))
    with pytest.raises(BadInput, match="parameters and buffers .* privbench loads at most"):
        latent._diffusers_component(d, "UNet2DConditionModel", "unet")


def test_a_huge_text_encoder_config_is_refused_before_allocation(tmp_path):
    d = tmp_path / "text_encoder"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "architectures": ["CLIPTextModel"], "vocab_size": 1000, "hidden_size": 64000, "intermediate_size": 64000,
        "num_hidden_layers": 4, "num_attention_heads": 8, "max_position_embeddings": 77}))
    with pytest.raises(BadInput, match="parameters and buffers"):
        latent._text_encoder(d, "text_encoder")
