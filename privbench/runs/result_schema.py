"""Typed, versioned schema of ``result.json`` (docs/cli.md §5): what crosses from the runs (the writers:
:func:`privbench.runs.attack.write_result`, for a method's target and an outside model alike) to the reports (the
readers: :mod:`privbench.reports.collect`) through a file. Each class declares its keys once, as its fields
(:mod:`privbench.core.schema`: order, types and requiredness follow from them).

* :class:`AttackResult` — the file: one attack on one target. A writer cannot write an undeclared key, and a reader
  refuses one.
* :class:`~privbench.privacy.claims.PrivacyClaim` — its ``privacy`` object (with the claim it makes).
* :class:`Timing` — its ``timing`` object.
* :class:`ThreatModel` — its ``threat_model`` object: the attack's declared threat model (``Attack.threat_model``)
  with this run's reference-model settings filled in.
* :class:`Provenance` — an outside model's ``provenance`` object (also its ``provenance.json``): the model and the
  records that were attacked.

``schema_version`` (:data:`privbench.core.version.STORE_VERSION`) is written into every result.
:meth:`AttackResult.from_json` reads that version only: a file of another version, or without one, is refused in
one line rather than misread (a later release's migrations go to ``core.version.MIGRATIONS``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.constants import MEMBERSHIP, OUTSIDE
from ..core.errors import BadInput
from ..core.schema import Schema, extra_keys, given_order, optional
from ..core.version import STORE_VERSION, upgraded
from ..privacy.claims import PrivacyClaim

__all__ = ["OUTSIDE", "AttackResult", "PrivacyClaim", "Provenance", "ThreatModel", "Timing"]



@dataclass
class Timing(Schema):
    """A result's ``timing`` object (seconds)."""
    train_s: float | None = None        # null when the run was cached
    references_s: float | None = optional()  # privbench-trained targets: training the reference models (null: none)
    attack_s: float | None = None
    device: str | None = None
    nfe_per_record: float | None = optional()  # membership attacks
    records_per_s: float | None = optional()
    key_order: tuple = given_order()


@dataclass
class ThreatModel(Schema):
    """A result's ``threat_model`` object (docs/cli.md §5, "``threat_model`` objects"; the table per attack:
    docs/attacks-threat-models.md). An attack that declares no threat model writes {}."""
    queries: str | None = optional()                # what the attack queries the target with
    reference_models: int | None = optional()       # reference (shadow) models it trains
    reference_training: str | None = optional()     # how they are trained
    auxiliary_data: str | None = optional()         # data beyond the records under test ("none": a per-record statistic)
    queries_per_record: str | int | float | None = optional()  # a count, or the setting that decides it
    reference_pool: str | None = optional()         # reference-model attacks: offline or online
    #: a registered attack's own keys that the schema does not declare (``Attack.threat_model`` is a plugin
    #: interface: a plug-in's result must not be refused for one)
    details: dict = extra_keys()
    key_order: tuple = given_order()


@dataclass
class Provenance(Schema):
    """An outside model's ``provenance`` object (docs/cli.md §5, "``provenance`` objects"), also written alone as
    its ``provenance.json``. Only privbench's runner writes one, so an undeclared key is refused; ``model``,
    ``members``, ``nonmembers`` and ``references`` are the loaders' own objects (their keys depend on the model's
    format and the records' kind: docs/external-models.md)."""
    model: dict | None = None           # the model loader's: format, path, weights_sha256, prediction_type, scheduler…
    members: dict | None = None         # how each record set was read: spec, kind, n, range, encoding…
    nonmembers: dict | None = None
    records_sha256: str | None = None   # the records' content hash (pixels, labels, membership, indices)
    captions_sha256: str | None = optional()  # text-to-image models: the records' captions
    references: dict | None = optional()      # --reference-recipe: recipe, reference_data, n_reference, store, note
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
    tpr_rule: str | None = optional()           # only at metrics.tpr_rule=lt
    sha256: dict | None = None                  # file in the attack folder -> content hash (checked on a cache hit)
    trained_from: str | None = None             # digest of the training artefacts' hashes (train_done.json)
    #: outside models: the model and the records; how the records' range was decided; the member/non-member
    #: shift check (null: none ran)
    provenance: Provenance | None = optional("provenance")
    records_range: dict | None = optional("provenance")
    split_check: dict | None = optional("provenance")
    copy_of: str | None = optional()            # the run directory's copy: the attack folder's result.json

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
        return super().from_json(upgraded(d, d.get("schema_version"), "result.json"), where)

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
