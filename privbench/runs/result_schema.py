"""Typed, versioned schema of ``result.json`` (docs/cli.md §5): what crosses from the runs (the writers:
:func:`privbench.runs.attack.write_result`, for a method's target and an outside model alike) to the reports (the
readers: :mod:`privbench.reports.collect`) through a file.

* :class:`AttackResult` — the file: one attack on one target. Every key it may hold is a declared field; a writer
  cannot write another one, and a reader refuses one in a file of the current version.
* :class:`PrivacyClaim` — its ``privacy`` object: the formal ε, or a conditional or claimed one, with δ, basis,
  accountant, neighbouring relation and noise source (kinds: :mod:`privbench.privacy.claims`).
* :class:`Timing` — its ``timing`` object.
* :class:`ThreatModel` — its ``threat_model`` object: the attack's declared threat model (``Attack.threat_model``)
  with this run's reference-model settings filled in.
* :class:`Provenance` — an external run's ``provenance`` object (also its ``provenance.json``): the model and the
  records that were attacked.

``schema_version`` (:data:`privbench.core.version.STORE_VERSION`) is written into every result.
:meth:`AttackResult.from_json` reads that version only: a file of another version, or without one, is refused in
one line rather than misread (a later release's migrations go to ``core.version.MIGRATIONS``).

This module lives in ``runs`` (not ``core``) because both sides may import it there (reports sit above runs) and
a claim's kind comes from :mod:`privbench.privacy.claims`, which ``core`` may not import.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cache
from types import UnionType
from typing import Any, get_args, get_type_hints

from ..core.constants import MEMBERSHIP
from ..core.errors import BadInput
from ..core.version import STORE_VERSION, upgraded


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _declared(cls) -> tuple[str, ...]:
    """A schema class's JSON keys: its fields but the bookkeeping ones."""
    return tuple(f.name for f in fields(cls) if f.name not in ("details", "key_order"))


def _ordered_json(obj, always: tuple[str, ...], details: dict | None = None) -> dict:
    """A nested object's JSON in the order its producer wrote the keys (``key_order``; a report's columns follow
    it, e.g. accountant.csv), then any key set since; keys never written stay absent rather than becoming null."""
    declared = _declared(type(obj))
    details = details or {}
    keys = list(obj.key_order or always)
    keys += [k for k in declared if k not in keys and getattr(obj, k) is not None]
    keys += [k for k in details if k not in keys]
    return {k: (getattr(obj, k) if k in declared else details[k]) for k in keys if k in declared or k in details}


@dataclass
class PrivacyClaim:
    """A result's ``privacy`` object (docs/cli.md §5, "``privacy`` objects"): the JSON keys are the field names."""
    epsilon: float | None = None                 # the formal ε only; null for a conditional or claimed one
    delta: float | None = None
    basis: str | None = None                     # ends with the noise source
    accountant: str | None = None
    neighbouring_relation: str | None = None
    noise_source: str | None = None
    noise_label: str | None = None               # seeded noise: not a deployable release
    epsilon_paper_bound: float | None = None     # pfdm: the paper's Theorem 5.1 bound
    noise_multiplier: float | None = None        # DP-SGD (dpdm, dpsad, dp-txt2img)
    sample_rate: float | None = None
    steps: int | None = None
    max_grad_norm: float | None = None
    epsilon_budget: float | None = None
    noise_calibrated: bool | None = None
    fallback: Any = None                         # only when an accountant fell back
    trained: dict | None = None                  # what DP-SGD trained (stored with the accounting)
    init: dict | None = None                     # what the training started from
    conditional_epsilon: float | None = None     # dpsad teacher_data=members: holds only under its assumptions
    conditional_on: list | None = None
    conditional_basis: str | None = None
    end_to_end: bool | None = None
    teacher_data: str | None = None
    n_public: int | None = None
    public_split: dict | None = None             # public-only: the public records it was trained on
    claimed_epsilon: float | None = None         # claimed by the paper or the user, not a guarantee
    claim_kind: str | None = None
    claimed_by_paper: bool | None = None
    claim_basis: str | None = None
    #: a registered method's own keys that the schema does not declare (Method.privacy is a plugin interface)
    details: dict = field(default_factory=dict)
    #: the keys in the order the method wrote them (bookkeeping, not a key of the object)
    key_order: tuple = field(default=(), repr=False, compare=False)

    _ALWAYS = ("epsilon", "delta", "basis")
    _NUMBERS = ("epsilon", "delta", "conditional_epsilon", "claimed_epsilon")

    @classmethod
    def from_json(cls, d: dict) -> PrivacyClaim:
        if not isinstance(d, dict):
            raise BadInput(f"privacy: expected an object or null, got {type(d).__name__}")
        for k in cls._NUMBERS:
            if d.get(k) is not None and not _is_number(d[k]):
                raise BadInput(f"privacy.{k}: expected a number or null, got {d[k]!r}")
        names = _declared(cls)
        return cls(**{k: v for k, v in d.items() if k in names},
                   details={k: v for k, v in d.items() if k not in names}, key_order=tuple(d))

    def to_json(self) -> dict:
        return _ordered_json(self, self._ALWAYS, self.details)

    @property
    def kind(self) -> str | None:
        """formal, conditional, claimed_by_paper or claimed_by_user (None: no ε at all)."""
        from ..privacy.claims import claim_of  # lazy: privacy.claims loads scipy; runs.result_schema does not

        c = claim_of(self.to_json())
        return c["kind"] if c else None


