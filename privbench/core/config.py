"""A run's config: method, dataset, preset, seed and one object per registered section (``cfg.train.steps``),
resolved as defaults → preset → YAML file → ``--set`` overrides, and its training hash, which names the run.
Re-exports what the rest of privbench imports from :mod:`.settings`, :mod:`.sections` and :mod:`.overrides`.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import typing
from dataclasses import fields
from typing import Any

from . import settings
from .errors import BadInput
from .overrides import apply_overrides, load_yaml_overrides, parse_set_args, set_key
from .registry import DATASETS, METHODS, PRESETS
from .sections import MAX_CHANNELS, MAX_PARAMETERS, MAX_TIMESTEPS, ModelConfig
from .settings import MAX_SEED, all_keys, check_seed, register_section, setting
from .version import __version__

__all__ = ["BASE_SECTIONS", "HASH_DIGITS", "MAX_CHANNELS", "MAX_PARAMETERS", "MAX_SEED",
           "MAX_TIMESTEPS", "Config", "ModelConfig", "all_keys", "apply_preset", "build_config", "check_config",
           "check_seed", "config_from_dict", "config_hash", "method_config_keys", "parse_set_args",
           "preset_dataset", "refuse_unread_keys", "register_section", "set_key", "setting", "unread_keys"]

BASE_SECTIONS = ("data", "model", "diffusion", "train")  # every method trains from these


class Config:
    """method, dataset, preset, seed and one object per registered section (``cfg.train.steps``)."""

    def __init__(self, method: str, dataset: str = "digits", preset: str = "tiny", seed: int = 0):
        self.method, self.dataset, self.preset, self.seed = method, dataset, preset, seed
        self._sections = {name: cls() for name, cls in settings.sections().items()}
        self.explicit: set[str] = set()  # keys set by --set / --config (an attack refuses the ones it does not use)

    def __getattr__(self, name):
        secs = self.__dict__.get("_sections")
        if secs is not None and name in secs:
            return secs[name]
        raise AttributeError(name)

    def __reduce__(self):
        # the section classes are made at run time (not importable): a config travels as its values (Ray tasks)
        return _config_from_state, (self.to_dict(), sorted(self.explicit))

    def section_names(self) -> list[str]:
        return list(self._sections)

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in settings.TOP_LEVEL}
        d.update({name: dataclasses.asdict(obj) for name, obj in self._sections.items()})
        return d

    def training_dict(self) -> dict:
        """What decides what is trained: the base sections, plus what the method declares it reads
        (``config_keys``: "section" or "section.key"), minus every ``training=False`` field. So attack or
        sampling settings never force a retrain, and e.g. a pfdm default change never re-keys a dpdm run."""
        d = self.to_dict()
        keys = method_config_keys(self.method)
        # a key a method names explicitly is hashed at every value, its default included
        hashed = {k for k in keys or () if "." in k}
        if self.train.init != "scratch":  # a fine-tune caps its EMA (models/loop.ema_capped)
            hashed.add("train.ema_start_weight")
        for name in list(d):
            if name in settings.TOP_LEVEL:
                continue
            if not settings.SECTIONS[name].training:
                d.pop(name)
                continue
            for f in fields(settings.section_class(name)):
                if not f.metadata.get("training", True):
                    d[name].pop(f.name, None)
                elif (not f.metadata.get("hashed_at_default", True) and d[name].get(f.name) == settings.field_default(f)
                      and f"{name}.{f.name}" not in hashed):
                    d[name].pop(f.name, None)
        d.pop("preset")
        if keys is None:  # a method that does not say what it reads: every training section counts
            return _hash_layout(d)
        out = {k: d[k] for k in ("method", "dataset", "seed", *BASE_SECTIONS)}
        for key in keys:
            sec, _, name = key.partition(".")
            if name:
                if name in d[sec]:  # absent: a hashed_at_default=False field at its default
                    out.setdefault(sec, {})[name] = d[sec][name]
            else:
                out[sec] = d[sec]
        return _hash_layout(out)

    def training_hash(self) -> str:
        return config_hash(self.training_dict())

    def __repr__(self) -> str:
        return f"Config({self.method}, {self.dataset}, {self.preset}, seed={self.seed})"


def _hash_layout(d: dict) -> dict:
    """``d`` with the fields of each section registered ``hashed_under`` another inside that one's mapping."""
    for name, sec in settings.SECTIONS.items():
        if sec.hashed_under and d.get(name):
            d.setdefault(sec.hashed_under, {}).update(d.pop(name))
    return d


def method_config_keys(method: str):
    """The ``config_keys`` of a registered method class, or None (unknown method or none declared)."""
    try:
        factory = METHODS.get(method).factory
    except BadInput:  # unknown method: validated elsewhere with a clear message
        return None
    return getattr(factory, "config_keys", None)


def unread_keys(method: str, given, also: tuple[str, ...] = ()) -> list[str]:
    """The keys of ``given`` in a training section beyond :data:`BASE_SECTIONS` and the sections ``also`` that
    ``method`` does not read (its ``config_keys``): setting one changes nothing that is trained."""
    keys = method_config_keys(method)
    if keys is None:
        return []
    return sorted(k for k in given if (sec := k.partition(".")[0]) not in BASE_SECTIONS + also
                  and sec in settings.SECTIONS and settings.SECTIONS[sec].training and sec not in keys
                  and k not in keys)


def refuse_unread_keys(method: str, given, where: str = "", also: tuple[str, ...] = ()) -> None:
    """BadInput naming the :func:`unread_keys` of ``given`` and what ``method`` reads (as an attack refuses an
    ``attack.*`` key it does not use: runs/attack.make_attack)."""
    unread = unread_keys(method, given, also)
    if unread:
        own = [k for k in method_config_keys(method) or () if k.partition(".")[0] not in BASE_SECTIONS + also]
        reads = [k if "." in k else f"{k}.*" for k in (*BASE_SECTIONS, *also, *own)]
        raise BadInput(f"{where}{', '.join(unread)}: not read by method {method}; it trains from {', '.join(reads)}")


