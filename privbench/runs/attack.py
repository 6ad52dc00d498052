"""Run an attack on a (trained or newly trained) target and write its results (docs/cli.md §5–§7).

The runner (:func:`execute`) serves every target: a source — :class:`NativeSource` here, an outside model's
:class:`~privbench.runs.external.OutsideSource` — names the folders and stages target, records, environment and
privacy claim; one list of refusals (:func:`refuse`), one attack step (:func:`attack_once`), one writer
(:func:`write_result`) and the cache check (:func:`cached_result`) follow.
"""
from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ..attacks.base import MEMBERSHIP, RECONSTRUCTION, Attack, AttackEnv, AttackOutput, Records, split_label
from ..core.config import config_hash
from ..core.errors import BadInput
from ..core.io import atomic_path, atomic_write_json, safe_name, sha256_file
from ..core.jsonio import MAX_RECORD_BYTES, read_json
from ..core.registry import ATTACKS
from ..metrics.plots import plot_image_grid, plot_roc
from ..metrics.roc import calibrated_metrics, membership_metrics
from .loaded import load_target, shared_targets
from .references import build_references, check_pool
from .result_schema import AttackResult, ThreatModel, Timing
from .store import done_digest, read_done, run_dir_for, run_lock, verified_done
from .train import ensure_trained, make_method

LOG = logging.getLogger(__name__)

ORACLE = "oracle (chosen on evaluation labels)"


# ---------------------------------------------------------------------- building blocks

def make_attack(cfg, attack_name: str, *, strict: bool = True) -> Attack:
    """The attack object for ``attack_name`` with the config's settings, validated (BadInput otherwise).
    ``strict``: an explicitly set ``attack.*`` key this attack does not use is refused."""
    name, values = split_label(attack_name)
    entry = ATTACKS.get(name)
    cls = entry.factory
    variant = cls.variant_overrides(values)  # lira@online: attack.reference_pool=online for this attack
    if strict:
        unused = sorted(k for k in getattr(cfg, "explicit", ()) if k.startswith("attack.")
                        and k.split(".", 1)[1] not in cls.setting_names())
        if unused:
            raise BadInput(f"{', '.join(unused)}: not a setting of attack {attack_name}; its settings are "
                           + ", ".join(f"attack.{n}" for n in cls.setting_names()))
    attack = cls.from_config(cfg.attack, **variant)
    attack.validate(cfg.diffusion.num_timesteps, cfg)
    return attack


def build_records(method, target_name: str | None = None) -> Records:
    """The target's members then non-members (``method.attack_split``; docs/conventions.md §5), with dataset index."""
    ctx = method.ctx
    mem, non = (list(v) for v in method.attack_split(method.check_target(target_name)))
    idx = torch.as_tensor(mem + non, dtype=torch.long)
    x, y = ctx.records(idx.tolist())
    labels = torch.cat([torch.ones(len(mem), dtype=torch.long), torch.zeros(len(non), dtype=torch.long)])
    return Records(x, y.long(), labels, idx)


# Bumped when the records an attack is evaluated on change for the same settings (cached results re-run).
RECORDS_VERSION = 3


def attack_hash(attack: Attack, cfg, target_name: str) -> str:
    return config_hash({"target": target_name, "records": RECORDS_VERSION, **attack.hash_dict(cfg),
                        **metrics_hash_dict(cfg)})


def metrics_hash_dict(cfg) -> dict:
    """The ``metrics.*`` settings off their defaults: they change the reported numbers, not the scores."""
    rule = getattr(getattr(cfg, "metrics", None), "tpr_rule", "le")
    return {"tpr_rule": rule} if rule != "le" else {}


#: shown with every result whose TPR@x used metrics.tpr_rule=lt
TPR_RULE_LT_NOTE = ("TPR@x is the largest TPR with FPR < x (metrics.tpr_rule=lt, as Carlini et al.'s LiRA code, "
                    "tensorflow/privacy research/mi_lira_2021), not privbench's default FPR <= x")


def attack_dir(run_dir: Path, attack: Attack, cfg, target_name: str) -> Path:
    return Path(run_dir) / "attacks" / f"{attack.name}-{safe_name(target_name)}-{attack_hash(attack, cfg, target_name)}"