@dataclass
class Timing:
    """A result's ``timing`` object (seconds)."""
    train_s: float | None = None        # null when the run was cached
    references_s: float | None = None   # privbench-trained targets: training the reference models (null: none)
    attack_s: float | None = None
    device: str | None = None
    nfe_per_record: float | None = None  # membership attacks
    records_per_s: float | None = None
    key_order: tuple = field(default=(), repr=False, compare=False)

    _ALWAYS = ("train_s", "attack_s", "device")

    @classmethod
    def from_json(cls, d: dict) -> Timing:
        if not isinstance(d, dict):
            raise BadInput(f"timing: expected an object, got {type(d).__name__}")
        names = _declared(cls)
        unknown = [k for k in d if k not in names]
        if unknown:
            raise BadInput(f"timing: undeclared key(s) {', '.join(map(repr, unknown))} (docs/cli.md §5)")
        kept = {k: v for k, v in d.items() if k in names}
        return cls(**kept, key_order=tuple(kept))

    def to_json(self) -> dict:
        return _ordered_json(self, self._ALWAYS)


@dataclass
class ThreatModel:
    """A result's ``threat_model`` object (docs/cli.md §5, "``threat_model`` objects"; the table per attack:
    docs/attacks-threat-models.md): the JSON keys are the field names."""
    queries: str | None = None                # what the attack queries the target with
    reference_models: int | None = None       # reference (shadow) models it trains
    reference_training: str | None = None     # how they are trained
    auxiliary_data: str | None = None         # data beyond the records under test ("none": a per-record statistic)
    queries_per_record: str | int | float | None = None  # a count, or the setting that decides it
    reference_pool: str | None = None         # reference-model attacks: offline or online
    #: a registered attack's own keys that the schema does not declare (``Attack.threat_model`` is a plugin
    #: interface: a plug-in's result must not be refused for one)
    details: dict = field(default_factory=dict)
    key_order: tuple = field(default=(), repr=False, compare=False)

    # nothing is always written: an attack that declares no threat model writes {}
    _ALWAYS = ()

    @classmethod
    def from_json(cls, d: dict) -> ThreatModel:
        if not isinstance(d, dict):
            raise BadInput(f"threat_model: expected an object or null, got {type(d).__name__}")
        for k, types in json_types(cls).items():
            if k in d:
                check_type(f"threat_model.{k}", d[k], types)
        names = _declared(cls)
        return cls(**{k: v for k, v in d.items() if k in names},
                   details={k: v for k, v in d.items() if k not in names}, key_order=tuple(d))

    def to_json(self) -> dict:
        return _ordered_json(self, self._ALWAYS, self.details)


