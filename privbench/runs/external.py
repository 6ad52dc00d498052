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

import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..attacks.base import MEMBERSHIP, RECONSTRUCTION, AttackEnv, Records, split_label
from .attack import assemble_result, make_attack, membership_section
from ..core.config import Config, apply_preset, config_hash, parse_set_args, set_key
from ..data.records_io import dataset_records, fit_to_model, load_records, read_split, records_sha256, shared_count
from ..core.errors import BadInput
from ..core.registry import ATTACKS, PRESETS
from ..core.io import atomic_write_json
from .store import default_runs_dir, run_lock

#: bump when the numbers of an external run change for the same inputs (re-keys cached runs)
EXTERNAL_VERSION = 1
SETTING_SECTIONS = ("attack", "sample")


def external_config(preset: str = "tiny", seed: int = 0, sets=(), dataset: str | None = None) -> Config:
    """A Config holding only what an external run uses: the preset's attack/sample settings and ``--set``
    overrides of those two sections (the model's own sections come from the model, never from a preset)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise BadInput(f"--seed {seed!r}: expected a non-negative integer")
    PRESETS.get(preset)  # an unknown preset is bad input
    cfg = Config(method="external", dataset="external", preset=preset, seed=seed)
    apply_preset(cfg, preset)
    cfg.dataset = dataset or "external"
    pairs = [tuple(p) for p in sets or () if isinstance(p, (tuple, list))]  # (key, value) of a suite, or KEY=VALUE
    for k, v in pairs + parse_set_args([p for p in sets or () if not isinstance(p, (tuple, list))]):
        if k.split(".", 1)[0] not in SETTING_SECTIONS:
            raise BadInput(f"--set {k}: an external model takes only attack.* and sample.* settings (its "
                           f"architecture and schedule come from the model)")
        set_key(cfg, k, v)
    return cfg


def _schedule_into(cfg: Config, tgt) -> None:
    s = tgt.schedule
    d = cfg.diffusion
    d.num_timesteps, d.beta_start, d.beta_end = int(s.num_timesteps), float(s.beta_start), float(s.beta_end)
    d.beta_schedule = s.beta_schedule
    d.variance_type = s.variance_type


def _check_attack(cfg: Config, attack_name: str, tgt, *, strict: bool = True):
    _schedule_into(cfg, tgt)
    attack = make_attack(cfg, attack_name, strict=strict)
    if getattr(tgt, "text", None) is not None and not attack.text_conditioning:
        raise BadInput(f"attack {attack_name!r} does not support text-conditional targets (privbench list attacks "
                       f"shows which do)")
    if getattr(tgt, "text", None) is None and getattr(attack, "requires_text", False):
        raise BadInput(f"attack {attack_name!r} needs a text-to-image model (a Stable-Diffusion-layout pipeline); "
                       f"this model takes no captions")
    if attack.kind == RECONSTRUCTION:
        raise BadInput(f"attack {attack_name!r} reconstructs records from PFDM's noised uploads; an external model "
                       f"has none (use a membership attack or memorization)")
    if attack.needs_references:
        raise BadInput(f"attack {attack_name!r} trains reference models with the target's own training recipe; "
                       f"privbench cannot retrain an external model (use pia, secmi, loss, pian or memorization)")
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


def load_member_sets(members, nonmembers, image_shape, *, dataset=None, data_root=None, split=None
                     ) -> tuple[RecordSet, RecordSet]:
    """Members and non-members from SPECs or from a PIA/SecMI split file (indices into ``dataset``)."""
    if split is not None:
        if members is not None or nonmembers is not None:
            raise BadInput("--split gives both the members and the non-members; drop --members/--nonmembers")
        if not dataset:
            raise BadInput(f"--split {split}: needs --dataset (e.g. cifar10) and --data-root")
        mem_idx, non_idx = read_split(split)
        from ..data.base import load_dataset

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
    m = _as_set(*load_records(members, image_shape=image_shape, dataset=dataset, data_root=data_root))
    n = _as_set(*load_records(nonmembers, image_shape=image_shape, dataset=dataset, data_root=data_root))
    return m, n


def build_external_records(mem: RecordSet, non: RecordSet, num_classes: int | None) -> Records:
    """Members then non-members as :class:`Records`; refuses overlap and missing/out-of-range labels."""
    same_dataset = (mem.index is not None and non.index is not None
                    and mem.provenance.get("dataset") == non.provenance.get("dataset"))
    k = shared_count(mem.x, non.x, mem.index if same_dataset else None, non.index if same_dataset else None)
    if k:
        raise BadInput(f"members and non-members share {k} records (same pixels or same dataset index); a record "
                       f"cannot be both")
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
    """What the runner's writer asks of a Method: an external model carries no formal guarantee."""

    def privacy(self, target):
        return None