def _load_cached(path: Path) -> AttackResult | str:
    """The stored result, or why it cannot be reused as one."""
    try:
        res = read_json(path, "result", MAX_RECORD_BYTES)
    except BadInput:
        return "result.json unreadable"
    try:
        return AttackResult.from_json(res)
    except BadInput as e:  # e.g. a newer privbench's version: re-run rather than misread it
        return f"result.json unreadable ({e})"


def cached_result(run_dir: Path, out_dir: Path, *, say: bool = True) -> AttackResult | None:
    """The stored result of ``out_dir`` when its ``trained_from`` matches the run's intact training artefacts and
    its files their ``sha256``; otherwise None, saying why on stderr when a result exists."""
    res_path = Path(out_dir) / "result.json"
    if not res_path.exists():
        return None
    # an outside model's run is its own attack folder and has no training artefacts
    external = Path(out_dir) == Path(run_dir)
    done = None if external else verified_done(Path(run_dir))
    if done is None and not external:
        return None  # training retrains first (and says why); the result is then checked against it
    res = _load_cached(res_path)
    why = None
    if isinstance(res, str):
        why = res
    elif external and res.provenance is None:
        why = "unfinished (no provenance)"
    elif res.trained_from != (None if external else done_digest(done)) or res.sha256 is None:
        why = "computed from other training artefacts (or before results recorded them)"
    else:
        for name, digest in res.sha256.items():
            p = Path(out_dir) / name
            if not p.is_file() or sha256_file(p) != digest:
                why = f"{name} missing or damaged"
                break
    if why is None:
        return res
    if say:
        LOG.warning(f"privbench: {out_dir}: {why}; re-running the attack")
    return None


# ---------------------------------------------------------------------- metrics

def membership_section(scores: np.ndarray, labels: np.ndarray, sweep: dict[int, np.ndarray], *, bootstrap: int,
                       seed: int, tpr_rule: str = "le") -> dict[str, Any]:
    """metrics (+ci95), calibrated, sweep (oracle), warnings for one membership attack's scores."""
    m = membership_metrics(scores, labels, bootstrap=bootstrap, seed=seed, tpr_rule=tpr_rule)
    warnings = list(m.pop("warnings", []))
    cal = calibrated_metrics(scores, labels, seed=seed, tpr_rule=tpr_rule)
    warnings += [f"calibrated: {w}" for w in cal.get("warnings", [])]
    out: dict[str, Any] = {"metrics": m, "calibrated": cal, "warnings": warnings, "sweep": None}
    if sweep:
        rows = []
        for t, s in sweep.items():
            mt = membership_metrics(s, labels, bootstrap=0, seed=seed, tpr_rule=tpr_rule)
            mt.pop("warnings", None)
            mt.pop("ci95", None)
            rows.append({"t": int(t), **mt})
        best = max(rows, key=lambda r: (r["auc"], r["tpr_at_1pct_fpr"]))
        bm = membership_metrics(sweep[best["t"]], labels, bootstrap=bootstrap, seed=seed, tpr_rule=tpr_rule)
        bm.pop("warnings", None)
        out["sweep"] = {
            "per_t": rows,
            "best": {"t": best["t"], "selection": ORACLE, "criterion": "max AUC", "metrics": bm},
            "note": "every t's metrics use thresholds and t chosen on the evaluation labels; the fixed-t result in "
                    "'metrics' is the one to report",
        }
    return out


# ---------------------------------------------------------------------- the runner

@dataclass
class Staged:
    """What a source hands the attack step: the loaded target (named ``name`` in results), the records under test,
    the attack's environment and the privacy the result reports; and for a written run ``timing`` so far, ``notes``
    (before the attack's), ``warnings`` (after), result ``fields`` and JSON ``files`` written beside result.json."""
    target: Any
    name: str
    records: Records
    env: AttackEnv
    privacy: dict | None = None
    timing: dict = field(default_factory=lambda: {"train_s": None})
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)
    files: dict[str, dict] = field(default_factory=dict)


