"""Attack a model privbench did not train, on records the user brings (``privbench attack --model``).

``attack_external`` loads the model (:func:`privbench.models.external.load_external`), the members and non-members
(:mod:`privbench.data.records_io`), runs a registered attack and writes an ordinary run directory
``<runs-dir>/external-<hash>/`` — ``result.json`` (the runner's schema, method ``external``, plus ``provenance``),
``scores.npz``, ``roc.png`` and ``provenance.json`` — with the runner's own writer, so ``privbench audit``,
``report`` and ``check`` read it as any other run. The hash covers the weights' content hash, the model's
schedule and prediction type, the records (pixels, labels, membership), the attack settings and the seed; an
equal request reuses the finished run.

Everything that can be bad input (model, records, overlap, labels, attack settings) is checked before the run
directory is created.

``attack_in_memory`` is ``privbench.attack(target, members, nonmembers, attack, **settings)``: the same attack on
objects in memory; it writes nothing.
"""
from __future__ import annotations

import hashlib
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..attacks.base import MEMBERSHIP, RECONSTRUCTION, AttackEnv, Records, split_label
from ..core.config import Config, apply_preset, check_seed, config_hash, parse_set_args, set_key
from ..core.errors import BadInput
from ..core.io import atomic_write_json
from ..core.registry import ATTACKS, DATASETS, PRESETS
from ..data.base import load_dataset
from ..data.captions import check_template, template_captions
from ..data.image_range import check_range_name, check_same_encoding
from ..data.records_io import dataset_records, fit_to_model, load_records, read_split, records_sha256, shared_count
from ..metrics.roc import FPR_OF, resolvable, unresolvable_reason
from ..metrics.split_shift import DEFAULT_FOLDS, flagged, split_shift
from ..models.external import load_external, wrap
from .attack import assemble_result, cached_result, make_attack, metrics_hash_dict, new_result
from .external_references import build_external_references, load_recipe
from .result_schema import AttackResult, Provenance
from .store import default_runs_dir, run_lock

LOG = logging.getLogger(__name__)

#: bump when the numbers of an external run change for the same inputs (re-keys cached runs)
EXTERNAL_VERSION = 1
SETTING_SECTIONS = ("attack", "sample", "metrics")
#: members and non-members an attack needs at least (metrics.roc: calibrated metrics split each in halves)
MIN_RECORDS = 2


def external_config(preset: str = "tiny", seed: int = 0, sets=(), dataset: str | None = None) -> Config:
    """A Config holding only what an external run uses: the preset's attack/sample settings and ``--set``
    overrides of those two sections (the model's own sections come from the model, never from a preset)."""
    seed = check_seed(seed, "--seed")  # the rule of build_config: an integer in [0, 2**32 - 1]
    PRESETS.get(preset)  # an unknown preset is bad input
    cfg = Config(method="external", dataset="external", preset=preset, seed=seed)
    apply_preset(cfg, preset)
    cfg.dataset = dataset or "external"
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


def _check_attack(cfg: Config, attack_name: str, tgt, *, strict: bool = True, references=None):
    _schedule_into(cfg, tgt)
    attack = make_attack(cfg, attack_name, strict=strict)
    reason = attack.refusal(tgt.capabilities)
    if reason:
        raise BadInput(f"attack {attack_name!r} {reason}")
    if attack.kind == RECONSTRUCTION:
        raise BadInput(f"attack {attack_name!r} reconstructs records from PFDM's noised uploads; an external model "
                       f"has none (use a membership attack or memorization)")
    if attack.needs_references and (references is None or (int(attack.n_reference) and references.get("recipe")
                                                           is None)):
        raise BadInput(f"attack {attack_name!r} needs reference models: give --reference-recipe FILE (how to train "
                       f"one) and --reference-data SPEC (public records; qmia needs only the data)")
    if attack.needs_references and attack.reference_pool == "online":
        raise BadInput(f"attack {attack_name!r}: an outside model's references train on --reference-data only "
                       f"(offline); the online pool would retrain on the evaluation records")
    return attack


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


def build_external_records(mem: RecordSet, non: RecordSet, num_classes: int | None) -> Records:
    """Members then non-members as :class:`Records`; refuses too few records, overlap and missing/out-of-range
    labels."""
    if len(mem.x) < MIN_RECORDS or len(non.x) < MIN_RECORDS:  # the calibrated metrics need 2 of each
        raise BadInput(f"an attack needs at least {MIN_RECORDS} members and {MIN_RECORDS} non-members (got "
                       f"{len(mem.x)} and {len(non.x)})")
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

