"""Overrides of a config: ``--set section.key=value`` pairs and a YAML ``--config`` file, applied in order (later
wins); every value is parsed and checked against its field (:func:`~.settings.parse_value`), an unknown key is
BadInput (exit 2)."""
from __future__ import annotations

import typing
from dataclasses import fields
from pathlib import Path
from typing import Any

from .errors import BadInput
from .registry import PRESETS
from .settings import TOP_LEVEL, check_seed, parse_value, sections
from .yamlio import read_yaml


def set_key(cfg, key: str, raw: Any, source: str = "--set") -> None:
    """Set ``section.key`` of Config ``cfg`` to ``raw`` parsed and checked; the key is marked explicit. ``source``:
    where the value came from, for a refusal (``--set``, or ``--config FILE:``)."""
    if "." not in key:
        raise BadInput(f"{source} {key}: expected section.key=value, e.g. train.steps=2000")
    sec, name = key.split(".", 1)
    secs = sections()
    if sec not in secs:
        raise BadInput(f"{source} {key}: unknown section {sec!r}; sections: {', '.join(secs)}")
    cls = secs[sec]
    names = {f.name: f for f in fields(cls)}
    if name not in names:
        raise BadInput(f"{source} {key}: unknown key; {sec} has: {', '.join(names)}")
    val = parse_value(key, raw, typing.get_type_hints(cls)[name], dict(names[name].metadata), source)
    setattr(getattr(cfg, sec), name, val)
    cfg.explicit.add(key)


def parse_set_args(pairs: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for p in pairs:
        if "=" not in p:
            raise BadInput(f"--set {p!r}: expected key=value, e.g. train.steps=2000")
        k, v = p.split("=", 1)
        out.append((k.strip(), v))
    return out


def load_yaml_overrides(path: str | Path) -> list[tuple[str, Any]]:
    """A ``--config`` file's (key, value) pairs: top-level fields as they are, a section's keys as ``section.key``."""
    data = read_yaml(path, f"--config {path}")
    if data is None:
        return []
    if not isinstance(data, dict):
        raise BadInput(f"--config {path}: expected a mapping of sections")
    out = []
    for sec, body in data.items():
        if sec in TOP_LEVEL:
            out.append((sec, body))
        elif isinstance(body, dict):
            out.extend((f"{sec}.{k}", v) for k, v in body.items())
        else:
            raise BadInput(f"--config {path}: section {sec!r} must be a mapping")
    return out


def apply_overrides(cfg, items: list[tuple[str, Any]], preset: str, dataset: str | None, source: str = "--set",
                    seed_given: bool = False) -> None:
    """Apply (key, value) pairs to Config ``cfg`` in order. ``preset``: the preset already applied (a config file
    naming another is BadInput, as its values would be mislabelled); ``dataset``: the dataset the user named (None:
    the preset's), which no override may replace, nor the method; ``seed_given``: the seed was named too (``--seed``),
    and a different one is BadInput. ``source``: where the pairs came from, for a refusal."""
    for k, v in items:
        if k not in TOP_LEVEL:
            set_key(cfg, k, v, source)
        elif k == "seed":
            seed = check_seed(v)
            if seed_given and seed != cfg.seed:
                raise BadInput(f"{source} seed: {seed} differs from --seed {cfg.seed}: two seeds named; give one")
            cfg.seed = seed
        elif k == "preset":
            try:
                PRESETS.get(str(v))
            except BadInput as e:
                raise BadInput(f"{source} preset: {v!r}: {e}") from None
            if str(v) != preset:
                raise BadInput(f"{source} preset: {v!r} differs from --preset {preset}: a config file cannot change the "
                               f"preset (its values come from --preset); give --preset {v} or drop 'preset:'")
        elif not isinstance(v, str):
            raise BadInput(f"{k}: {v!r}: expected a name")
        elif k == "method" and v != cfg.method:
            raise BadInput(f"{source} method: {v!r} differs from --method {cfg.method}: two methods named; give one")
        elif k == "dataset" and dataset is not None and v != dataset:
            raise BadInput(f"{source} dataset: {v!r} differs from --dataset {dataset}: two datasets named; give one")
        else:
            setattr(cfg, k, v)
