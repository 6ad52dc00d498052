"""The value that names an outside model and its records; imports nothing heavy (the CLI builds it before torch
loads)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OutsideSpec:
    """An outside model and its records as the ``--model`` option group names them (a bench suite's ``external``
    entry alike). ``claim``: :func:`privbench.privacy.claims.user_claim`'s object; ``sets``: ``--set`` overrides
    (:func:`~privbench.runs.external.external_config`)."""
    model_path: Any
    members_spec: Any = None
    nonmembers_spec: Any = None
    split: Any = None
    dataset: str | None = None
    data_root: Any = None
    arch: str | None = None
    scheduler_config: Any = None
    use_ema: bool = True
    target_name: str = "model"
    claim: dict | None = None
    records_range: str = "auto"
    lora: Any = None
    caption: str | None = None
    reference_recipe: Any = None
    reference_data: Any = None
    preset: str = "tiny"
    sets: tuple = ()
    device: Any = "auto"
