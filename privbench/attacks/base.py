"""The one attack interface: an attack gets a :class:`~privbench.models.target.Target` (what the attacker may
query) and :class:`Records` (the records under test) and returns an :class:`AttackOutput`.

Scores, timesteps and labels follow docs/attacks.md §0 (higher score = member; 0-indexed model timesteps).
Every attack batches its queries (``attack.batch_size`` records per forward) on ``target.device`` and moves
per-batch results to the host once.
"""
from __future__ import annotations

import fnmatch
import functools
import math
import typing
from dataclasses import MISSING, dataclass, field
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any, ClassVar, Iterator

import numpy as np
import torch

from ..core.errors import BadInput
from ..core.registry import ATTACKS
from ..core.settings import parse_value, register_section, setting
from ..models.target import TargetCapabilities


@dataclass
class Records:
    """Records under test, aligned: ``x`` (N×C×H×W in [−1, 1]), ``y`` (class labels), ``labels`` (1 = member,
    0 = non-member) and ``index`` (position in the dataset's fixed order)."""
    x: torch.Tensor
    y: torch.Tensor
    labels: torch.Tensor
    index: torch.Tensor

    def __post_init__(self):
        n = self.x.shape[0]
        for name in ("y", "labels", "index"):
            v = getattr(self, name)
            if v.shape[0] != n:
                raise ValueError(f"Records.{name} has {v.shape[0]} entries for {n} images")

    def __len__(self) -> int:
        return int(self.x.shape[0])

    @property
    def n_members(self) -> int:
        return int((self.labels == 1).sum())

    @property
    def n_nonmembers(self) -> int:
        return int((self.labels == 0).sum())

    def subset(self, mask_or_idx) -> "Records":
        return Records(self.x[mask_or_idx], self.y[mask_or_idx], self.labels[mask_or_idx], self.index[mask_or_idx])

    def batches(self, batch_size: int, device) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """(batch number, x on device, y on device) in record order."""
        for b, lo in enumerate(range(0, len(self), batch_size)):
            hi = min(len(self), lo + batch_size)
            yield b, self.x[lo:hi].to(device, non_blocking=True), self.y[lo:hi].to(device, non_blocking=True)