@dataclass
class Provenance:
    """An external run's ``provenance`` object (docs/cli.md §5, "``provenance`` objects"), also written alone as
    its ``provenance.json``. Only privbench's external runner writes one, so a current file's undeclared key is
    refused; ``model``, ``members``, ``nonmembers`` and ``references`` are the loaders' own objects (their keys
    depend on the model's format and the records' kind: docs/external-models.md)."""
    model: dict | None = None           # the model loader's: format, path, weights_sha256, prediction_type, scheduler…
    members: dict | None = None         # how each record set was read: spec, kind, n, range, encoding…
    nonmembers: dict | None = None
    records_sha256: str | None = None   # the records' content hash (pixels, labels, membership, indices)
    captions_sha256: str | None = None  # text-to-image models: the records' captions
    references: dict | None = None      # --reference-recipe: recipe, reference_data, n_reference, store, note
    key_order: tuple = field(default=(), repr=False, compare=False)

    _ALWAYS = ("model", "members", "nonmembers", "records_sha256")

    @classmethod
    def from_json(cls, d: dict) -> Provenance:
        if not isinstance(d, dict):
            raise BadInput(f"provenance: expected an object or null, got {type(d).__name__}")
        names = _declared(cls)
        unknown = [k for k in d if k not in names]
        if unknown:
            raise BadInput(f"provenance: undeclared key(s) {', '.join(map(repr, unknown))} (docs/cli.md §5)")
        kept = {k: v for k, v in d.items() if k in names}
        for k, v in kept.items():
            check_type(f"provenance.{k}", v, json_types(cls)[k])
        return cls(**kept, key_order=tuple(kept))

    def to_json(self) -> dict:
        return _ordered_json(self, self._ALWAYS)

    @property
    def weights_sha256(self) -> str | None:
        """The attacked weights' content hash (the model object's ``weights_sha256``); None when it has none."""
        w = (self.model or {}).get("weights_sha256")
        return w if isinstance(w, str) and w else None


#: the nested objects of a result, each with its own ``from_json`` / ``to_json``
_NESTED = (PrivacyClaim, Timing, ThreatModel, Provenance)

