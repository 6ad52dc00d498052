"""Test models and contract checks, shipped with the package so they work from an installed wheel (no checkout):

* :func:`tiny_sd_pipeline` — a tiny Stable-Diffusion-shaped pipeline fine-tuned outside privbench with plain
  diffusers/transformers/peft code (full fine-tune, LoRA, pre-trained base, random-init control) and its captioned
  member / held-out records (:mod:`privbench.testing.sd`; needs the ``t2i`` extra);
* :func:`tiny_ddpm` — a tiny pixel-space DDPMPipeline that memorised 32 digits and its random-init twin
  (:mod:`privbench.testing.ddpm`);
* :func:`check_attack` / :func:`check_method` — the registry contract a plug-in author runs on their own class
  (:mod:`privbench.testing.contracts`).
"""
from __future__ import annotations

from .contracts import CheckSkipped, check_attack, check_method
from .ddpm import tiny_ddpm
from .sd import tiny_sd_pipeline

__all__ = ["CheckSkipped", "check_attack", "check_method", "tiny_ddpm", "tiny_sd_pipeline"]