@dataclass
class AttackEnv:
    """What else the run hands the attack: the full config, the Method (training data, uploads' config),
    an output folder for figures, and the seed of every random draw the attack makes."""
    cfg: Any = None
    method: Any = None
    out_dir: Path | None = None
    seed: int = 0
    train_data: tuple[torch.Tensor, torch.Tensor] | None = None  # overrides method.training_data()
    train_index: list[int] | None = None  # dataset indices of train_data's rows, when known
    #: reference models (a :class:`privbench.attacks.references.ReferenceModels`) for attacks that use them
    references: Any = None

    def training_data(self, records: Records | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The target's training records: explicit > ``method.training_data()`` > the members of ``records``."""
        if self.train_data is not None:
            return self.train_data
        if self.method is not None:
            return self.method.training_data()
        if records is not None:
            m = records.labels == 1
            return records.x[m], records.y[m]
        raise BadInput("this attack needs the target's training data (no method or records given)")


@dataclass
class AttackOutput:
    """What an attack returns.

    * ``scores``: membership attacks, one float per record (higher = member), fixed-setting result.
    * ``sweep``: extra settings (e.g. timesteps) → scores; reported separately as an ORACLE choice.
    * ``metrics``: non-membership attacks put their own figures here (docs/cli.md §5).
    * ``figures``: further attack-specific numbers (JSON-able), e.g. NFEs, the offset mode that ran.
    * ``arrays``: extra aligned arrays written to ``scores.npz``.
    * ``images``: name → (images N×C×H×W in [−1, 1], labels or None, nrow or None) written as PNG grids.
    """
    scores: np.ndarray | None = None
    sweep: dict[int, np.ndarray] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    images: dict[str, tuple] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    nfe_per_record: float | None = None


#: the kinds of attack (the ``kind`` of a result): membership tests score records; the others report their own figures
MEMBERSHIP, MEMORIZATION, RECONSTRUCTION = "membership", "memorization", "reconstruction"
#: verified per-record extraction (the extract attack): its own kind, so it never takes memorization's report column
EXTRACTION = "extraction"


@dataclass(kw_only=True, eq=False)
class Attack:
    """Base class. A subclass is one file in privbench/attacks/ that registers itself
    (``@ATTACKS.register_class``). Its settings are its dataclass fields, declared with
    :func:`~privbench.core.config.setting` in the class body (as scikit-learn's estimators: the settings are the
    constructor's keyword arguments, ``PIA(t=100, p=2)``; :meth:`from_config` reads them from ``cfg.attack``).
    Every subclass is made a dataclass when it is defined, and a class that sets ``name`` adds its fields to the
    ``attack.*`` config keys (``settings_presets`` gives per-preset values); all of them (``bootstrap`` included)
    enter its cache hash. It declares:

    * ``name``, ``description``, ``kind`` (membership | memorization | reconstruction), ``report_order``;
    * ``extra_config_keys``: other config keys (``section.key``) that change its result;
    * ``applies_to``: the target kinds it can attack (None = every target);
    * ``threat_model``: what it queries, reference models, auxiliary data, queries per record and its source (the
      tables of docs/attacks.md §6 and docs/attacks-threat-models.md are generated from it);
    * ``text_conditioning``: whether it runs on text-to-image (latent) targets; ``requires_text``,
      ``requires_white_box``: what it needs of one (:meth:`refusal` reads a target's
      :class:`~privbench.models.target.TargetCapabilities`).
    """
    name: ClassVar[str] = "?"
    description: ClassVar[str] = ""
    kind: ClassVar[str] = MEMBERSHIP
    report_order: ClassVar[int] = 100
    settings_presets: ClassVar[dict] = {}
    extra_config_keys: ClassVar[tuple[str, ...]] = ()
    applies_to: ClassVar[tuple[str, ...] | None] = None
    threat_model: ClassVar[dict] = {}
    #: True: the runner trains (or loads) reference models and hands them over as ``env.references``
    needs_references: ClassVar[bool] = False
    #: True: runs on text-to-image targets (records' ``y`` is a caption row, passed through ``cond``; latents as
    #: ``x``); shown by ``privbench list attacks``
    text_conditioning: ClassVar[bool] = True
    #: True: needs a text-conditional target (captions to work with)
    requires_text: ClassVar[bool] = False
    #: True: needs gradients of one network (a target whose ``predict_noise`` composes several is refused)
    requires_white_box: ClassVar[bool] = False
    #: settings with ``choices`` that name a variant of the attack: a value other than the default is part of the
    #: attack's label (``lira@online``, ``secmi@paper``), so variants sit side by side in tables and suites can
    #: ask for them by that label
    variant_settings: ClassVar[tuple[str, ...]] = ()

    batch_size: int = setting(256, lo=1, help="records per batched model query of every attack")
    bootstrap: int = setting(1000, lo=0, hi=100_000, help="bootstrap resamples for CIs")
    precision: str = setting("fp32", choices=("fp32", "bf16"), hashed_at_default=False,
                             help="bf16: the target's forward passes under bfloat16 autocast (scores in fp32; "
                                  "GPU speed-up, see docs/scaling.md)")

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        dataclass(kw_only=True, eq=False)(cls)
        if "name" in cls.__dict__:
            register_section("attack", cls, presets=cls.settings_presets, training=False)
        if "run" in cls.__dict__:  # every attack's queries run at its attack.precision
            cls.run = _at_precision(cls.__dict__["run"])

    @classmethod
    def from_config(cls, acfg, **overrides) -> Attack:
        """The attack with the config's ``attack.*`` values (``acfg``: ``cfg.attack``), ``overrides`` on top."""
        return cls(**{**{n: getattr(acfg, n) for n in cls.setting_names()}, **overrides})

    @classmethod
    def setting_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclass_fields(cls))

    @property
    def settings(self) -> dict[str, Any]:
        """Every setting's value, by name (what enters :meth:`describe` and the cache hash)."""
        return {n: getattr(self, n) for n in self.setting_names()}

    # ------------------------------------------------------------------ contract
    def validate(self, num_timesteps: int, cfg=None) -> None:
        """Raise BadInput for settings that cannot run (called before anything is trained or written): each
        setting's declared range and choices (:func:`~privbench.core.config.setting`), then what a subclass checks
        against a schedule of ``num_timesteps`` steps."""
        del num_timesteps, cfg  # the hook's arguments, for subclasses' checks
        hints = typing.get_type_hints(type(self))
        for f in dataclass_fields(self):
            parse_value(f"attack.{f.name}", getattr(self, f.name), hints[f.name], f.metadata)

    def population_size(self) -> int:
        """Population records (outside the split and the reference pool, in no training set) the runner hands
        over as ``env.references.population``; none unless an attack asks."""
        return 0

    @classmethod
    def refusal(cls, caps: TargetCapabilities) -> str | None:
        """Why the attack cannot run on a target with capabilities ``caps``, in one clause (None: it can)."""
        if caps.text_conditioned and not cls.text_conditioning:
            return "does not support text-conditional targets (privbench list attacks shows which do)"
        if cls.requires_text and not caps.text_conditioned:
            return "needs a text-to-image model (a Stable-Diffusion-layout pipeline); this model takes no captions"
        if cls.requires_white_box and not caps.white_box:
            return "needs white-box access to one network; this target composes several (its predictions are " \
                   "not one model's)"
        return None

    def applies(self, target: str) -> bool:
        """Whether the attack can attack ``target`` (``applies_to``: fnmatch patterns such as ``client:*``)."""
        return self.applies_to is None or any(fnmatch.fnmatchcase(target, p) for p in self.applies_to)

    def run(self, target, records: Records, env: AttackEnv | None = None) -> AttackOutput:
        raise NotImplementedError

    @property
    def label(self) -> str:
        """``name``, then ``@value`` for each variant setting that differs from its default."""
        defaults = {f.name: _default(f) for f in dataclass_fields(self)}
        return self.name + "".join(f"@{getattr(self, k)}" for k in self.variant_settings
                                   if getattr(self, k) != defaults[k])

    @classmethod
    def variant_choices(cls) -> dict[str, tuple]:
        """variant setting -> its choices."""
        meta = {f.name: f.metadata.get("choices") for f in dataclass_fields(cls)}
        return {k: tuple(meta.get(k) or ()) for k in cls.variant_settings}

    @classmethod
    def variant_overrides(cls, values: list[str]) -> dict:
        """The settings named by the ``@value`` parts of a label (``lira@online`` -> reference_pool=online)."""
        out: dict = {}
        choices = cls.variant_choices()
        for v in values:
            keys = [k for k, ch in choices.items() if v in ch]
            if len(keys) == 1 and keys[0] in out:
                raise BadInput(f"attack variant {cls.name}@{out[keys[0]]}@{v}: both set {keys[0]}; name one of them")
            if len(keys) != 1:
                named = "; ".join(f"{k}: {', '.join(map(str, ch))}" for k, ch in choices.items()) or "none"
                raise BadInput(f"attack variant {cls.name}@{v}: not a variant of {cls.name} (its variants, "
                               f"by setting: {named})")
            out[keys[0]] = v
        return out

    def hash_dict(self, cfg=None) -> dict:
        # a setting added later whose default reproduces earlier results enters the hash only off its default
        d = {"attack": self.name, "version": ATTACK_CODE_VERSION,
             "settings": {f.name: getattr(self, f.name) for f in dataclass_fields(self)
                          if f.metadata.get("hashed_at_default", True) or getattr(self, f.name) != _default(f)}}
        if cfg is not None:
            for key in self.extra_config_keys:
                sec, name = key.split(".")
                d[key] = getattr(getattr(cfg, sec), name)
        return d

    def describe(self) -> dict:
        return self.settings

    def threat(self) -> dict | None:
        """The declared threat model with this instance's settings filled in (reference-model count)."""
        if self.threat_model is None:
            return None
        d = dict(self.threat_model)
        if "n_reference" in self.setting_names():
            d["reference_models"] = int(self.n_reference)
            d["reference_pool"] = self.reference_pool
        return d