@dataclass(kw_only=True)
class AttackResult:
    """One attack on one target: the content of ``result.json`` (docs/cli.md §5). The fields are the schema: the
    JSON keys in the order they are written, each key's JSON type from its type hint (a schema class: an object;
    ``| None``: also null); a field with ``written`` metadata is written only when set (``"outside"``: the three
    keys of an outside model's run, all with its ``provenance``), every other one is required in a file.

    Read-only mapping access (``res["metrics"]``, ``res.get("privacy")``) gives the JSON values."""
    schema_version: int = STORE_VERSION
    method: str
    target: str
    attack: str
    label: str = ""                             # attack name + @variant (lira@online); default: the attack
    dataset: str
    preset: str
    seed: int
    run_dir: str | None
    n_members: int | None
    n_nonmembers: int | None
    metrics: dict
    privacy: PrivacyClaim | None
    scores_path: str | None
    kind: str = MEMBERSHIP
    threat_model: ThreatModel | None = None     # the attack's declared threat model (docs/attacks-threat-models.md)
    attack_config: dict = field(default_factory=dict)
    attack_hash: str | None = None
    calibrated: dict | None = None
    sweep: dict | None = None
    figures: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    timing: Timing = field(default_factory=Timing)
    artifacts: dict = field(default_factory=dict)
    tpr_rule: str | None = field(default=None, metadata={"written": "when set"})  # only at metrics.tpr_rule=lt
    sha256: dict | None = None                  # file in the attack folder -> content hash (checked on a cache hit)
    trained_from: str | None = None             # digest of the training artefacts' hashes (train_done.json)
    #: outside runs: the model and the records; how the records' range was decided; the member/non-member shift
    #: check (null: none ran)
    provenance: Provenance | None = field(default=None, metadata={"written": "outside"})
    records_range: dict | None = field(default=None, metadata={"written": "outside"})
    split_check: dict | None = field(default=None, metadata={"written": "outside"})
    copy_of: str | None = field(default=None, metadata={"written": "when set"})  # the run directory's copy

    def __post_init__(self):
        # writers hand over the plain objects their producers return (Method.privacy, the runner's timing)
        if isinstance(self.privacy, dict):
            self.privacy = PrivacyClaim.from_json(self.privacy)
        if isinstance(self.timing, dict):
            self.timing = Timing.from_json(self.timing)
        if isinstance(self.threat_model, dict):
            self.threat_model = ThreatModel.from_json(self.threat_model)
        if isinstance(self.provenance, dict):
            self.provenance = Provenance.from_json(self.provenance)
        if not self.label:
            self.label = self.attack

    # ------------------------------------------------------------------ JSON
    @classmethod
    def from_json(cls, d: dict) -> AttackResult:
        """Parse a result.json object; BadInput (one line) on an unknown version, an undeclared key, a missing key
        or a key of the wrong type."""
        if not isinstance(d, dict):
            raise BadInput(f"not a privbench result (a JSON {type(d).__name__}, not an object)")
        d = upgraded(d, d.get("schema_version"), "result.json")
        unknown = [k for k in d if k not in _ORDER]
        if unknown:
            raise BadInput(f"undeclared key(s) {', '.join(map(repr, unknown))} in a schema_version {STORE_VERSION} "
                           f"result (docs/cli.md §5)")
        missing = [k for k in _ORDER if k not in d and k not in _OPTIONAL]
        if missing:
            raise BadInput(f"not a privbench result (missing keys: {', '.join(missing)})")
        for k, types in _TYPES.items():
            if k in d:
                check_type(k, d[k], types)
        nested = ("privacy", "timing", "threat_model", "provenance")
        kw = {k: d.get(k) for k in _ORDER if k not in nested}
        privacy, threat, prov = d["privacy"], d["threat_model"], d.get("provenance")
        return cls(**kw, privacy=None if privacy is None else PrivacyClaim.from_json(privacy),
                   timing=Timing.from_json(d["timing"]),
                   threat_model=None if threat is None else ThreatModel.from_json(threat),
                   provenance=None if prov is None else Provenance.from_json(prov))

    def to_json(self) -> dict:
        """The result.json object: the declared keys in the writers' order, the optional ones only when set."""
        out: dict[str, Any] = {}
        for k in _ORDER:
            v = getattr(self, k)
            # the external keys: all three (split_check null included) on an external run's result only
            external = k in _EXTERNAL and self.provenance is not None
            if external or k not in _EXTERNAL and (v is not None or k not in _OPTIONAL):
                out[k] = v.to_json() if isinstance(v, _NESTED) else v
        return out

    # ------------------------------------------------------------------ mapping-style read access
    def __getitem__(self, key):
        return self.to_json()[key]

    def get(self, key, default=None):
        return self.to_json().get(key, default)

    def __iter__(self):
        return iter(self.to_json())

    def keys(self):
        return self.to_json().keys()

    def summary(self) -> str:
        """One line for the run's log."""
        m = self.metrics
        if self.kind == MEMBERSHIP:
            return f"AUC {m.get('auc', float('nan')):.3f} TPR@1% {m.get('tpr_at_1pct_fpr', float('nan')):.3f}"
        return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in m.items())


@cache
def json_types(cls) -> dict[str, tuple]:
    """Each JSON key's types from its field's type hint: a schema class is an object, ``None`` also allows null."""
    hints = get_type_hints(cls)
    out = {}
    for name in _declared(cls):
        args = get_args(hints[name]) if isinstance(hints[name], UnionType) else (hints[name],)
        out[name] = tuple(None if a is type(None) else dict if a in _NESTED else a for a in args)
    return out


#: the result's keys in the order writers write them (schema_version first), their JSON types, and those written
#: only when set (the ``written`` fields), of which the outside run's keys
_ORDER = tuple(f.name for f in fields(AttackResult))
_TYPES = json_types(AttackResult)
_OPTIONAL = tuple(f.name for f in fields(AttackResult) if f.metadata.get("written"))
_EXTERNAL = tuple(f.name for f in fields(AttackResult) if f.metadata.get("written") == "outside")


def check_type(key: str, v, types: tuple) -> None:
    """BadInput (one line) unless ``v`` is of one of the JSON ``types`` (None in them: also null; a bool is no
    number)."""
    if v is None and None in types:
        return
    if isinstance(v, bool) or not isinstance(v, tuple(t for t in types if t is not None)):
        want = " or ".join("null" if t is None else t.__name__ for t in types)
        raise BadInput(f"{key}: expected {want}, got {type(v).__name__}")