class _NoMethod:
    """What the runner's writer asks of a Method: an external model carries no formal guarantee, only the claim its
    user stated (``--claimed-epsilon``; privbench.privacy.claims), if any."""

    def __init__(self, claim: dict | None = None):
        self.claim = claim

    def privacy(self, target):
        del target  # Method.privacy's interface; the claim is the one model's
        return dict(self.claim) if self.claim else None


def run_hash(prov: dict, records: Records, attack, cfg: Config, target_name: str, claim: dict | None = None,
             captions=None) -> str:
    """The external run's name. A user's privacy claim and captions enter it only when given (a result is never
    rewritten with another claim, and runs without them keep their hash)."""
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

    def plan(self, attack: str, seed: int = 0, *, runs_dir=None, strict: bool = True) -> tuple[Config, Any, Path]:
        """(config, attack, run directory) of ``attack`` at ``seed``: validates the attack's settings (``strict``:
        an ``attack.*`` key it does not use is refused) and names its run directory by :func:`run_hash`."""
        cfg = external_config(self.preset, seed, self.sets, self.dataset)
        att = _check_attack(cfg, attack, self.tgt, strict=strict, references=self.references)
        h = run_hash(self.prov, self.records, att, cfg, self.name, self.claim, self.captions)
        if att.needs_references:  # the recipe's content and the reference data key the run too
            r = self.references
            h = config_hash({"run": h, "recipe": (r["recipe"] or {}).get("sha256"), "data": str(r["data"]),
                             "data_sha256": r["data_sha256"]})
        return cfg, att, (Path(runs_dir) if runs_dir else default_runs_dir()) / f"external-{h}"


def _split_check(mem: RecordSet, non: RecordSet) -> dict | None:
    """The member/non-member shift check of the records (the blind baseline: do the records alone tell the two
    sets apart?); fewer folds for a handful of records, None below 2 of either."""
    folds = min(DEFAULT_FOLDS, len(mem.x), len(non.x))
    if folds < 2:
        return None
    shift = split_shift(mem.x, non.x, folds=folds)
    if flagged(shift):
        LOG.warning(f"privbench: warning: {shift['verdict']}")
    return shift


def load_external_target(model_path, members_spec, nonmembers_spec, *, preset: str = "tiny", sets=(),
                         device="auto", arch: str | None = None, scheduler_config=None, use_ema: bool = True,
                         dataset: str | None = None, data_root=None, split=None,
                         target_name: str = "model", claim: dict | None = None,
                         records_range: str = "auto", lora=None, caption: str | None = None) -> ExternalTarget:
    """Load and check an external model and its records (everything that can be bad input, nothing written).

    ``claim``: the privacy object of the user's claim (:func:`privbench.privacy.claims.user_claim`).
    A text-to-image target (:class:`~privbench.models.latent.LatentTarget`) takes records in pixel space with one
    caption each (given with the records, or ``caption`` — a template filled from their labels); they are
    encoded once by its VAE and conditioned on their caption's row (:func:`latent_records`)."""
    external_config(preset, 0, sets, dataset)  # an unknown preset or a bad --set, before loading anything
    check_range_name(records_range)
    if dataset:
        DATASETS.get(dataset)
    if caption is not None:
        check_template(caption)
    tgt, prov = load_external(model_path, arch=arch, scheduler_config=scheduler_config, use_ema=use_ema,
                              device=device, name=target_name, lora=lora)
    text = tgt.capabilities.text_conditioned
    if caption is not None and not text:
        raise BadInput(f"--caption {caption!r}: the model is not text-conditional")
    mem, non = load_member_sets(members_spec, nonmembers_spec, tgt.capabilities.record_shape,
                                dataset=dataset, data_root=data_root, split=split, records_range=records_range)
    # the overlap check (on the 8-bit grid) runs before the encoding check: a re-encoded copy is reported as shared
    if not text:
        records, captions, pixels = build_external_records(mem, non, tgt.num_classes), None, None
    else:
        records, captions, pixels = latent_records(tgt, mem, non, caption)
    used = {"requested": records_range, **check_same_encoding(mem.provenance, non.provenance)}
    shift = _split_check(mem, non)
    return ExternalTarget(tgt, prov, mem, non, records, target_name, preset, tuple(sets or ()), dataset, claim=claim,
                          records_range=used, split_check=shift, captions=captions, pixels=pixels)


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


