"""Typed configs, presets (test/tiny/small/paper), ``--set`` overrides and the config hash.

A config is a few top-level fields (method, dataset, preset, seed) and named **sections** of typed settings.
The sections every method reads (data, model, diffusion, train, sample, dp) are declared here; a method or an
attack declares its own settings in its own file with :func:`register_section` (several files may contribute
fields to one section, e.g. an attack setting two attacks share). Every field can
be overridden with ``--set section.key=value``; values are parsed and type-checked against the field's declared
type and range, and an unknown key is an error (exit 2).

A field's metadata may say ``training=False`` (it changes what is sampled or attacked, never what is trained: it
stays out of the config hash that names the run); a whole section may be registered with ``training=False``.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .constants import DEFAULT_DELTA
from .errors import BadInput
from .registry import ACCOUNTANTS, DATASETS, METHODS, PRESETS, load_builtins
from .version import __version__
from .yamlio import load_yaml, read_yaml

#: seeds are non-negative integers below 2**32 (torch, numpy and every seeded stream accept them)
MAX_SEED = 2 ** 32 - 1
#: upper bounds of sizes: far above every preset (paper: 800k steps, batch 128, 1000 timesteps), low enough that
#: a typo is refused (exit 2) instead of exhausting memory in an allocation
MAX_BATCH = 65_536
MAX_TIMESTEPS = 100_000
MAX_CHANNELS = 4096
MAX_PARAMETERS = 1_000_000_000


def setting(default, *, lo=None, hi=None, lo_open=False, hi_open=False, choices=None, help="", training=True,
            item=None, item_lo=None, item_hi=None, min_len=None, max_len=None, hashed_at_default=True):
    """A dataclass field with range/choice metadata used by ``--set`` validation (``training=False``: the field
    never changes what is trained, so it stays out of the run's config hash). For a list: ``item`` (the type of
    every element), ``item_lo``/``item_hi`` (their inclusive range) and ``min_len``/``max_len``.
    ``hashed_at_default=False``: a training field whose default is what a config that never sets it trains enters
    the config hash only when set off its default (a config that never sets it is hashed without it)."""
    meta = dict(lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, choices=choices, help=help, training=training,
                item=item, item_lo=item_lo, item_hi=item_hi, min_len=min_len, max_len=max_len,
                hashed_at_default=hashed_at_default)
    if isinstance(default, (list, dict, tuple)):
        return field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta)
    return field(default=default, metadata=meta)


def setting_choices(meta) -> list:
    """The allowed values of a setting: its ``choices`` list, or what its ``choices`` callable returns now (a
    registry's names: plug-ins registered later count)."""
    c = meta.get("choices")
    return list(c() if callable(c) else c or [])


def _dpsgd_accountant_names() -> list[str]:
    return [e.name for e in ACCOUNTANTS if getattr(e.factory, "kind", None) == "dpsgd"]


@dataclass
class DataConfig:
    n_members: int = setting(256, lo=2, hi=100_000_000, help="records in the member split (the training data)")
    n_nonmembers: int = setting(256, lo=2, hi=100_000_000, help="records in the held-out non-member split")
    resolution: int = setting(0, lo=0, hi=1024, help="image side after padding/resizing; 0 = the dataset's native size")
    public: str = setting("none", hashed_at_default=False,
                          help="the public split: none (no public records unless a consumer asks for them), pool "
                               "(data.n_public records of the same distribution, disjoint from every other split) or "
                               "classes:A-B (the records of classes A..B; members and non-members from the others)")
    n_public: int = setting(0, lo=0, hi=100_000_000, hashed_at_default=False,
                            help="records in the public split; 0 = as many as data.n_members (pool) or every record "
                                 "of the public classes (classes:A-B)")
    n_test: int = setting(0, lo=0, hi=100_000_000, hashed_at_default=False,
                          help="records of the utility test split (downstream accuracy; read once, by no model and "
                               "no selection step); 0 = none")
    data_root: str = setting("", training=False, help="folder with torchvision-format datasets (mnist, cifar10, celeba)")
    download: bool = setting(False, training=False, help="allow torchvision to download the dataset into data_root")


@dataclass
class ModelConfig:
    block_out_channels: list = setting([16, 32], item=int, item_lo=1, item_hi=MAX_CHANNELS, min_len=1, max_len=8,
                                       help="channels per UNet level (diffusers UNet2DModel)")
    layers_per_block: int = setting(1, lo=1, hi=16)
    attention_levels: list = setting([], item=int, item_lo=0, item_hi=7, max_len=8,
                                     help="indices of UNet levels with self-attention")
    dropout: float = setting(0.0, lo=0.0, hi=1.0, hi_open=True)
    norm_num_groups: int = setting(8, lo=1, hi=MAX_CHANNELS, help="GroupNorm groups; must divide every level's channels")
    class_conditional: bool = setting(True)


@dataclass
class DiffusionConfig:
    num_timesteps: int = setting(1000, lo=2, hi=MAX_TIMESTEPS)
    beta_start: float = setting(1e-4, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    beta_end: float = setting(0.02, lo=0.0, hi=1.0, lo_open=True, hi_open=True,
                              help="> beta_start (linear and scaled_linear schedules)")
    beta_schedule: str = setting("linear", choices=["linear", "scaled_linear", "squaredcos_cap_v2"])
    variance_type: str = setting("fixed_small", choices=["fixed_small", "fixed_large"])


@dataclass
class TrainConfig:
    steps: int = setting(4000, lo=1, help="optimizer steps")
    batch_size: int = setting(64, lo=1, hi=MAX_BATCH)
    lr: float = setting(2e-3, lo=0.0, lo_open=True)
    weight_decay: float = setting(0.0, lo=0.0)
    warmup: int = setting(100, lo=0, help="linear LR warm-up steps")
    grad_clip: float = setting(1.0, lo=0.0, help="global grad-norm clip (0 = off)")
    ema_decay: float = setting(0.999, lo=0.0, hi=1.0, hi_open=True)
    # a fine-tune or a DP-SGD run is short (hundreds of steps): at decay 0.999 its released EMA would still be
    # mostly the network it started from. The methods that cap their EMA (models/loop.ema_capped) name this key in
    # their config_keys, so it is in their hash at every value; for the others only when set off the default
    ema_start_weight: float = setting(0.01, lo=0.0, hi=1.0, lo_open=True, hashed_at_default=False,
                                      help="largest weight the released EMA keeps on the network a capped run "
                                           "starts from (DP-SGD runs, fine-tunes, federated clients): decay <= "
                                           "w^(1/steps); 1 = no cap")
    checkpoint_every: int = setting(1000, lo=1)
    log_every: int = setting(100, lo=1)
    # precision changes the numbers, so it enters the config hash when set off its default; channels_last and
    # compile change how the steps run, not what they compute: never in the hash
    precision: str = setting("fp32", choices=["fp32", "bf16"], hashed_at_default=False,
                             help="bf16: autocast of the model's forward/backward (weights, Adam, EMA stay fp32)")
    init: str = setting("scratch", choices=["scratch", "public"], hashed_at_default=False,
                        help="public: every trained network starts from a non-private pre-training on the run's "
                             "public split (data.public), cached and shared (models/public_init.py)")
    public_steps: int = setting(0, lo=0, hashed_at_default=False,
                                help="steps of the public pre-training (train.init=public); 0 = train.steps")
    public_seed: int = setting(0, lo=0, hi=MAX_SEED, hashed_at_default=False,
                               help="seed of the public pre-training (its init and batches; never the run's seed, "
                                    "so seeds and epsilons with one public split share it)")
    channels_last: bool = setting(False, training=False,
                                  help="NHWC memory format for the convolutions (GPU tensor cores); same math")
    compile: bool = setting(False, training=False,
                            help="torch.compile the denoiser of the plain loop (slow start; pays off on GPU)")


@dataclass
class SampleConfig:
    sampler: str = setting("ddpm", choices=["ddpm", "ddim"])
    ddim_steps: int = setting(100, lo=1, hi=MAX_TIMESTEPS, help="<= diffusion.num_timesteps")
    batch_size: int = setting(500, lo=1, hi=MAX_BATCH)


@dataclass
class MetricsConfig:
    tpr_rule: str = setting("le", choices=["le", "lt"], training=False,
                            help="TPR@x: le = the largest TPR with FPR <= x (default); lt = with FPR < x, as "
                                 "Carlini et al.'s LiRA code (mi_lira_2021/plot.py)")


@dataclass
class DPConfig:
    epsilon: float = setting(10.0, lo=0.0, lo_open=True)
    delta: float = setting(DEFAULT_DELTA, lo=0.0, hi=1.0, lo_open=True, hi_open=True, help="capped at 1/N when larger")
    max_grad_norm: float = setting(1.0, lo=0.0, lo_open=True)
    noise_multiplier: float = setting(0.0, lo=0.0, help="0 = calibrate to dp.epsilon; >0 = use it as given")
    noise_multiplicity: int = setting(4, lo=1, hi=1024, help="K noise draws averaged per record before clipping")
    # the registered DP-SGD accountants, plug-ins included (privbench list accountants)
    accountant: str = setting("prv", choices=lambda: _dpsgd_accountant_names())
    sample_rate: float = setting(0.0, lo=0.0, hi=1.0, help="Poisson rate q; 0 = batch_size / N")
    grad_sample: str = setting("ghost", choices=["ghost", "hooks", "vmap"],
                               help="per-record gradient backend (models/grad_sample/, models/grad_sample/ghost.py); all exact")
    physical_batch: int = setting(0, lo=0, hi=MAX_BATCH,
                                  help="records per per-sample-gradient pass (memory); 0 = the whole batch")
    trainable: str = setting("all", choices=["all", "lora", "attention"], hashed_at_default=False,
                             help="what DP-SGD updates: all parameters, LoRA adapters (peft) on the UNet's attention "
                                  "and conv layers, or the attention layers (DP-LDM); the label embedding is always "
                                  "trained (models/trainable.py)")
    lora_rank: int = setting(4, lo=1, hi=1024, hashed_at_default=False, help="rank of the LoRA adapters")
    noise_source: str = setting("seeded", choices=["seeded", "secure"],
                                help="privacy randomness: seeded = from the run's seed (reproducible benchmark noise, "
                                     "not a deployable release); secure = OS entropy, never stored")




# ---------------------------------------------------------------- sections

@dataclass
class _Section:
    name: str
    parts: list            # dataclasses contributing fields, in registration order
    presets: dict          # preset name -> {field: value}
    training: bool
    cls: type | None = None  # the combined dataclass (rebuilt when a part is added)
    hashed_under: str | None = None  # the section whose mapping holds this one's fields in the config hash


_SECTIONS: dict[str, _Section] = {}


def register_section(name: str, part: type, *, presets: dict[str, dict] | None = None, training: bool = True,
                     hashed_under: str | None = None) -> type:
    """Add the fields of dataclass ``part`` to config section ``name`` (created on first use).

    ``presets`` maps a preset name to the values of ``part``'s fields under that preset. A field declared by
    several parts (e.g. an attack setting shared by two attacks) must have the same type and default in each.
    ``training=False``: nothing in this section changes what is trained (attack and sampling settings).
    ``hashed_under``: the config hash holds this section's fields inside that section's mapping (the hash names
    the run directory; :meth:`Config.training_dict`)."""
    sec = _SECTIONS.get(name)
    if sec is None:
        sec = _SECTIONS[name] = _Section(name, [], {}, training, hashed_under=hashed_under)
    if part in sec.parts:
        return part
    have = {f.name: f for p in sec.parts for f in fields(p)}
    hints = typing.get_type_hints(part)
    for f in fields(part):
        old = have.get(f.name)
        if old is not None:
            old_owner = next(p for p in sec.parts if f.name in {g.name for g in fields(p)})
            if typing.get_type_hints(old_owner)[f.name] is not hints[f.name] or _default(old) != _default(f):
                raise ValueError(f"config key {name}.{f.name}: declared differently by {old_owner.__qualname__} "
                                 f"and {part.__qualname__}")
    sec.parts.append(part)
    for preset, values in (presets or {}).items():
        unknown = set(values) - {f.name for f in fields(part)}
        if unknown:
            raise ValueError(f"presets of {part.__qualname__}: unknown fields {sorted(unknown)}")
        sec.presets.setdefault(preset, {}).update(values)
    sec.cls = None
    return part


def section(name: str, *, training: bool = True, presets: dict[str, dict] | None = None):
    """Class decorator form of :func:`register_section`: ``@section("pfdm", presets={...})``."""
    def deco(cls):
        return register_section(name, dataclass(cls), presets=presets, training=training)
    return deco


def _default(f):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _section_cls(name: str) -> type:
    sec = _SECTIONS[name]
    if sec.cls is None:
        seen, spec = set(), []
        for part in sec.parts:
            hints = typing.get_type_hints(part)
            for f in fields(part):
                if f.name in seen:
                    continue
                seen.add(f.name)
                fresh = (dataclasses.field(default=f.default, metadata=f.metadata)
                         if f.default_factory is dataclasses.MISSING else
                         dataclasses.field(default_factory=f.default_factory, metadata=f.metadata))
                spec.append((f.name, hints[f.name], fresh))
        sec.cls = dataclasses.make_dataclass(f"{name.capitalize()}Section", spec)
    return sec.cls


def sections() -> dict[str, type]:
    """Every registered section name → its combined dataclass (after the registries are loaded)."""
    load_builtins()
    return {n: _section_cls(n) for n in _SECTIONS}


register_section("data", DataConfig, presets={
    "test": {"n_members": 64, "n_nonmembers": 64}, "small": {"n_members": 512, "n_nonmembers": 512},
    "paper": {"resolution": 32, "n_members": 25000, "n_nonmembers": 25000}})
register_section("model", ModelConfig, presets={
    "test": {"block_out_channels": [8, 16], "norm_num_groups": 4},
    "small": {"block_out_channels": [32, 64], "layers_per_block": 2},
    # The standard DDPM CIFAR-10 victim (pytorch-ddpm): ch 128, mult (1,2,2,2), attention at 16×16 (level 1),
    # 2 res-blocks, dropout 0.1.
    "paper": {"block_out_channels": [128, 256, 256, 256], "layers_per_block": 2, "attention_levels": [1],
              "dropout": 0.1, "norm_num_groups": 32}})
register_section("diffusion", DiffusionConfig, presets={"paper": {"variance_type": "fixed_large"}})
register_section("train", TrainConfig, presets={
    "test": {"steps": 20, "batch_size": 16, "warmup": 0, "checkpoint_every": 10, "log_every": 5},
    "small": {"steps": 10000},
    "paper": {"steps": 800_000, "batch_size": 128, "lr": 2e-4, "warmup": 5000, "ema_decay": 0.9999,
              "checkpoint_every": 10_000, "log_every": 1000}})
register_section("sample", SampleConfig, training=False, presets={"test": {"ddim_steps": 10}})
register_section("metrics", MetricsConfig, training=False)
register_section("dp", DPConfig, presets={
    # DPDM's CIFAR-10 config; per-record gradients of the 35.7M-parameter UNet: 16 records per pass
    "paper": {"noise_multiplicity": 8, "physical_batch": 16}})


# ---------------------------------------------------------------- the config

TOP_LEVEL = ("method", "dataset", "preset", "seed")
BASE_SECTIONS = ("data", "model", "diffusion", "train")  # every method trains from these


class Config:
    """method, dataset, preset, seed and one object per registered section (``cfg.train.steps``)."""

    def __init__(self, method: str, dataset: str = "digits", preset: str = "tiny", seed: int = 0):
        self.method, self.dataset, self.preset, self.seed = method, dataset, preset, seed
        self._sections = {name: cls() for name, cls in sections().items()}
        self.explicit: set[str] = set()  # keys set by --set / --config (an attack refuses the ones it does not use)

    def __getattr__(self, name):
        secs = self.__dict__.get("_sections")
        if secs is not None and name in secs:
            return secs[name]
        raise AttributeError(name)

    def __reduce__(self):
        # the section classes are made at run time (not importable by name): a config travels as its values, e.g. to
        # another process (the bench's Ray tasks), and is rebuilt and checked there as a run's config.yaml is
        return _config_from_state, (self.to_dict(), sorted(self.explicit))

    def section_names(self) -> list[str]:
        return list(self._sections)

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in TOP_LEVEL}
        d.update({name: dataclasses.asdict(obj) for name, obj in self._sections.items()})
        return d

    def training_dict(self) -> dict:
        """What decides what is trained: the base sections, plus what the method declares it reads
        (``config_keys``: "section" or "section.key"), minus every ``training=False`` field. So attack or
        sampling settings never force a retrain, and e.g. a pfdm default change never re-keys a dpdm run."""
        d = self.to_dict()
        keys = _method_config_keys(self.method)
        # a key a method names explicitly is hashed at every value, its default included
        hashed = {k for k in keys or () if "." in k}
        if self.train.init != "scratch":  # a fine-tune caps its EMA (models/loop.ema_capped)
            hashed.add("train.ema_start_weight")
        for name in list(d):
            if name in TOP_LEVEL:
                continue
            if not _SECTIONS[name].training:
                d.pop(name)
                continue
            for f in fields(_section_cls(name)):
                if not f.metadata.get("training", True):
                    d[name].pop(f.name, None)
                elif (not f.metadata.get("hashed_at_default", True) and d[name].get(f.name) == _default(f)
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
    for name, sec in _SECTIONS.items():
        if sec.hashed_under and d.get(name):
            d.setdefault(sec.hashed_under, {}).update(d.pop(name))
    return d


def _method_config_keys(method: str):
    """The ``config_keys`` of a registered method class, or None (unknown method or none declared)."""
    try:
        factory = METHODS.get(method).factory
    except BadInput:  # unknown method: validated elsewhere with a clear message
        return None
    return getattr(factory, "config_keys", None)


#: the hex digits of a training hash (a run folder's name ends in them: runs.store)
HASH_DIGITS = 12


def config_hash(d: dict) -> str:
    blob = json.dumps(d, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:HASH_DIGITS]


# ---------------------------------------------------------------- presets

#: the dataset a preset trains when the user names none (``--dataset`` not given)
PRESET_DATASETS = {"test": "digits", "tiny": "digits", "small": "colored-digits", "paper": "cifar10"}


def _dataset_of_preset(c: Config, dataset: str | None) -> None:
    """A preset picks its dataset only when the user named none (``dataset`` None); a named one always wins."""
    c.dataset = dataset if dataset is not None else PRESET_DATASETS.get(c.preset, "digits")


PRESETS.add("test", _dataset_of_preset, "seconds; for unit tests only (results meaningless)")
PRESETS.add("tiny", _dataset_of_preset, "embedded 8×8 digits, UNet (16, 32), CPU in minutes; results meaningful")
PRESETS.add("small", _dataset_of_preset, "CPU, larger: colored digits, UNet (32, 64), more steps")
PRESETS.add("paper", _dataset_of_preset, "GPU: 32×32 datasets, the standard DDPM CIFAR-10 victim (35.7M params)")


def apply_preset(c: Config, preset: str, dataset: str | None = None) -> None:
    """The preset's values into ``c``; ``dataset``: the dataset the user named (None: the preset's own)."""
    PRESETS.create(preset, c, dataset)
    for name, sec in _SECTIONS.items():
        for k, v in sec.presets.get(preset, {}).items():
            setattr(getattr(c, name), k, copy.deepcopy(v))


# ---------------------------------------------------------------- overrides

def parse_value(key: str, raw: Any, typ: type, meta: dict) -> Any:
    """Parse ``raw`` (a string from the command line, or a YAML value) into ``typ`` and range-check it."""
    def bad(what):
        return BadInput(f"--set {key}={raw!r}: {what}")

    if isinstance(raw, str):
        text = raw.strip()
        if typ is bool:
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                val = True
            elif low in ("0", "false", "no", "off"):
                val = False
            else:
                raise bad("expected a boolean (true/false)")
        elif typ is int:
            try:
                val = int(text)
            except ValueError:
                raise bad("expected an integer") from None
        elif typ is float:
            try:
                val = float(text)
            except ValueError:
                raise bad("expected a number") from None
        elif typ is list:
            try:
                val = load_yaml(text if text.startswith("[") else f"[{text}]", f"--set {key}")
            except BadInput:
                raise bad("expected a list like [1,2] or 1,2 (no YAML anchors or aliases)") from None
            if val is None:
                val = []
        else:
            val = text
    else:
        val = raw
        if typ is float and isinstance(val, int) and not isinstance(val, bool):
            val = float(val)
        if typ is list and isinstance(val, tuple):
            val = list(val)
        if not isinstance(val, typ) or (typ is int and isinstance(val, bool)):
            raise bad(f"expected {typ.__name__}")
    if typ in (int, float):
        if val != val or val in (float("inf"), float("-inf")):
            raise bad("expected a finite number")
        lo, hi = meta.get("lo"), meta.get("hi")
        if lo is not None and (val < lo or (meta.get("lo_open") and val == lo)):
            raise bad(f"must be {'>' if meta.get('lo_open') else '>='} {lo}")
        if hi is not None and (val > hi or (meta.get("hi_open") and val == hi)):
            raise bad(f"must be {'<' if meta.get('hi_open') else '<='} {hi}")
    choices = setting_choices(meta)
    if choices and val not in choices:
        raise bad(f"choose one of {', '.join(choices)}")
    if typ is list and not isinstance(val, list):
        raise bad("expected a list")
    if typ is list:
        _check_list(val, meta, bad)
    return val


def _check_list(val: list, meta: dict, bad) -> None:
    """Length and element checks of a list setting (``item``, ``item_lo``, ``item_hi``, ``min_len``, ``max_len``)."""
    n_min, n_max = meta.get("min_len"), meta.get("max_len")
    if n_min is not None and len(val) < n_min:
        raise bad(f"expected at least {n_min} element{'s' if n_min > 1 else ''}")
    if n_max is not None and len(val) > n_max:
        raise bad(f"expected at most {n_max} elements")
    item = meta.get("item")
    if item is None:
        return
    lo, hi = meta.get("item_lo"), meta.get("item_hi")
    for v in val:
        if not isinstance(v, item) or (item is int and isinstance(v, bool)):
            raise bad(f"expected a list of {item.__name__}s, got {v!r}")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            rng = f"in [{lo}, {hi}]" if lo is not None and hi is not None else (f">= {lo}" if lo is not None else f"<= {hi}")
            raise bad(f"every element must be {rng}, got {v!r}")




def all_keys() -> list[tuple[str, type, Any, str]]:
    """(key, type, default, help) for every ``--set`` key."""
    out = []
    for sec, cls in sections().items():
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            out.append((f"{sec}.{f.name}", hints[f.name], _default(f), f.metadata.get("help", "")))
    return out


def set_key(cfg: Config, key: str, raw: Any) -> None:
    if "." not in key:
        raise BadInput(f"--set {key}: expected section.key=value, e.g. train.steps=2000")
    sec, name = key.split(".", 1)
    secs = sections()
    if sec not in secs:
        raise BadInput(f"--set {key}: unknown section {sec!r}; sections: {', '.join(secs)}")
    cls = secs[sec]
    names = {f.name: f for f in fields(cls)}
    if name not in names:
        raise BadInput(f"--set {key}: unknown key; {sec} has: {', '.join(names)}")
    val = parse_value(key, raw, typing.get_type_hints(cls)[name], dict(names[name].metadata))
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


def check_seed(v: Any, what: str = "seed") -> int:
    """A seed: an integer in [0, MAX_SEED] (a YAML 1.9 or true is refused, never truncated); text is parsed."""
    if isinstance(v, str):
        try:
            v = int(v.strip())
        except ValueError:
            raise BadInput(f"{what}={v!r}: expected an integer in [0, {MAX_SEED}]") from None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_SEED:
        raise BadInput(f"{what}={v!r}: expected an integer in [0, {MAX_SEED}]")
    return v


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
                 overrides: list[tuple[str, Any]] | None = None, config_file: str | None = None) -> Config:
    """Resolve a config: defaults → preset → YAML file → ``--set`` overrides (later wins).

    ``dataset``: the dataset the user named (``--dataset``); None lets the preset pick (:data:`PRESET_DATASETS`).
    A named dataset is never replaced: a config file or ``--set`` naming another one is BadInput."""
    METHODS.get(method)
    PRESETS.get(preset)
    seed = check_seed(seed, "--seed")
    if dataset is not None and not isinstance(dataset, str):
        raise BadInput(f"--dataset {dataset!r}: expected a name")
    cfg = Config(method=method, dataset=dataset or "digits", preset=preset, seed=seed)
    apply_preset(cfg, preset, dataset)
    items = load_yaml_overrides(config_file) if config_file else []
    items += list(overrides or [])
    for k, v in items:
        if k in TOP_LEVEL:
            if k == "seed":
                cfg.seed = check_seed(v)
            elif k == "preset":
                # the preset's values were applied from --preset; a different name here would only mislabel them
                try:
                    PRESETS.get(str(v))
                except BadInput as e:
                    raise BadInput(f"preset: {v!r} (config file): {e}") from None
                if str(v) != preset:
                    raise BadInput(f"preset: {v!r} differs from --preset {preset}: a config file cannot change the "
                                   f"preset (its values come from --preset); give --preset {v} or drop 'preset:'")
            elif not isinstance(v, str):
                raise BadInput(f"{k}: {v!r}: expected a name")
            elif k == "dataset" and dataset is not None and v != dataset:
                raise BadInput(f"dataset: {v!r} differs from --dataset {dataset}: two datasets named; give one")
            else:
                setattr(cfg, k, v)
            continue
        set_key(cfg, k, v)
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
    secs = sections()
    unknown = [k for k in d if k not in TOP_LEVEL and k not in secs]
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
            setattr(obj, k, parse_value(f"{sec}.{k}", v, hints[k], dict(known[k].metadata)))
    check_config(cfg)
    return cfg
