"""Attack a model privbench did not train, on records the user brings (``privbench attack --model``).

``attack_external`` writes an ordinary run directory ``<runs-dir>/external-<hash>/`` (named by :func:`run_hash`;
docs/external-models.md, "What is written") with the runner's own writer, after every bad input is refused;
``attack_in_memory`` is ``privbench.attack``: the same attack on objects in memory, writing nothing.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ..attacks.base import MEMBERSHIP, AttackEnv, Records, split_label
from ..core.config import Config, apply_preset, check_seed, config_hash, parse_set_args, set_key
from ..core.constants import OUTSIDE
from ..core.errors import BadInput
from ..core.registry import ATTACKS, DATASETS, PRESETS
from ..core.validation import target_name
from ..data.base import load_dataset
from ..data.captions import check_template, template_captions
from ..data.image_range import check_range_name, check_same_encoding
from ..data.records_io import (
    dataset_records,
    fit_to_model,
    load_records,
    read_split,
    records_sha256,
    repeated_count,
    shared_count,
)
from ..metrics.roc import FPR_OF, resolvable, unresolvable_reason
from ..metrics.split_shift import DEFAULT_FOLDS, flagged, split_shift
from ..models.external import load_external, wrap
from .attack import Staged, attack_once, execute, make_attack, metrics_hash_dict, refuse
from .external_references import build_external_references, load_recipe
from .loaded import loaded_once, shared_targets
from .outside_spec import OutsideSpec
from .result_schema import AttackResult, Provenance
from .store import default_runs_dir

LOG = logging.getLogger(__name__)

#: bump when the numbers of an external run change for the same inputs (re-keys cached runs)
EXTERNAL_VERSION = 1
SETTING_SECTIONS = ("attack", "sample", "metrics")
#: members and non-members an attack needs at least (metrics.roc: calibrated metrics split each in halves)
MIN_RECORDS = 2


def external_config(preset: str = "tiny", seed: int = 0, sets=(), dataset: str | None = None) -> Config:
    """A Config holding only what an external run uses: the preset's attack/sample settings and ``--set``
    overrides of those two sections (the model's own sections come from the model, never from a preset)."""
    seed = check_seed(seed, "--seed")
    PRESETS.get(preset)  # an unknown preset is bad input
    cfg = Config(method=OUTSIDE, dataset=OUTSIDE, preset=preset, seed=seed)
    apply_preset(cfg, preset)
    cfg.dataset = dataset or OUTSIDE
    pairs = [tuple(p) for p in sets or () if isinstance(p, (tuple, list))]  # (key, value) of a suite, or KEY=VALUE
    for k, v in pairs + parse_set_args([p for p in sets or () if not isinstance(p, (tuple, list))]):
        if k.split(".", 1)[0] not in SETTING_SECTIONS:
            raise BadInput(f"--set {k}: an external model takes only attack.*, sample.* and metrics.* settings (its "
                           f"architecture and schedule come from the model)")
        set_key(cfg, k, v)
    return cfg


def _schedule_into(cfg: Config, tgt) -> None:
    s = tgt.schedule
    d = cfg.diffusion
    d.num_timesteps, d.beta_start, d.beta_end = int(s.num_timesteps), float(s.beta_start), float(s.beta_end)
    d.beta_schedule = s.beta_schedule
    d.variance_type = s.variance_type


# ---------------------------------------------------------------------- records

@dataclass
class RecordSet:
    x: torch.Tensor
    y: torch.Tensor | None
    index: list[int] | None
    provenance: dict = field(default_factory=dict)
    captions: list[str] | None = None  # one per record (text-to-image targets)


def _as_set(x, y, prov) -> RecordSet:
    prov = dict(prov)
    index = prov.pop("index", None)
    captions = prov.pop("captions", None)
    if captions is not None:
        prov["captions"] = "given with the records"
    return RecordSet(x, y, index, prov, captions)


def load_member_sets(members, nonmembers, image_shape, *, dataset=None, data_root=None, split=None,
                     records_range: str = "auto") -> tuple[RecordSet, RecordSet]:
    """Members and non-members from SPECs or from a PIA/SecMI split file (indices into ``dataset``), in the same
    range and encoding (``records_range``: :mod:`privbench.data.image_range`)."""
    check_range_name(records_range)
    if split is not None:
        if members is not None or nonmembers is not None:
            raise BadInput("--split gives both the members and the non-members; drop --members/--nonmembers")
        if not dataset:
            raise BadInput(f"--split {split}: needs --dataset (e.g. cifar10) and --data-root")
        if records_range not in ("auto", "-1:1"):
            raise BadInput(f"--split {split}: selects privbench's own [-1, 1] dataset records; --records-range "
                           f"{records_range} does not apply")
        mem_idx, non_idx = read_split(split)
        data = load_dataset(dataset, data_root or None)  # once for both sets
        sets = []
        for what, idx in (("members", mem_idx), ("non-members", non_idx)):
            x, y, prov = dataset_records(idx, dataset, data_root, f"--split {split} ({what})", data)
            prov = {"spec": f"{split} ({'mia_train_idxs' if what == 'members' else 'mia_eval_idxs'})", **prov,
                    "n": int(len(x)), "source_shape": list(x.shape[1:])}
            x = fit_to_model(x, image_shape, f"--split {split}", prov)
            sets.append(_as_set(x, y, prov))
        return sets[0], sets[1]
    if members is None or nonmembers is None:
        raise BadInput("--model needs --members SPEC and --nonmembers SPEC (or --split FILE with --dataset)")
    m = _as_set(*load_records(members, image_shape=image_shape, dataset=dataset, data_root=data_root,
                              records_range=records_range))
    n = _as_set(*load_records(nonmembers, image_shape=image_shape, dataset=dataset, data_root=data_root,
                              records_range=records_range))
    return m, n


def refuse_repeated(mem: RecordSet, non: RecordSet) -> None:
    """BadInput when a set holds one record twice: membership rates, intervals and set tests count records, and a
    repeated one would count as two. (A training set with duplicates is extract's and memorization's subject.)"""
    for what, s in (("members", mem), ("non-members", non)):
        k = repeated_count(s.x, s.index)
        if k:
            raise BadInput(f"{what} {s.provenance.get('spec')}: {k} record{'s repeat' if k > 1 else ' repeats'} an "
                           f"earlier one (same dataset index, or the same pixels on the 8-bit grid); a membership "
                           f"test counts each record once")


def build_external_records(mem: RecordSet, non: RecordSet, num_classes: int | None) -> Records:
    """Members then non-members as :class:`Records`; refuses too few records, overlap and missing or bad labels."""
    if len(mem.x) < MIN_RECORDS or len(non.x) < MIN_RECORDS:
        raise BadInput(f"an attack needs at least {MIN_RECORDS} members and {MIN_RECORDS} non-members (got "
                       f"{len(mem.x)} and {len(non.x)})")
    if tuple(mem.x.shape[1:]) != tuple(non.x.shape[1:]):
        raise BadInput(f"members are {'×'.join(map(str, mem.x.shape[1:]))} (C×H×W) and non-members "
                       f"{'×'.join(map(str, non.x.shape[1:]))}: both sets must have one image shape")
    same_dataset = (mem.index is not None and non.index is not None
                    and mem.provenance.get("dataset") == non.provenance.get("dataset"))
    k = shared_count(mem.x, non.x, mem.index if same_dataset else None, non.index if same_dataset else None)
    if k:
        raise BadInput(f"members and non-members share {k} records (same dataset index, or the same pixels on the "
                       f"8-bit grid in the model's [-1, 1]); a record cannot be both")
    check_same_encoding(mem.provenance, non.provenance)  # after the overlap: a re-encoded copy is named as such
    if num_classes:
        for what, s in (("--members", mem), ("--nonmembers", non)):
            if s.y is None:
                raise BadInput(f"{what} {s.provenance.get('spec')}: the model is class-conditional "
                               f"({num_classes} classes) and these records have no labels")
            lo, hi = int(s.y.min()), int(s.y.max())
            if lo < 0 or hi >= num_classes:
                raise BadInput(f"{what} {s.provenance.get('spec')}: labels {lo}..{hi} outside the model's "
                               f"{num_classes} classes")

    def labels_of(s):
        return s.y.long() if s.y is not None else torch.full((len(s.x),), -1, dtype=torch.long)

    if same_dataset:
        index = torch.as_tensor(list(mem.index) + list(non.index), dtype=torch.long)
    else:  # no dataset order: the row in members, then in non-members
        index = torch.arange(len(mem.x) + len(non.x), dtype=torch.long)
    x = torch.cat([mem.x, non.x]).float().contiguous()
    labels = torch.cat([torch.ones(len(mem.x), dtype=torch.long), torch.zeros(len(non.x), dtype=torch.long)])
    return Records(x, torch.cat([labels_of(mem), labels_of(non)]), labels, index)


# ---------------------------------------------------------------------- the run

def run_hash(prov: dict, records: Records, attack, cfg: Config, target_name: str, claim: dict | None = None,
             captions=None) -> str:
    """The external run's name. A user's privacy claim and captions enter it only when given (a result is never
    rewritten with another claim; a run without them is named by the rest alone)."""
    model = {k: prov.get(k) for k in ("weights_sha256", "format", "weights", "prediction_type", "num_classes",
                                      "sample_shape")}
    model["scheduler"] = {k: v for k, v in (prov.get("scheduler") or {}).items() if k != "source"}
    what = {"version": EXTERNAL_VERSION, "model": model, "target": target_name,
            "records": records_sha256(records.x, records.y, records.labels, records.index),
            "attack": attack.hash_dict(cfg), "attack_settings": asdict(cfg.attack),
            "sample": asdict(cfg.sample), "seed": cfg.seed, "dataset": cfg.dataset, "preset": cfg.preset,
            **metrics_hash_dict(cfg)}
    if claim:
        what["claim"] = claim
    if captions is not None:
        what["captions"] = captions_sha256(captions)
    return config_hash(what)


def _notes(prov: dict, mem: RecordSet, non: RecordSet, claim: dict | None = None) -> list[str]:
    notes = [f"external model ({prov.get('format')}): {prov.get('weights')}; {prov.get('prediction_type')} "
             f"prediction ({prov.get('prediction_conversion')}); schedule: {prov['scheduler'].get('source')}"]
    for what, s in (("members", mem), ("non-members", non)):
        if s.provenance.get("resized") or s.provenance.get("resized_files"):
            how = s.provenance.get("resized") or f"{s.provenance.get('resized_files')} files"
            notes.append(f"{what} resized to the model's side ({how}); scores assume the model was trained on "
                         f"images resized the same way")
    if claim:
        notes.append(f"no formal guarantee: the user claims epsilon={claim['claimed_epsilon']:g} at delta="
                     f"{claim['delta']:g} ({claim['claim_basis']}); privbench has not verified it, and audit compares "
                     f"it with the empirical lower bounds")
    else:
        notes.append("no formal guarantee is known for an external model (privacy: none)")
    return notes


@dataclass
class ExternalTarget:
    """A loaded external model with its members and non-members, validated: what every attack on it shares."""
    tgt: Any
    prov: dict
    mem: RecordSet
    non: RecordSet
    records: Records
    name: str
    preset: str
    sets: tuple
    dataset: str | None
    claim: dict | None = None      # the user's privacy claim (privbench.privacy.claims.user_claim), or None
    records_range: dict = field(default_factory=dict)
    split_check: dict | None = None
    captions: list[str] | None = None  # members' then non-members' captions (text-to-image targets)
    pixels: Records | None = None      # the records in pixel space (text-to-image targets; x is then latents)
    #: ``--reference-recipe``/``--reference-data`` (runs/external_references.py): {"recipe": loaded or None, "data"}
    references: dict | None = None

    def plan(self, attack: str, seed: int = 0, *, runs_dir=None, strict: bool = True) -> tuple[Any, OutsideSource]:
        """(attack, source) of ``attack`` at ``seed``: validates the attack's settings (``strict``: an ``attack.*``
        key it does not use is refused) and whether it can run here, and names its run directory by
        :func:`run_hash`."""
        cfg = external_config(self.preset, seed, self.sets, self.dataset)
        _schedule_into(cfg, self.tgt)
        att = make_attack(cfg, attack, strict=strict)
        if att.kind == MEMBERSHIP:
            refuse_repeated(self.mem, self.non)
        source = OutsideSource(self, cfg, Path(), runs_dir)
        refuse(att, source, source.capabilities)
        h = run_hash(self.prov, self.records, att, cfg, self.name, self.claim, self.captions)
        if att.needs_references:  # the recipe's content and the reference data key the run too
            r = self.references
            h = config_hash({"run": h, "recipe": (r["recipe"] or {}).get("sha256"), "data": str(r["data"]),
                             "data_sha256": r["data_sha256"]})
        run_dir = (Path(runs_dir) if runs_dir else default_runs_dir()) / f"external-{h}"
        return att, replace(source, run_dir=run_dir)


@dataclass(frozen=True)
class OutsideSource:
    """A model privbench did not train, with the records its user brought (``ext``), as one attack's source: the
    run directory ``external-<hash>/`` is the attack's folder; the result carries the user's claim (if any) as its
    privacy, the provenance of the model and records, and notes saying what privbench did not verify."""
    ext: ExternalTarget
    cfg: Config
    run_dir: Path
    runs_dir: Any = None
    outside: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return self.ext.name

    @property
    def capabilities(self):
        return self.ext.tgt.capabilities

    def reference_gap(self, attack) -> str | None:
        r = self.ext.references
        if r is None or (int(attack.n_reference) and r.get("recipe") is None):
            return ("needs reference models: give --reference-recipe FILE (how to train one) and --reference-data "
                    "SPEC (public records; qmia needs only the data)")
        if attack.reference_pool == "online":
            return ("an outside model's references train on --reference-data only (offline); the online pool "
                    "would retrain on the evaluation records")
        return None

    def out_dir(self, attack) -> Path:
        del attack  # the source's interface; the run directory is named for the attack already (plan)
        return self.run_dir

    def lock_name(self, out_dir: Path) -> None:
        del out_dir  # the source's interface; the run directory is the attack's own
        return None

    def ready(self) -> dict:
        return {"train_s": None}

    def stage(self, attack, out_dir: Path | None, timing: dict) -> Staged:
        """The target, records and environment; written runs also get the provenance and notes (and references
        trained by the user's recipe)."""
        ext, cfg = self.ext, self.cfg
        records = ext.records
        train = ext.pixels if ext.pixels is not None else records  # memorization compares pixels
        env = AttackEnv(cfg=cfg, method=None, out_dir=out_dir, seed=cfg.seed,
                        train_data=(train.x[train.labels == 1], train.y[train.labels == 1]),
                        train_index=records.index[records.labels == 1].tolist())
        staged = Staged(ext.tgt, ext.name, records, env, dict(ext.claim) if ext.claim else None, timing)
        if out_dir is None:  # privbench.attack: nothing written, nothing to record
            return staged
        provenance = Provenance(model={k: v for k, v in ext.prov.items() if k != "weights_note"},
                                members=ext.mem.provenance, nonmembers=ext.non.provenance,
                                records_sha256=records_sha256(records.x, records.y, records.labels, records.index),
                                captions_sha256=None if ext.captions is None else captions_sha256(ext.captions))
        staged.notes = _notes(ext.prov, ext.mem, ext.non, ext.claim)
        if attack.needs_references:
            env.references, provenance.references = build_external_references(
                ext, ext.references["recipe"], ext.references["data"], n=int(attack.n_reference), seed=cfg.seed,
                runs_dir=self.runs_dir, device=ext.tgt.device, dataset=ext.references.get("dataset"),
                data_root=ext.references.get("data_root"))
            staged.notes.append(provenance.references["note"])
        staged.fields = {"provenance": provenance, "records_range": ext.records_range,
                         "split_check": ext.split_check}
        if ext.split_check and flagged(ext.split_check):
            staged.warnings = [ext.split_check["verdict"]]
        staged.files = {"provenance.json": provenance.to_json()}
        return staged

    def finish(self, out_dir: Path, result, fresh: bool) -> None:
        del out_dir, result, fresh  # the source's interface; the run directory is the result's only copy


def _split_check(mem: RecordSet, non: RecordSet, captions: list[str] | None = None) -> dict | None:
    """The blind baseline: do the records (and ``captions``, members' then non-members') alone tell the two sets
    apart? Fewer folds for a handful of records; None below 2 of either."""
    folds = min(DEFAULT_FOLDS, len(mem.x), len(non.x))
    if folds < 2:
        return None
    caps = (None, None) if captions is None else (captions[:len(mem.x)], captions[len(mem.x):])
    shift = split_shift(mem.x, non.x, folds=folds, member_captions=caps[0], nonmember_captions=caps[1])
    if flagged(shift):
        LOG.warning(f"privbench: warning: {shift['verdict']}")
    return shift


def load_external_target(spec: OutsideSpec) -> ExternalTarget:
    """Load and check an outside model, its records and its reference inputs (everything that can be bad input,
    nothing written). A text-to-image target's records take one caption each (:func:`latent_records`)."""
    external_config(spec.preset, 0, spec.sets, spec.dataset)  # an unknown preset or a bad --set, before loading
    check_range_name(spec.records_range)
    if spec.dataset:
        DATASETS.get(spec.dataset)
    if spec.caption is not None:
        check_template(spec.caption)
    tgt, prov = load_external(spec.model_path, arch=spec.arch, scheduler_config=spec.scheduler_config,
                              use_ema=spec.use_ema, device=spec.device, name=spec.target_name, lora=spec.lora)
    text = tgt.capabilities.text_conditioned
    if spec.caption is not None and not text:
        raise BadInput(f"--caption {spec.caption!r}: the model is not text-conditional")
    mem, non = load_member_sets(spec.members_spec, spec.nonmembers_spec, tgt.capabilities.record_shape,
                                dataset=spec.dataset, data_root=spec.data_root, split=spec.split,
                                records_range=spec.records_range)
    if not text:
        records, captions, pixels = build_external_records(mem, non, tgt.num_classes), None, None
    else:
        records, captions, pixels = latent_records(tgt, mem, non, spec.caption)
    used = {"requested": spec.records_range, **check_same_encoding(mem.provenance, non.provenance)}
    shift = _split_check(mem, non, captions)
    references = external_reference_inputs(spec.reference_recipe, spec.reference_data, records,
                                           dataset=spec.dataset, data_root=spec.data_root)
    return ExternalTarget(tgt, prov, mem, non, records, spec.target_name, spec.preset, tuple(spec.sets or ()),
                          spec.dataset, claim=spec.claim, records_range=used, split_check=shift, captions=captions,
                          pixels=pixels, references=references)


def captions_sha256(captions) -> str:
    h = hashlib.sha256()
    for c in captions:
        h.update(str(c).encode("utf-8") + b"\0")
    return h.hexdigest()


def latent_records(tgt, mem: RecordSet, non: RecordSet, caption: str | None) -> tuple[Records, list[str], Records]:
    """(latent records, captions, pixel records) of a text-to-image target: latents encoded once, each record's
    caption row as its ``y``; the target samples from the members' captions (memorization, in pixel space)."""
    pixels = build_external_records(mem, non, None)  # overlap checks in pixel space
    caps = []
    for what, s in (("--members", mem), ("--nonmembers", non)):
        if caption is not None:
            c = template_captions(caption, s.y, s.provenance.get("classes"), f"{what} {s.provenance.get('spec')}")
        elif s.captions is not None:
            c = s.captions
        else:
            raise BadInput(f"{what} {s.provenance.get('spec')}: the model is text-conditional and these records have "
                           f"no captions (an .npz 'captions' array, a metadata.jsonl, or --caption TEMPLATE)")
        if len(c) != len(s.x):
            raise BadInput(f"{what} {s.provenance.get('spec')}: {len(c)} captions for {len(s.x)} records")
        caps += list(c)
    z = tgt.encode(pixels.x)
    rows = tgt.text.ids(caps)
    tgt.sample_rows = torch.unique(rows[pixels.labels == 1])
    return Records(z, rows, pixels.labels, pixels.index), caps, pixels


def attack_external(spec: OutsideSpec, attack: str, *, seed: int = 0, runs_dir=None,
                    strict: bool = True) -> AttackResult:
    """Run ``attack`` on the outside model ``spec`` names and write ``<runs_dir>/external-<hash>/`` (an equal request
    reuses the finished run); ``strict`` as :meth:`ExternalTarget.plan` (a bench passes ``False``)."""
    external_config(spec.preset, seed, spec.sets, spec.dataset)  # a bad seed, before loading anything
    target_name(spec.target_name, "--target")
    name, values = split_label(attack)             # a label: name or name@variant (secmi@paper)
    ATTACKS.get(name).factory.variant_overrides(values)  # an unknown attack or variant, too
    which = f"outside {spec!r}"
    ext = loaded_once((which,), lambda: load_external_target(spec), run=which)
    return execute(*ext.plan(attack, seed, runs_dir=runs_dir, strict=strict))


def attacks_external(spec: OutsideSpec, attacks, *, seed: int = 0, runs_dir=None) -> list[AttackResult]:
    """:func:`attack_external` for each of ``attacks`` (``--model M --attack a,b,c``): the model, its records and
    their checks loaded once; ``strict`` only for a single attack."""
    with shared_targets():
        return [attack_external(spec, a, seed=seed, runs_dir=runs_dir, strict=len(attacks) == 1) for a in attacks]


def external_reference_inputs(recipe_path, data_spec, records: Records | None = None, *, dataset: str | None = None,
                              data_root=None) -> dict | None:
    """The loaded ``--reference-recipe`` and the ``--reference-data`` SPEC (checked: data without a recipe is
    allowed for qmia; a recipe without data is bad input). An ``.npy`` of dataset indices is read from the
    target's ``--dataset``/``--data-root``, as ``--members``/``--nonmembers`` are."""
    if recipe_path is None and data_spec is None:
        return None
    if data_spec is None:
        raise BadInput("--reference-recipe needs --reference-data SPEC (the public records references train on)")
    x, y, _ = load_records(data_spec, dataset=dataset, data_root=data_root)
    if records is not None and shared_count(x, records.x):  # checked before any run directory is created
        raise BadInput(f"--reference-data {data_spec}: {shared_count(x, records.x)} records are also evaluation "
                       f"records; the reference data must be disjoint from --members/--nonmembers")
    return {"recipe": load_recipe(recipe_path) if recipe_path is not None else None, "data": data_spec,
            "data_sha256": records_sha256(x, y, None, None), "dataset": dataset, "data_root": data_root}


# ---------------------------------------------------------------------- in memory (privbench.attack)

@dataclass
class InMemoryResult:
    """What ``privbench.attack`` returns: ``result``, the :class:`~privbench.runs.result_schema.AttackResult` a run
    would write, with ``scores`` (None for an attack that scores no membership) and ``labels`` (docs/api.md §6)."""
    result: AttackResult
    scores: np.ndarray | None
    labels: np.ndarray

    # the result's fields, not copies
    @property
    def attack(self) -> str:
        return self.result.attack

    @property
    def metrics(self) -> dict:
        """The result's metrics, each TPR (and CI) at an FPR below 1/non-members as None (:attr:`unresolved`)."""
        m = dict(self.result.metrics)
        gone = self.unresolved
        if gone:
            m["ci95"] = {k: (None if k in gone else v) for k, v in (m.get("ci95") or {}).items()}
            m.update({k: None for k in gone})
        return m

    @property
    def unresolved(self) -> dict[str, str]:
        """metric → why it is n/a (a TPR at an FPR below 1/non-members)."""
        n = self.result.n_nonmembers
        return {k: unresolvable_reason(k, n) for k in FPR_OF if k in self.result.metrics and not resolvable(k, n)}

    @property
    def calibrated(self) -> dict | None:
        return self.result.calibrated

    @property
    def sweep(self) -> dict | None:
        return self.result.sweep

    @property
    def figures(self) -> dict:
        return self.result.figures

    @property
    def notes(self) -> list:
        return self.result.notes

    @property
    def warnings(self) -> list:
        return self.result.warnings

    def __repr__(self) -> str:
        m = self.metrics
        shown = {k: round(v, 4) for k, v in m.items() if isinstance(v, float)}
        shown.update({k: "n/a" for k in self.unresolved})
        return f"InMemoryResult({self.attack}, {shown})"


def _in_memory_set(obj, image_shape, what: str) -> RecordSet:
    if isinstance(obj, (str, Path)):
        return _as_set(*load_records(obj, image_shape=image_shape))
    y = None
    if isinstance(obj, (tuple, list)) and len(obj) == 2:
        obj, y = obj
    try:
        x = torch.as_tensor(obj).float()
    except (TypeError, ValueError, RuntimeError):
        raise BadInput(f"{what}: expected images N×C×H×W in [-1, 1] (or (images, labels), or a SPEC path), got a "
                       f"{type(obj).__name__} that is not an array") from None
    if y is not None:
        try:
            y = torch.as_tensor(y)
        except (TypeError, ValueError, RuntimeError):
            raise BadInput(f"{what}: labels must be an array of integers, got a {type(y).__name__}") from None
        if y.is_floating_point() and not bool((y == y.round()).all()):
            raise BadInput(f"{what}: labels must be integers (class indices)")
    if x.dim() != 4:
        raise BadInput(f"{what}: expected images N×C×H×W in [-1, 1] (or (images, labels), or a SPEC path), "
                       f"got shape {tuple(x.shape)}")
    if len(x) and not bool(torch.isfinite(x).all()):
        raise BadInput(f"{what}: images hold NaN or infinite values")
    if len(x) and (float(x.min()) < -1 - 1e-4 or float(x.max()) > 1 + 1e-4):
        raise BadInput(f"{what}: images must lie in [-1, 1]")
    prov = {"spec": "in memory", "n": int(len(x)), "source_shape": list(x.shape[1:]), "range": "-1:1",
            "encoding": "float", "range_basis": "in-memory tensors must be in [-1, 1]"}
    x = fit_to_model(x.cpu().contiguous(), image_shape, what, prov)
    if y is not None:
        y = y.long().view(-1)
        if len(y) != len(x):
            raise BadInput(f"{what}: {len(y)} labels for {len(x)} images")
    return RecordSet(x, y, None, prov)


def attack_in_memory(target, members, nonmembers, attack: str, *, seed: int = 0, **settings) -> InMemoryResult:
    """``privbench.attack``: run a registered attack on a Target (anything ``privbench.wrap`` accepts, or a model
    folder) with members / non-members as tensors, (images, labels) or SPEC paths (docs/api.md §6). Writes nothing."""
    tgt = load_external(target)[0] if isinstance(target, (str, Path)) else wrap(target)
    if tgt.capabilities.text_conditioned:
        raise BadInput("privbench.attack: text-to-image pipelines need captions with the records; use "
                       "privbench.runs.external.attack_external (privbench attack --model) for them")
    cfg = external_config("tiny", seed)
    for k, v in settings.items():
        set_key(cfg, k if "." in k else f"attack.{k}", v)
    _schedule_into(cfg, tgt)
    att = make_attack(cfg, attack)
    shape = tgt.meta.get("shape")
    mem = _in_memory_set(members, shape, "members")
    non = _in_memory_set(nonmembers, shape, "nonmembers")
    if att.kind == MEMBERSHIP:
        refuse_repeated(mem, non)
    ext = ExternalTarget(tgt, {}, mem, non, None, tgt.name, "tiny", (), None)
    source = OutsideSource(ext, cfg, None)
    refuse(att, source, source.capabilities)
    ext.records = build_external_records(mem, non, tgt.num_classes)
    result, out = attack_once(cfg, att, source.stage(att, None, source.ready()))
    scores = np.asarray(out.scores, dtype=np.float64) if att.kind == MEMBERSHIP else None
    return InMemoryResult(result, scores, ext.records.labels.numpy().astype(np.int64))