def refuse(attack: Attack, source, capabilities=None) -> None:
    """BadInput when ``attack`` cannot run on ``source``'s target (``capabilities``: the loaded target's, if known)."""
    why = None
    if not source.outside and not attack.applies(source.name):
        why = f"does not apply to target {source.name!r} (it attacks: {', '.join(attack.applies_to)})"
    elif source.outside and attack.kind == RECONSTRUCTION:
        why = ("reconstructs records from PFDM's noised uploads; an external model has none (use a membership "
               "attack or memorization)")
    if why is None and capabilities is not None:  # what the target cannot do first: references would not help
        reason = attack.refusal(capabilities)
        why = f"{reason} (target {source.name!r})" if reason else None
    if why is None and attack.needs_references:
        why = source.reference_gap(attack)
    if why:
        raise BadInput(f"--attack {attack.label}: {why}")


@dataclass(frozen=True)
class NativeSource:
    """A privbench method's target: trained (or reused) in its run directory, attacked on the records of its split;
    each attack writes its own folder under ``attacks/`` and the latest result is copied to the run's top."""
    cfg: Any
    method: Any
    name: str
    run_dir: Path
    outside: ClassVar[bool] = False
    capabilities: ClassVar[None] = None  # known once the target is loaded (:meth:`stage`)

    @classmethod
    def of(cls, cfg, target: str | None = None, runs_dir=None, device="auto") -> NativeSource:
        run_dir = run_dir_for(cfg, runs_dir)
        method = make_method(cfg, run_dir, device)
        return cls(cfg, method, method.check_target(target), run_dir)

    def reference_gap(self, attack: Attack) -> str | None:
        if not self.method.reference_models:
            return f"trains reference models, which method {self.method.name} does not support (docs/methods.md)"
        check_pool(self.cfg, self.method, attack.reference_pool, attack.population_size())
        return None

    def out_dir(self, attack: Attack) -> Path:
        return attack_dir(self.run_dir, attack, self.cfg, self.name)

    def lock_name(self, out_dir: Path) -> str:
        return f"attack-{out_dir.name}"  # in the run directory: a refused attack leaves no folder behind

    def ready(self) -> dict:
        """Train the target if needed; the timing so far."""
        t0 = time.time()
        trained = ensure_trained(self.method)
        return {"train_s": round(time.time() - t0, 1) if trained else None}

    def stage(self, attack: Attack, out_dir: Path, timing: dict) -> Staged:
        method, cfg = self.method, self.cfg
        tgt = load_target(method, self.name)
        refuse(attack, self, tgt.capabilities)
        records = build_records(method, self.name)
        qx, qy = tgt.query_inputs(records.x, records.y)  # a latent target: latents and caption rows
        if qx is not records.x:
            records = Records(qx, qy, records.labels, records.index)
        env = AttackEnv(cfg=cfg, method=method, out_dir=out_dir, seed=cfg.seed)
        # the target's own training records (a client model's: its client's) are what it can memorize
        mem = records.index[records.labels == 1].tolist()
        env.train_data, env.train_index = method.ctx.records(mem), mem
        timing = {**timing, "references_s": None}
        if attack.needs_references:
            t_ref = time.time()
            env.references = build_references(cfg, method, self.name, records, n=int(attack.n_reference),
                                               mode=attack.reference_pool, n_population=attack.population_size(),
                                               device=tgt.device)
            timing["references_s"] = round(time.time() - t_ref, 1)
        try:
            privacy = method.privacy(self.name)
        except NotImplementedError:
            privacy = None
        return Staged(tgt, self.name, records, env, privacy, timing)

    def finish(self, out_dir: Path, result: AttackResult, fresh: bool) -> None:
        if fresh:
            self.method.ctx.log(f"[attack] {result.attack} on {self.name}: {result.summary()}")
        _publish(self.run_dir, out_dir, result)


def run_attack(cfg, attack_name: str, target: str | None = None, runs_dir=None, device="auto", *,
               strict: bool = True) -> AttackResult:
    """Validate, train if needed, attack, write the results; returns the result. ``strict``: :func:`make_attack`."""
    attack = make_attack(cfg, attack_name, strict=strict)
    return execute(attack, NativeSource.of(cfg, target, runs_dir, device))


def run_attacks(cfg, attack_names, target: str | None = None, runs_dir=None, device="auto") -> list[AttackResult]:
    """:func:`run_attack` for each of ``attack_names`` on one target, in order, its models loaded once
    (``--attack a,b,c``); ``strict`` only for a single attack (``attack.*`` settings of the others apply where
    they fit)."""
    with shared_targets():
        return [run_attack(cfg, a, target, runs_dir=runs_dir, device=device, strict=len(attack_names) == 1)
                for a in attack_names]