register_section("attack", Attack, training=False, presets={"test": {"bootstrap": 50}})


def _default(f):
    return f.default_factory() if f.default is MISSING else f.default


class TimestepAttack(Attack):
    """Attacks that query at one model timestep ``t`` and can sweep it (loss, PIA, PIAN)."""
    t: int = setting(200, lo=0, help="model timestep (0-indexed) of loss/PIA/PIAN")
    sweep: list = setting([], help="timesteps to sweep (loss/pia/pian: t; secmi: t_sec), reported apart as an "
                                   "oracle choice")

    def validate(self, num_timesteps: int, cfg=None) -> None:
        super().validate(num_timesteps, cfg)
        self.timesteps(num_timesteps)

    def timesteps(self, num_timesteps: int) -> tuple[int, list[int], list[int]]:
        """(the fixed t, the sweep's timesteps in the given order, every distinct one queried: the fixed first)."""
        return timestep_plan(self.t, self.sweep, num_timesteps, "attack.t")


def _at_precision(run):
    """``run`` with the target queried at the attack's ``precision`` (:meth:`Target.query_precision`)."""
    @functools.wraps(run)
    def wrapper(self, target, records, env=None):
        precision = self.precision
        if precision == "fp32" or not hasattr(target, "query_precision"):
            return run(self, target, records, env)
        with target.query_precision(precision):
            return run(self, target, records, env)
    return wrapper


