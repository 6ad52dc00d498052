"""Typed, versioned schema of ``result.json`` (docs/cli.md §5, where every key and object is described): what
crosses from the runs (:func:`privbench.runs.attack.write_result`) to the reports (:mod:`privbench.reports.collect`).
Each class declares its keys once, as its fields (:mod:`privbench.core.schema`); a writer cannot write an undeclared
key, a reader refuses one, and a file of another ``schema_version`` is refused rather than misread (a later
release's migrations go to ``core.version.MIGRATIONS``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.constants import MEMBERSHIP, OUTSIDE
from ..core.errors import BadInput
from ..core.schema import Schema, extra_keys, given_order, optional
from ..core.validation import target_name
from ..core.version import STORE_VERSION, upgraded
from ..privacy.claims import PrivacyClaim

__all__ = ["OUTSIDE", "AttackResult", "PrivacyClaim", "Provenance", "ThreatModel", "Timing"]



@dataclass
class Timing(Schema):
    """A result's ``timing`` object (seconds)."""
    train_s: float | None = None
    references_s: float | None = optional()
    attack_s: float | None = None
    device: str | None = None
    nfe_per_record: float | None = optional()
    records_per_s: float | None = optional()
    key_order: tuple = given_order()


@dataclass
class ThreatModel(Schema):
    """A result's ``threat_model`` object (docs/cli.md §5, "``threat_model`` objects"; the table per attack:
    docs/attacks-threat-models.md). An attack that declares no threat model writes {}."""
    queries: str | None = optional()
    reference_models: int | None = optional()
    reference_training: str | None = optional()
    auxiliary_data: str | None = optional()
    queries_per_record: str | int | float | None = optional()
    reference_pool: str | None = optional()
    #: a plug-in attack's own keys (``Attack.threat_model`` is a plugin interface: they are kept, not refused)
    details: dict = extra_keys()
    key_order: tuple = given_order()


@dataclass
class Provenance(Schema):
    """An outside model's ``provenance`` object (docs/cli.md §5, "``provenance`` objects"), also written alone as
    its ``provenance.json``; only privbench writes one, so an undeclared key is refused. ``model``, ``members``,
    ``nonmembers`` and ``references`` are the loaders' own objects (keys by format: docs/external-models.md)."""
    model: dict | None = None
    members: dict | None = None
    nonmembers: dict | None = None
    records_sha256: str | None = None
    captions_sha256: str | None = optional()
    references: dict | None = optional()
    key_order: tuple = given_order()

    @property
    def weights_sha256(self) -> str | None:
        """The attacked weights' content hash (the model object's ``weights_sha256``); None when it has none."""
        w = (self.model or {}).get("weights_sha256")
        return w if isinstance(w, str) and w else None


@dataclass(kw_only=True)
class AttackResult(Schema):
    """One attack on one target: the content of ``result.json`` (docs/cli.md §5), its keys in the order they are
    written."""
    schema_version: int = STORE_VERSION
    method: str
    target: str
    attack: str
    label: str = ""
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
    threat_model: ThreatModel | None = None
    attack_config: dict = field(default_factory=dict)
    attack_hash: str | None = None
    calibrated: dict | None = None
    sweep: dict | None = None
    figures: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    timing: Timing = field(default_factory=Timing)
    artifacts: dict = field(default_factory=dict)
    tpr_rule: str | None = optional()
    sha256: dict | None = None
    trained_from: str | None = None
    #: outside models only
    provenance: Provenance | None = optional("provenance")
    records_range: dict | None = optional("provenance")
    split_check: dict | None = optional("provenance")
    copy_of: str | None = optional()

    def __post_init__(self):
        super().__post_init__()
        if not self.label:
            self.label = self.attack

    @classmethod
    def from_json(cls, d, where: str = "") -> AttackResult:
        """Parse a result.json object; BadInput (one line) on an unknown version, an undeclared key, a missing key
        or a key of the wrong type."""
        if not isinstance(d, dict):
            raise BadInput(f"not a privbench result (a JSON {type(d).__name__}, not an object)")
        res = super().from_json(upgraded(d, d.get("schema_version"), "result.json"), where)
        target_name(res.target, f"{where}.target" if where else "target")  # it becomes part of file names
        return res

    @property
    def is_outside(self) -> bool:
        """Whether the attacked model is one privbench did not train (its pseudo-method :data:`OUTSIDE`)."""
        return self.method == OUTSIDE

    def summary(self) -> str:
        """One line for the run's log."""
        m = self.metrics
        if self.kind == MEMBERSHIP:
            return f"AUC {m.get('auc', float('nan')):.3f} TPR@1% {m.get('tpr_at_1pct_fpr', float('nan')):.3f}"
        return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in m.items())
