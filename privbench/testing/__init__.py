"""Test models and contract checks, shipped with the package so they work from an installed wheel (docs/api.md §9):
:func:`tiny_sd_pipeline` (:mod:`.sd`; the ``t2i`` extra), :func:`tiny_ddpm` (:mod:`.ddpm`), and
:func:`check_attack` / :func:`check_method` (:mod:`.contracts`).
"""
from __future__ import annotations

from .contracts import CheckSkipped, check_attack, check_method
from .ddpm import tiny_ddpm
from .sd import tiny_sd_pipeline

__all__ = ["CheckSkipped", "check_attack", "check_method", "tiny_ddpm", "tiny_sd_pipeline"]