def execute(attack: Attack, source) -> AttackResult:
    """Run ``attack`` on the target ``source`` gives and write its result; an intact earlier result of the same
    request is reused. Bad input is refused before anything is trained or written."""
    refuse(attack, source, source.capabilities)
    out_dir = source.out_dir(attack)
    cached = cached_result(source.run_dir, out_dir)
    if cached is not None:
        LOG.info(f"privbench: attack cache hit: {out_dir}")
        source.finish(out_dir, cached, False)
        return cached
    timing = source.ready()
    created, held = not out_dir.exists(), False
    try:
        with run_lock(source.run_dir, "attack", lock_name=source.lock_name(out_dir)):
            held = True  # from here the folder is this process's to remove (not while another one writes it)
            result = cached_result(source.run_dir, out_dir, say=False)  # another process finished it meanwhile
            fresh = result is None
            if fresh:
                staged = source.stage(attack, out_dir, timing)
                result = attack_once(source.cfg, attack, staged, out_dir=out_dir, run_dir=source.run_dir)[0]
    except BaseException:
        if held and created and out_dir.is_dir() and not (out_dir / "result.json").exists():
            shutil.rmtree(out_dir, ignore_errors=True)  # no half-written attack folder
        raise
    source.finish(out_dir, result, fresh)
    return result


def attack_once(cfg, attack: Attack, staged: Staged, *, out_dir: Path | None = None,
                run_dir: Path | None = None) -> tuple[AttackResult, AttackOutput]:
    """The attack step: run ``attack`` on the staged target and records, timed (synchronised with the GPU), then
    write its folder (:func:`write_result`), or with no ``out_dir`` only build the result (``privbench.attack``)."""
    tgt = staged.target
    t0 = time.time()
    out = attack.run(tgt, staged.records, staged.env)
    if tgt.device.type == "cuda":
        torch.cuda.synchronize(tgt.device)
    timing = {**staged.timing, "attack_s": round(time.time() - t0, 3), "device": str(tgt.device)}
    if out_dir is None:
        return new_result(cfg, attack, staged.name, staged.records, out, privacy=staged.privacy, timing=timing), out
    return write_result(cfg, attack, staged, out, out_dir, run_dir, timing), out


def new_result(cfg, attack: Attack, target_name: str, records: Records, out: AttackOutput, *, privacy, timing: dict,
               run_dir: Path | None = None, scores_path: str | None = None,
               attack_hash: str | None = None) -> AttackResult:
    """The typed result of one attack's output, its scores summarised: what :func:`write_result` completes and
    writes, and what ``privbench.attack`` returns in memory."""
    if out.nfe_per_record is not None and attack.kind == MEMBERSHIP:
        timing["nfe_per_record"] = out.nfe_per_record
        timing["records_per_s"] = round(len(records) / max(timing["attack_s"], 1e-9), 1)
    threat = attack.threat()
    result = AttackResult(
        method=cfg.method, target=target_name, attack=attack.name, label=attack.label, dataset=cfg.dataset,
        preset=cfg.preset, seed=cfg.seed, run_dir=None if run_dir is None else str(run_dir),
        n_members=records.n_members, n_nonmembers=records.n_nonmembers, metrics={}, privacy=privacy,
        scores_path=scores_path, kind=attack.kind,
        threat_model=None if threat is None else ThreatModel.from_json(threat), attack_config=attack.describe(),
        attack_hash=attack_hash, figures=out.figures, notes=list(out.notes), timing=Timing.from_json(timing))
    if attack.kind != MEMBERSHIP:
        result.metrics = dict(out.metrics)
        return result
    sec = membership_section(np.asarray(out.scores, dtype=np.float64), records.labels.numpy().astype(np.int64),
                             out.sweep, bootstrap=cfg.attack.bootstrap, seed=cfg.seed, tpr_rule=cfg.metrics.tpr_rule)
    summarise(result, sec, cfg.metrics.tpr_rule)
    return result