def cached_external(run_dir: Path, *, say: bool = True) -> AttackResult | None:
    """The finished result of an external run directory, or None (not finished, unreadable, or its scores.npz
    missing or changed: :func:`privbench.runs.attack.cached_result`)."""
    return cached_result(Path(run_dir), Path(run_dir), say=say)


def run_external(ext: ExternalTarget, attack: str, seed: int = 0, *, runs_dir=None, strict: bool = True) -> dict:
    """Run ``attack`` on a loaded external target and write ``<runs_dir>/external-<hash>/`` (an equal request
    reuses the finished run); returns result.json's dict."""
    cfg, att, run_dir = ext.plan(attack, seed, runs_dir=runs_dir, strict=strict)
    cached = cached_external(run_dir)
    if cached is not None:
        LOG.info(f"privbench: attack cache hit: {run_dir}")
        return cached.to_json()
    records = ext.records
    provenance = Provenance(model={k: v for k, v in ext.prov.items() if k != "weights_note"},
                            members=ext.mem.provenance, nonmembers=ext.non.provenance,
                            records_sha256=records_sha256(records.x, records.y, records.labels, records.index),
                            captions_sha256=None if ext.captions is None else captions_sha256(ext.captions))
    fresh = not run_dir.exists()
    try:
        with run_lock(run_dir, "attack"):
            cached = cached_external(run_dir, say=False)
            if cached is not None:
                return cached.to_json()
            result = _attack_and_write(ext, cfg, att, run_dir, provenance, runs_dir)
    except BadInput:  # bad input found by the attack itself: leave no directory, lock or provenance behind
        if fresh:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return result


def _attack_and_write(ext: ExternalTarget, cfg: Config, att, run_dir: Path, provenance: Provenance,
                      runs_dir) -> dict:
    tgt, records = ext.tgt, ext.records
    train = ext.pixels if ext.pixels is not None else records  # memorization compares pixels
    env = AttackEnv(cfg=cfg, method=None, out_dir=run_dir, seed=cfg.seed,
                    train_data=(train.x[train.labels == 1], train.y[train.labels == 1]),
                    train_index=records.index[records.labels == 1].tolist())
    ref_note = None
    if att.needs_references:
        env.references, provenance.references = build_external_references(
            ext, ext.references["recipe"], ext.references["data"], n=int(att.n_reference), seed=cfg.seed,
            runs_dir=runs_dir, device=tgt.device, dataset=ext.references.get("dataset"),
            data_root=ext.references.get("data_root"))
        ref_note = provenance.references["note"]
    t0 = time.time()
    out = att.run(tgt, records, env)
    if tgt.device.type == "cuda":
        torch.cuda.synchronize(tgt.device)
    timing = {"train_s": None, "attack_s": round(time.time() - t0, 3), "device": str(tgt.device)}
    atomic_write_json(run_dir / "provenance.json", provenance.to_json())  # only once the attack ran
    result = assemble_result(cfg, att, _NoMethod(ext.claim), ext.name, records, out, run_dir, run_dir, timing)
    result.notes = _notes(ext.prov, ext.mem, ext.non, ext.claim) + ([ref_note] if ref_note else []) + result.notes
    result.provenance = provenance
    result.records_range = ext.records_range
    result.split_check = ext.split_check
    if ext.split_check and flagged(ext.split_check):
        result.warnings = result.warnings + [ext.split_check["verdict"]]
    # again, now with the provenance (marks the run complete)
    atomic_write_json(run_dir / "result.json", result.to_json())
    return result.to_json()