def run_hash(prov: dict, records: Records, attack, cfg: Config, target_name: str, captions=None) -> str:
    model = {k: prov.get(k) for k in ("weights_sha256", "format", "weights", "prediction_type", "num_classes",
                                      "sample_shape")}
    model["scheduler"] = {k: v for k, v in (prov.get("scheduler") or {}).items() if k != "source"}
    extra = {"captions": captions_sha256(captions)} if captions is not None else {}
    return config_hash({**extra, "version": EXTERNAL_VERSION, "model": model, "target": target_name,
                        "records": records_sha256(records.x, records.y, records.labels, records.index),
                        "attack": attack.hash_dict(cfg), "attack_settings": asdict(cfg.attack),
                        "sample": asdict(cfg.sample), "seed": cfg.seed, "dataset": cfg.dataset, "preset": cfg.preset})


def _notes(prov: dict, mem: RecordSet, non: RecordSet) -> list[str]:
    notes = [f"external model ({prov.get('format')}): {prov.get('weights')}; {prov.get('prediction_type')} "
             f"prediction ({prov.get('prediction_conversion')}); schedule: {prov['scheduler'].get('source')}"]
    for what, s in (("members", mem), ("non-members", non)):
        if s.provenance.get("resized") or s.provenance.get("resized_files"):
            how = s.provenance.get("resized") or f"{s.provenance.get('resized_files')} files"
            notes.append(f"{what} resized to the model's side ({how}); scores assume the model was trained on "
                         f"images resized the same way")
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
    captions: list[str] | None = None  # members' then non-members' captions (text-to-image targets)
    pixels: Records | None = None      # the records in pixel space (text-to-image targets; x is then latents)

    def plan(self, attack: str, seed: int = 0, *, runs_dir=None, strict: bool = True) -> tuple[Config, Any, Path]:
        """(config, attack, run directory) of ``attack`` at ``seed``: validates the attack's settings (``strict``:
        an ``attack.*`` key it does not use is refused) and names its run directory by :func:`run_hash`."""
        cfg = external_config(self.preset, seed, self.sets, self.dataset)
        att = _check_attack(cfg, attack, self.tgt, strict=strict)
        h = run_hash(self.prov, self.records, att, cfg, self.name, self.captions)
        return cfg, att, (Path(runs_dir) if runs_dir else default_runs_dir()) / f"external-{h}"


def load_external_target(model_path, members_spec, nonmembers_spec, *, preset: str = "tiny", sets=(),
                         device="auto", arch: str | None = None, scheduler_config=None, use_ema: bool = True,
                         dataset: str | None = None, data_root=None, split=None,
                         target_name: str = "model", lora=None, caption: str | None = None) -> ExternalTarget:
    """Load and check an external model and its records (everything that can be bad input, nothing written).

    A text-to-image target (:class:`~privbench.models.latent.LatentTarget`) takes records in pixel space with one
    caption each (given with the records, or ``caption`` — a template filled from their labels); they are
    encoded once by its VAE and conditioned on their caption's row (:func:`latent_records`)."""
    from ..models.external import load_external

    external_config(preset, 0, sets, dataset)  # an unknown preset or a bad --set, before loading anything
    if dataset:
        from ..core.registry import DATASETS

        DATASETS.get(dataset)
    if caption is not None:
        from ..data.captions import check_template

        check_template(caption)
    tgt, prov = load_external(model_path, arch=arch, scheduler_config=scheduler_config, use_ema=use_ema,
                              device=device, name=target_name, lora=lora)
    text = getattr(tgt, "text", None) is not None
    if caption is not None and not text:
        raise BadInput(f"--caption {caption!r}: the model is not text-conditional")
    mem, non = load_member_sets(members_spec, nonmembers_spec, tgt.pixel_shape if text else tgt.meta["shape"],
                                dataset=dataset, data_root=data_root, split=split)
    if not text:
        records = build_external_records(mem, non, tgt.num_classes)
        return ExternalTarget(tgt, prov, mem, non, records, target_name, preset, tuple(sets or ()), dataset)
    records, captions, pixels = latent_records(tgt, mem, non, caption)
    return ExternalTarget(tgt, prov, mem, non, records, target_name, preset, tuple(sets or ()), dataset, captions,
                          pixels)


def captions_sha256(captions) -> str:
    import hashlib

    h = hashlib.sha256()
    for c in captions:
        h.update(str(c).encode("utf-8") + b"\0")
    return h.hexdigest()


def latent_records(tgt, mem: RecordSet, non: RecordSet, caption: str | None) -> tuple[Records, list[str], Records]:
    """(latent records, captions, pixel records) of a text-to-image target: latents encoded once, each record's
    caption row as its ``y``; the target samples from the members' captions (memorization, in pixel space)."""
    from ..data.captions import template_captions

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


def cached_external(run_dir: Path, *, say: bool = True) -> dict | None:
    """The finished result of an external run directory, or None (not finished, unreadable, or its scores.npz
    missing or changed: :func:`privbench.runs.attack.cached_result`)."""
    from .attack import cached_result

    return cached_result(Path(run_dir), Path(run_dir), say=say)