def summarise(result: AttackResult, sec: dict[str, Any], rule: str) -> None:
    """A membership attack's :func:`membership_section` into ``result``, with the notes it calls for."""
    result.metrics, result.calibrated, result.sweep = sec["metrics"], sec["calibrated"], sec["sweep"]
    result.warnings = sec["warnings"]
    if rule != "le":  # absent at the default: results keep their shape
        result.tpr_rule = rule
        result.notes.append(TPR_RULE_LT_NOTE)
    ci_auc = (sec["metrics"].get("ci95") or {}).get("auc")
    if ci_auc and ci_auc[1] < 0.5 and sec["calibrated"]["direction"] < 0:
        result.notes.append("the score ranks non-members above members; only the calibrated direction "
                            "(-1) may claim leakage with the sign flipped")


def write_result(cfg, attack: Attack, staged: Staged, out: AttackOutput, out_dir: Path, run_dir: Path,
                 timing: dict) -> AttackResult:
    """The one writer of a run's attack: ``out_dir``'s scores.npz, figures, the source's files and result.json
    (last: it marks the attack complete); returns the result."""
    out_dir.mkdir(parents=True, exist_ok=True)
    records, target_name = staged.records, staged.name
    result = new_result(cfg, attack, target_name, records, out, privacy=staged.privacy, timing=timing,
                        run_dir=run_dir, scores_path=str(out_dir / "scores.npz"),
                        attack_hash=out_dir.name.rsplit("-", 1)[-1])
    if attack.kind == MEMBERSHIP:
        arrays = _membership_arrays(result, cfg, attack, target_name, records, out, out_dir)
    else:
        arrays = {k: np.asarray(v) for k, v in out.arrays.items()}
    if out.images:
        for name, (images, labels_, nrow) in out.images.items():
            p = plot_image_grid(images, out_dir / f"{name}.png", nrow=nrow, labels=labels_)
            result.artifacts[name] = str(p)
    with atomic_path(out_dir / "scores.npz") as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
    # what a cache hit checks: the scores' content, and the training artefacts the result was computed from
    result.sha256 = {"scores.npz": sha256_file(out_dir / "scores.npz")}
    done = read_done(run_dir)
    result.trained_from = done_digest(done) if done is not None else None
    result.notes = staged.notes + result.notes
    result.warnings = result.warnings + staged.warnings
    for k, v in staged.fields.items():
        setattr(result, k, v)
    for name, obj in staged.files.items():
        atomic_write_json(out_dir / name, obj)
    atomic_write_json(out_dir / "result.json", result.to_json())
    return result


def _membership_arrays(result: AttackResult, cfg, attack: Attack, target_name, records: Records, out: AttackOutput,
                       out_dir: Path) -> dict[str, np.ndarray]:
    """A membership attack's ROC into ``result`` (its metrics are there already); returns scores.npz's arrays."""
    scores = np.asarray(out.scores, dtype=np.float64)
    labels = records.labels.numpy().astype(np.int64)
    arrays = {"scores": scores, "labels": labels, "index": records.index.numpy().astype(np.int64),
              "y": records.y.numpy().astype(np.int64)}
    for t, s in out.sweep.items():
        arrays[f"sweep_t{int(t)}"] = np.asarray(s, dtype=np.float64)
    for k, v in out.arrays.items():  # attack-specific aligned arrays (e.g. the raw statistic)
        arrays.setdefault(k, np.asarray(v))
    fixed = out.figures.get("t", out.figures.get("t_sec"))
    curves = {f"{attack.name}{'' if fixed is None else f' t={fixed}'} (fixed)": (scores, labels)}
    if result.sweep:
        bt = result.sweep["best"]["t"]
        curves[f"{attack.name} t={bt} (oracle best)"] = (np.asarray(out.sweep[bt]), labels)
    roc = plot_roc(curves, out_dir / "roc.png",
                   title=f"{attack.name} on {cfg.method}/{target_name} ({cfg.dataset})")
    result.artifacts["roc"] = str(roc)
    return arrays


def _publish(run_dir: Path, out_dir: Path, result: AttackResult) -> None:
    """Copy the latest result.json / scores.npz to the run directory's top level."""
    try:
        src = out_dir / "scores.npz"
        if src.exists():
            with atomic_path(run_dir / "scores.npz") as tmp:
                shutil.copyfile(src, tmp)
        top = replace(result, copy_of=str(out_dir / "result.json"), scores_path=str(run_dir / "scores.npz"))
        atomic_write_json(run_dir / "result.json", top.to_json())
    except OSError as e:  # a read-only run store must not lose the attack's own result
        LOG.warning(f"privbench: could not update {run_dir}/result.json: {e}")