#: the hex digits of a training hash (a run folder's name ends in them: runs.store)
HASH_DIGITS = 12


def config_hash(d: dict) -> str:
    blob = json.dumps(d, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:HASH_DIGITS]


def preset_dataset(preset: str) -> str:
    """The dataset preset ``preset`` trains when the user names none."""
    return PRESETS.get(preset).factory.dataset


def apply_preset(c: Config, preset: str, dataset: str | None = None) -> None:
    """The preset's values into ``c``; ``dataset``: the dataset the user named (None: the preset's own)."""
    c.dataset = dataset if dataset is not None else preset_dataset(preset)
    for name, sec in settings.SECTIONS.items():
        for k, v in sec.presets.get(preset, {}).items():
            setattr(getattr(c, name), k, copy.deepcopy(v))


def check_config(cfg: Config) -> None:
    """The checks that involve several keys (BadInput, one line); single keys are checked by :func:`parse_value`."""
    m, d = cfg.model, cfg.diffusion
    for c in m.block_out_channels:
        if c % m.norm_num_groups:
            raise BadInput(f"model.norm_num_groups={m.norm_num_groups}: must divide every level's channels "
                           f"(model.block_out_channels={m.block_out_channels})")
    levels = len(m.block_out_channels)
    bad = [a for a in m.attention_levels if not 0 <= a < levels]
    if bad or len(set(m.attention_levels)) != len(m.attention_levels):
        raise BadInput(f"model.attention_levels={m.attention_levels}: distinct UNet level indices in "
                       f"[0, {levels}) (model.block_out_channels has {levels} levels)")
    if d.beta_schedule in ("linear", "scaled_linear") and not d.beta_start < d.beta_end:
        raise BadInput(f"diffusion.beta_start={d.beta_start:g} must be < diffusion.beta_end={d.beta_end:g} "
                       f"(the {d.beta_schedule} schedule increases the noise)")
    public = cfg.data.public
    if public not in ("none", "pool") and not (public.startswith("classes:") and public[8:9].isdigit()):
        raise BadInput(f"data.public={public!r}: choose none, pool or classes:A-B (e.g. classes:5-9)")
    if cfg.sample.ddim_steps > d.num_timesteps:
        raise BadInput(f"sample.ddim_steps={cfg.sample.ddim_steps}: must be <= diffusion.num_timesteps="
                       f"{d.num_timesteps}")


def build_config(method: str, dataset: str | None = None, preset: str = "tiny", seed: int = 0,
                 overrides: list[tuple[str, Any]] | None = None, config_file: str | None = None, *,
                 seed_given: bool = False) -> Config:
    """Resolve a config: defaults → preset → YAML file → ``--set`` overrides (later wins). ``dataset``: the one the
    user named (None: the preset's); a config file or ``--set`` naming another one, or another method, is BadInput,
    and so is another seed when ``seed_given`` (``--seed`` was on the command line)."""
    METHODS.get(method)
    PRESETS.get(preset)
    seed = check_seed(seed, "--seed")
    if dataset is not None and not isinstance(dataset, str):
        raise BadInput(f"--dataset {dataset!r}: expected a name")
    cfg = Config(method=method, dataset=dataset or "digits", preset=preset, seed=seed)
    apply_preset(cfg, preset, dataset)
    if config_file:
        apply_overrides(cfg, load_yaml_overrides(config_file), preset, dataset, f"--config {config_file}:",
                        seed_given)
    apply_overrides(cfg, list(overrides or []), preset, dataset, seed_given=seed_given)
    DATASETS.get(cfg.dataset)
    METHODS.get(cfg.method)
    check_config(cfg)
    return cfg


def _config_from_state(d: dict, explicit: list[str]) -> Config:
    cfg = config_from_dict(d)
    cfg.explicit = set(explicit)
    return cfg


def config_from_dict(d: dict) -> Config:
    """The config stored in a run's ``config.yaml``: every known key is type- and range-checked as ``--set`` would
    check it; BadInput (one line) when the content is not a config, or names a section or key this version's configs
    do not have (a run store of another privbench version)."""
    if not isinstance(d, dict) or not all(isinstance(d.get(k), str) for k in ("method", "dataset")):
        raise BadInput("not a privbench config (method and dataset names missing)")
    secs = settings.sections()
    unknown = [k for k in d if k not in settings.TOP_LEVEL and k not in secs]
    unknown += [f"{s}.{k}" for s in secs if isinstance(d.get(s), dict) for k in d[s]
                if k not in {f.name for f in fields(secs[s])}]
    if unknown:
        raise BadInput(f"unknown config key(s) {', '.join(unknown)}: not a config of privbench {__version__} "
                       f"(a run store of another version is not read; retrain it with this one)")
    preset = d.get("preset", "tiny")
    cfg = Config(method=d["method"], dataset=d["dataset"], preset=preset if isinstance(preset, str) else "tiny",
                 seed=check_seed(d.get("seed")))
    for sec in cfg.section_names():
        body = d.get(sec, {}) or {}
        if not isinstance(body, dict):
            raise BadInput(f"section {sec!r} is not a mapping")
        cls = secs[sec]
        hints = typing.get_type_hints(cls)
        known = {f.name: f for f in fields(cls)}
        obj = getattr(cfg, sec)
        for k, v in body.items():
            setattr(obj, k, settings.parse_value(f"{sec}.{k}", v, hints[k], dict(known[k].metadata)))
    check_config(cfg)
    return cfg