def run_external(ext: ExternalTarget, attack: str, seed: int = 0, *, runs_dir=None, strict: bool = True) -> dict:
    """Run ``attack`` on a loaded external target and write ``<runs_dir>/external-<hash>/`` (an equal request
    reuses the finished run); returns result.json's dict."""
    cfg, att, run_dir = ext.plan(attack, seed, runs_dir=runs_dir, strict=strict)
    res_path = run_dir / "result.json"
    cached = cached_external(run_dir)
    if cached is not None:
        print(f"privbench: attack cache hit: {run_dir}", file=sys.stderr)
        return cached
    tgt, records = ext.tgt, ext.records
    provenance = {"model": {k: v for k, v in ext.prov.items() if k != "weights_note"},
                  "members": ext.mem.provenance, "nonmembers": ext.non.provenance,
                  "records_sha256": records_sha256(records.x, records.y, records.labels, records.index)}
    if ext.captions is not None:
        provenance["captions_sha256"] = captions_sha256(ext.captions)
    with run_lock(run_dir, "attack"):
        cached = cached_external(run_dir, say=False)
        if cached is not None:
            return cached
        atomic_write_json(run_dir / "provenance.json", provenance)
        train = ext.pixels if ext.pixels is not None else records  # memorization compares pixels
        env = AttackEnv(cfg=cfg, method=None, out_dir=run_dir, seed=cfg.seed,
                        train_data=(train.x[train.labels == 1], train.y[train.labels == 1]),
                        train_index=records.index[records.labels == 1].tolist())
        t0 = time.time()
        out = att.run(tgt, records, env)
        if tgt.device.type == "cuda":
            torch.cuda.synchronize(tgt.device)
        timing = {"train_s": None, "attack_s": round(time.time() - t0, 3), "device": str(tgt.device)}
        result = assemble_result(cfg, att, _NoMethod(), ext.name, tgt, records, out, run_dir, run_dir, timing)
        result["notes"] = _notes(ext.prov, ext.mem, ext.non) + list(result.get("notes") or [])
        result["provenance"] = provenance
        atomic_write_json(res_path, result)  # again, now with the provenance (its presence marks the run complete)
    return result


def attack_external(model_path, members_spec, nonmembers_spec, attack: str, *, runs_dir=None,
                    preset: str = "tiny", seed: int = 0, sets=(), device="auto", arch: str | None = None,
                    scheduler_config=None, use_ema: bool = True, dataset: str | None = None, data_root=None,
                    split=None, target_name: str = "model", strict: bool = True, lora=None,
                    caption: str | None = None) -> dict:
    """Run ``attack`` on an external model and write ``<runs_dir>/external-<hash>/``; returns result.json's dict.

    ``strict``: an ``attack.*`` setting the attack does not use is refused (a bench passes suite-wide settings
    with ``strict=False``)."""
    external_config(preset, seed, sets, dataset)  # a bad seed, before loading anything
    ATTACKS.get(split_label(attack)[0])            # an unknown attack, too (a label: clid@vec)
    ext = load_external_target(model_path, members_spec, nonmembers_spec, preset=preset, sets=sets, device=device,
                               arch=arch, scheduler_config=scheduler_config, use_ema=use_ema, dataset=dataset,
                               data_root=data_root, split=split, target_name=target_name, lora=lora,
                               caption=caption)
    return run_external(ext, attack, seed, runs_dir=runs_dir, strict=strict)


# ---------------------------------------------------------------------- in memory (privbench.attack)

@dataclass
class InMemoryResult:
    """What ``privbench.attack`` returns: ``metrics`` (AUC, ASR, TPR@FPR with CIs, or the attack's own figures),
    ``scores`` (higher = member; members first) and ``labels`` (1 = member), plus the calibrated metrics, the
    oracle sweep, the attack's figures and notes."""
    attack: str
    metrics: dict
    scores: np.ndarray | None
    labels: np.ndarray
    calibrated: dict | None = None
    sweep: dict | None = None
    figures: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    def __repr__(self) -> str:
        m = self.metrics
        shown = {k: round(v, 4) for k, v in m.items() if isinstance(v, float)}
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
    prov = {"spec": "in memory", "n": int(len(x)), "source_shape": list(x.shape[1:])}
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
    from ..models.external import load_external, wrap

    tgt = load_external(target)[0] if isinstance(target, (str, Path)) else wrap(target)
    if getattr(tgt, "text", None) is not None:
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
    out = att.run(tgt, records, env)
    labels = records.labels.numpy().astype(np.int64)
    if att.kind != MEMBERSHIP:
        return InMemoryResult(att.name, dict(out.metrics), None, labels, figures=out.figures, notes=list(out.notes))
    scores = np.asarray(out.scores, dtype=np.float64)
    sec = membership_section(scores, labels, out.sweep, bootstrap=cfg.attack.bootstrap, seed=cfg.seed)
    return InMemoryResult(att.name, sec["metrics"], scores, labels, sec["calibrated"], sec["sweep"], out.figures,
                        list(out.notes), sec["warnings"])