def attack_external(model_path, members_spec, nonmembers_spec, attack: str, *, runs_dir=None,
                    preset: str = "tiny", seed: int = 0, sets=(), device="auto", arch: str | None = None,
                    scheduler_config=None, use_ema: bool = True, dataset: str | None = None, data_root=None,
                    split=None, target_name: str = "model", strict: bool = True, claim: dict | None = None,
                    records_range: str = "auto", lora=None, caption: str | None = None, reference_recipe=None,
                    reference_data=None) -> dict:
    """Run ``attack`` on an external model and write ``<runs_dir>/external-<hash>/``; returns result.json's dict.

    ``strict``: an ``attack.*`` setting the attack does not use is refused (a bench passes suite-wide settings
    with ``strict=False``). ``claim``: the user's privacy claim (:func:`privbench.privacy.claims.user_claim`), written
    as the result's ``privacy`` object; audit compares the empirical bounds with it."""
    external_config(preset, seed, sets, dataset)  # a bad seed, before loading anything
    name, values = split_label(attack)             # a label: name or name@variant (secmi@paper)
    ATTACKS.get(name).factory.variant_overrides(values)  # an unknown attack or variant, too
    ext = load_external_target(model_path, members_spec, nonmembers_spec, preset=preset, sets=sets, device=device,
                               arch=arch, scheduler_config=scheduler_config, use_ema=use_ema, dataset=dataset,
                               data_root=data_root, split=split, target_name=target_name, claim=claim,
                               records_range=records_range, lora=lora, caption=caption)
    ext.references = external_reference_inputs(reference_recipe, reference_data, ext.records, dataset=dataset,
                                               data_root=data_root)
    return run_external(ext, attack, seed, runs_dir=runs_dir, strict=strict)


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
    would write as result.json (nothing is written: ``run_dir``, ``scores_path`` and ``attack_hash`` are null), with
    ``scores`` (higher = member; members first; None for an attack that scores no membership) and ``labels``
    (1 = member). ``attack``, ``metrics`` (AUC, ASR, TPR@FPR with CIs, or the attack's own figures), ``calibrated``,
    ``sweep`` (oracle), ``figures``, ``notes`` and ``warnings`` read the result's fields."""
    result: AttackResult
    scores: np.ndarray | None
    labels: np.ndarray

    # the attributes privbench.attack's object had before it carried a result: the result's fields, not copies
    @property
    def attack(self) -> str:
        return self.result.attack

    @property
    def metrics(self) -> dict:
        """The result's metrics, with each TPR at an FPR the non-member count cannot resolve (FPR < 1/n) as None,
        and its CI too, as every table, report and gate shows it (n/a; the reason: :attr:`unresolved`);
        ``result.metrics`` keeps the computed numbers."""
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
    x = torch.as_tensor(obj).float()
    if x.dim() != 4:
        raise BadInput(f"{what}: expected images N×C×H×W in [-1, 1] (or (images, labels), or a SPEC path), "
                       f"got shape {tuple(x.shape)}")
    if float(x.min()) < -1 - 1e-4 or float(x.max()) > 1 + 1e-4:
        raise BadInput(f"{what}: images must lie in [-1, 1]")
    prov = {"spec": "in memory", "n": int(len(x)), "source_shape": list(x.shape[1:]), "range": "-1:1",
            "encoding": "float", "range_basis": "in-memory tensors must be in [-1, 1]"}
    x = fit_to_model(x.cpu().contiguous(), image_shape, what, prov)
    if y is not None:
        y = torch.as_tensor(y).long().view(-1)
        if len(y) != len(x):
            raise BadInput(f"{what}: {len(y)} labels for {len(x)} images")
    return RecordSet(x, y, None, prov)


def attack_in_memory(target, members, nonmembers, attack: str, *, seed: int = 0, **settings) -> InMemoryResult:
    """``privbench.attack``: run a registered attack on a Target (anything ``privbench.wrap`` accepts, or a model
    folder for :func:`~privbench.models.external.load_external`) with
    members / non-members given as tensors, (images, labels) pairs or SPEC paths; ``settings`` are attack
    settings (``t=100``, ``p=2``, ``bootstrap=200``, ``batch_size=64`` ...). Writes nothing."""
    tgt = load_external(target)[0] if isinstance(target, (str, Path)) else wrap(target)
    if tgt.capabilities.text_conditioned:
        raise BadInput("privbench.attack: text-to-image pipelines need captions with the records; use "
                       "privbench.runs.external.attack_external (privbench attack --model) for them")
    cfg = external_config("tiny", seed)
    for k, v in settings.items():
        set_key(cfg, k if "." in k else f"attack.{k}", v)
    att = _check_attack(cfg, attack, tgt)
    shape = tgt.meta.get("shape")
    mem = _in_memory_set(members, shape, "members")
    non = _in_memory_set(nonmembers, shape, "nonmembers")
    records = build_external_records(mem, non, tgt.num_classes)
    env = AttackEnv(cfg=cfg, method=None, out_dir=None, seed=cfg.seed,
                    train_data=(records.x[records.labels == 1], records.y[records.labels == 1]))
    t0 = time.time()
    out = att.run(tgt, records, env)
    if tgt.device.type == "cuda":
        torch.cuda.synchronize(tgt.device)
    timing = {"train_s": None, "attack_s": round(time.time() - t0, 3), "device": str(tgt.device)}
    result = new_result(cfg, att, tgt.name, records, out, privacy=None, timing=timing)
    scores = np.asarray(out.scores, dtype=np.float64) if att.kind == MEMBERSHIP else None
    return InMemoryResult(result, scores, records.labels.numpy().astype(np.int64))