#: bump when an attack's numbers change for the same config (invalidates cached attack results)
ATTACK_CODE_VERSION = 2


# ---------------------------------------------------------------------- helpers

def split_label(label: str) -> tuple[str, list[str]]:
    """``lira@online`` -> (``lira``, [``online``]); a plain name -> (name, [])."""
    name, *values = str(label).split("@")
    return name, values


def check_timestep(t, num_timesteps: int, what: str) -> int:
    """A 0-indexed model timestep in [0, T), else BadInput naming ``what``."""
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
        if isinstance(t, float) and float(t).is_integer():
            t = int(t)
        else:
            raise BadInput(f"{what}={t!r}: must be an integer model timestep in [0, {num_timesteps}) (0-indexed)")
    t = int(t)
    if t < 0 or t >= num_timesteps:
        raise BadInput(f"{what}={t}: must be a model timestep in [0, {num_timesteps}) (0-indexed)")
    return t


def sweep_list(sweep, num_timesteps: int, what: str = "attack.sweep") -> list[int]:
    if not isinstance(sweep, (list, tuple)):
        raise BadInput(f"{what}={sweep!r}: expected a list of timesteps, e.g. [50,100,200]")
    out = []
    for v in sweep:
        t = check_timestep(v, num_timesteps, what)
        if t not in out:
            out.append(t)
    return out


def timestep_plan(fixed, sweep, num_timesteps: int, what: str) -> tuple[int, list[int], list[int]]:
    """(``fixed`` checked as ``what``, the sweep's timesteps, every distinct timestep to query: ``fixed`` first)."""
    t = check_timestep(fixed, num_timesteps, what)
    swept = sweep_list(sweep, num_timesteps)
    return t, swept, [t] + [s for s in swept if s != t]


def swept_output(chunks: dict[int, list[torch.Tensor]], fixed: int, sweep: list[int], nfe: float) -> AttackOutput:
    """The output of a swept attack: per-timestep per-batch results (on the device) → the fixed timestep's scores
    and the sweep's, moved to the host once."""
    scores = {t: to_numpy(v) for t, v in chunks.items()}
    return AttackOutput(scores=scores[fixed], sweep={t: scores[t] for t in sweep}, nfe_per_record=nfe)


def cond(target, y: torch.Tensor) -> torch.Tensor | None:
    """The condition to pass: the record's label for class-conditional targets, else None."""
    return y if target.num_classes else None


def tvec(t: int, n: int, device) -> torch.Tensor:
    return torch.full((n,), int(t), dtype=torch.long, device=device)


def to_numpy(chunks: list[torch.Tensor]) -> np.ndarray:
    """Concatenate per-batch results kept on the device and move them to the host once."""
    return torch.cat(chunks).detach().to("cpu", torch.float64).numpy()


def sqrt2_over_pi() -> float:
    """E|Z| for Z ~ N(0, 1): √(2/π) ≈ 0.7979 — PIAN's target mean absolute value (official PIA code)."""
    return math.sqrt(2.0 / math.pi)


ATTACKS.require_base(Attack)  # a class that is not an Attack is refused when it registers
