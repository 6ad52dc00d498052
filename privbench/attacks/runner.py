"""Run an attack on a (trained or newly trained) target and write its results (cli.md).

``run_attack`` validates everything that can be bad input (attack name, target name, timesteps, settings)
BEFORE anything is trained or written, trains the method if needed (cached by config hash), loads the target,
builds the records under test (members = ``ctx.split.members``, non-members = ``ctx.split.nonmembers``, in that
order, with their dataset index), runs the attack and writes under
``<run_dir>/attacks/<attack>-<target>-<hash of the attack's settings>/``:

* ``result.json`` — cli.md's keys (method, target, attack, dataset, preset, seed, run_dir, n_members,
  n_nonmembers, metrics, privacy, scores_path) plus kind, attack_config, attack_hash, calibrated, sweep, figures,
  warnings, notes, timing, artifacts;
* ``scores.npz`` — membership attacks: ``scores`` (higher = member), ``labels`` (1 = member), ``index`` (dataset
  order), aligned, plus ``y`` and one ``sweep_t<T>`` array per swept timestep; memorization/reconstruction: their
  own per-sample arrays (no ``labels``: they are not membership tests);
* ``roc.png`` (log-log, membership attacks), and the attack's image grids.

The latest result.json and scores.npz are also copied to the run directory's top level (cli.md: the run directory
holds them); the copy carries ``copy_of`` so tools that collect result.json files recursively can skip it.
An existing result with the same attack hash is reused.
"""
from __future__ import annotations

import fnmatch
import io
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import config_hash
from ..errors import BadInput
from ..registry import ATTACKS
from ..runs import atomic_path, atomic_write_json, atomic_write_text, run_dir_for, run_lock, safe_name
from .base import Attack, AttackEnv, AttackOutput, Records

ORACLE = "oracle (chosen on evaluation labels)"


# ---------------------------------------------------------------------- building blocks

def make_attack(cfg, attack_name: str) -> Attack:
    """The attack object for ``attack_name`` with the config's settings, validated (BadInput otherwise)."""
    entry = ATTACKS.get(attack_name)
    attack = entry.factory(cfg.attack)
    attack.validate(cfg.diffusion.num_timesteps, cfg)
    return attack


def build_records(method, target_name: str | None = None) -> Records:
    """Members (``ctx.split.members``) then non-members (``ctx.split.nonmembers``), ordered, with dataset index.

    A method whose targets were trained on a part of the members only (e.g. one client's model) may define
    ``attack_split(target_name) -> (member indices, non-member indices)``; it is used when present."""
    ctx = method.ctx
    hook = getattr(method, "attack_split", None)
    if callable(hook) and target_name is not None:
        mem, non = (list(v) for v in hook(target_name))
    else:
        mem, non = list(ctx.split.members), list(ctx.split.nonmembers)
    idx = torch.as_tensor(mem + non, dtype=torch.long)
    x, y = ctx.records(idx.tolist())
    labels = torch.cat([torch.ones(len(mem), dtype=torch.long), torch.zeros(len(non), dtype=torch.long)])
    return Records(x, y.long(), labels, idx)


# Bumped when the records an attack is evaluated on change for the same settings (cached results re-run).
# 2: a client's model (client:K, pipeline:K) is attacked on that client's records vs class-matched non-members.
# 3: ... and memorization compares its samples with that client's records (the model's training set).
RECORDS_VERSION = 3


def attack_hash(attack: Attack, cfg, target_name: str) -> str:
    return config_hash({"target": target_name, "records": RECORDS_VERSION, **attack.hash_dict(cfg)})


def attack_dir(run_dir: Path, attack: Attack, cfg, target_name: str) -> Path:
    return Path(run_dir) / "attacks" / f"{attack.name}-{safe_name(target_name)}-{attack_hash(attack, cfg, target_name)}"


def _load_cached(path: Path) -> dict | None:
    try:
        res = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return res if isinstance(res, dict) and "metrics" in res else None


# ---------------------------------------------------------------------- metrics

def membership_section(scores: np.ndarray, labels: np.ndarray, sweep: dict[int, np.ndarray], *, bootstrap: int,
                       seed: int) -> dict[str, Any]:
    """metrics (+ci95), calibrated, sweep (oracle), warnings for one membership attack's scores."""
    from ..metrics.roc import calibrated_metrics, membership_metrics

    m = membership_metrics(scores, labels, bootstrap=bootstrap, seed=seed)
    warnings = list(m.pop("warnings", []))
    cal = calibrated_metrics(scores, labels, seed=seed)
    warnings += [f"calibrated: {w}" for w in cal.get("warnings", [])]
    out: dict[str, Any] = {"metrics": m, "calibrated": cal, "warnings": warnings, "sweep": None}
    if sweep:
        rows = []
        for t, s in sweep.items():
            mt = membership_metrics(s, labels, bootstrap=0, seed=seed)
            mt.pop("warnings", None)
            mt.pop("ci95", None)
            rows.append({"t": int(t), **mt})
        best = max(rows, key=lambda r: (r["auc"], r["tpr_at_1pct_fpr"]))
        bm = membership_metrics(sweep[best["t"]], labels, bootstrap=bootstrap, seed=seed)
        bm.pop("warnings", None)
        out["sweep"] = {
            "per_t": rows,
            "best": {"t": best["t"], "selection": ORACLE, "criterion": "max AUC", "metrics": bm},
            "note": "every t's metrics use thresholds and t chosen on the evaluation labels; the fixed-t result in "
                    "'metrics' is the one to report",
        }
    return out


# ---------------------------------------------------------------------- the runner

def run_attack(cfg, attack_name: str, target: str | None = None, runs_dir=None, device="auto") -> dict:
    """Validate, train if needed, attack, write the results; returns the result dict (cli.md schema)."""
    from .. import api

    attack = make_attack(cfg, attack_name)                 # unknown attack / bad settings → BadInput
    run_dir = run_dir_for(cfg, runs_dir)
    method = api.make_method(cfg, run_dir, device)
    target_name = method.check_target(target)              # unknown target → BadInput
    if attack.applies_to is not None and not any(fnmatch.fnmatchcase(target_name, p) for p in attack.applies_to):
        raise BadInput(f"attack {attack.name} does not apply to target {target_name!r} "
                       f"(it applies to: {', '.join(attack.applies_to)})")
    if attack.needs_references:                            # a pool the dataset cannot give → BadInput
        from ..reference_models import check_pool

        check_pool(cfg, method, attack.reference_pool, _population_size(attack))
    out_dir = attack_dir(run_dir, attack, cfg, target_name)
    res_path = out_dir / "result.json"
    if res_path.exists() and (run_dir / "train_done.json").exists():
        cached = _load_cached(res_path)
        if cached is not None:
            print(f"privbench: attack cache hit: {out_dir}", file=sys.stderr)
            _publish(run_dir, out_dir, cached)
            return cached

    t_train = time.time()
    trained_before = (run_dir / "train_done.json").exists()
    method = api.train(cfg, runs_dir, device)
    train_s = None if trained_before else round(time.time() - t_train, 1)

    with run_lock(out_dir, "attack"):
        if res_path.exists():
            cached = _load_cached(res_path)
            if cached is not None:
                _publish(run_dir, out_dir, cached)
                return cached
        tgt = method.load_target(target_name)
        records = build_records(method, target_name)
        env = AttackEnv(cfg=cfg, method=method, out_dir=out_dir, seed=cfg.seed)
        if callable(getattr(method, "attack_split", None)):
            # a model trained on part of the members (a client's): its own records are what it can memorize
            mem = records.index[records.labels == 1].tolist()
            env.train_data, env.train_index = method.ctx.records(mem), mem
        refs_s = None
        if attack.needs_references:
            from ..reference_models import build_references

            t_ref = time.time()
            env.references = build_references(cfg, method, target_name, records, n=int(attack.n_reference),
                                               mode=attack.reference_pool, n_population=_population_size(attack),
                                               device=tgt.device)
            refs_s = round(time.time() - t_ref, 1)
        t0 = time.time()
        out = attack.run(tgt, records, env)
        if tgt.device.type == "cuda":
            torch.cuda.synchronize(tgt.device)
        attack_s = time.time() - t0
        result = _assemble(cfg, attack, method, target_name, tgt, records, out, out_dir, run_dir,
                           timing={"train_s": train_s, "references_s": refs_s, "attack_s": round(attack_s, 3),
                                   "device": str(tgt.device)})
        method.ctx.log(f"[attack] {attack.name} on {target_name}: {_one_line(result)}")
    _publish(run_dir, out_dir, result)
    return result


def _population_size(attack: Attack) -> int:
    """Population records (outside the split and the pool) the attack needs: RMIA's z."""
    return int(attack.rmia_population) if "rmia_population" in attack.config_fields else 0


def _assemble(cfg, attack: Attack, method, target_name, tgt, records: Records, out: AttackOutput, out_dir: Path,
              run_dir: Path, timing: dict) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    n = len(records)
    if out.nfe_per_record is not None and attack.kind == "membership":
        timing["nfe_per_record"] = out.nfe_per_record
        timing["records_per_s"] = round(n / max(timing["attack_s"], 1e-9), 1)
    try:
        privacy = method.privacy(target_name)
    except NotImplementedError:
        privacy = None
    result: dict[str, Any] = {
        "method": cfg.method, "target": target_name, "attack": attack.name, "dataset": cfg.dataset,
        "preset": cfg.preset, "seed": cfg.seed, "run_dir": str(run_dir),
        "n_members": records.n_members, "n_nonmembers": records.n_nonmembers,
        "metrics": {}, "privacy": privacy, "scores_path": str(out_dir / "scores.npz"),
        "kind": attack.kind, "threat_model": attack.threat(),
        "attack_config": attack.describe(), "attack_hash": out_dir.name.rsplit("-", 1)[-1],
        "calibrated": None, "sweep": None, "figures": out.figures, "warnings": [], "notes": list(out.notes),
        "timing": timing, "artifacts": {},
    }
    arrays: dict[str, np.ndarray] = {}
    if attack.kind == "membership":
        scores = np.asarray(out.scores, dtype=np.float64)
        labels = records.labels.numpy().astype(np.int64)
        sec = membership_section(scores, labels, out.sweep, bootstrap=cfg.attack.bootstrap, seed=cfg.seed)
        result.update(metrics=sec["metrics"], calibrated=sec["calibrated"], sweep=sec["sweep"],
                      warnings=sec["warnings"])
        ci_auc = (sec["metrics"].get("ci95") or {}).get("auc")
        if ci_auc and ci_auc[1] < 0.5 and sec["calibrated"]["direction"] < 0:
            result["notes"].append("the score ranks non-members above members; only the calibrated direction "
                                   "(-1) may claim leakage with the sign flipped")
        arrays = {"scores": scores, "labels": labels, "index": records.index.numpy().astype(np.int64),
                  "y": records.y.numpy().astype(np.int64)}
        for t, s in out.sweep.items():
            arrays[f"sweep_t{int(t)}"] = np.asarray(s, dtype=np.float64)
        for k, v in out.arrays.items():  # attack-specific aligned arrays (e.g. the raw statistic)
            arrays.setdefault(k, np.asarray(v))
        from ..metrics.plots import plot_roc

        fixed = out.figures.get("t", out.figures.get("t_sec"))
        curves = {f"{attack.name}{'' if fixed is None else f' t={fixed}'} (fixed)": (scores, labels)}
        if sec["sweep"]:
            bt = sec["sweep"]["best"]["t"]
            curves[f"{attack.name} t={bt} (oracle best)"] = (np.asarray(out.sweep[bt]), labels)
        roc = plot_roc(curves, out_dir / "roc.png",
                       title=f"{attack.name} on {cfg.method}/{target_name} ({cfg.dataset})")
        result["artifacts"]["roc"] = str(roc)
    else:
        result["metrics"] = dict(out.metrics)
        arrays = {k: np.asarray(v) for k, v in out.arrays.items()}
    if out.images:
        from ..metrics.plots import plot_image_grid

        for name, (images, labels_, nrow) in out.images.items():
            p = plot_image_grid(images, out_dir / f"{name}.png", nrow=nrow, labels=labels_)
            result["artifacts"][name] = str(p)
    with atomic_path(out_dir / "scores.npz") as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
    atomic_write_json(out_dir / "result.json", result)  # written last: marks the attack complete
    return result


def _publish(run_dir: Path, out_dir: Path, result: dict) -> None:
    """Copy the latest result.json / scores.npz to the run directory's top level."""
    try:
        src = out_dir / "scores.npz"
        if src.exists():
            with atomic_path(run_dir / "scores.npz") as tmp:
                shutil.copyfile(src, tmp)
        top = dict(result)
        top["copy_of"] = str(out_dir / "result.json")
        top["scores_path"] = str(run_dir / "scores.npz")
        atomic_write_json(run_dir / "result.json", top)
    except OSError as e:  # a read-only run store must not lose the attack's own result
        print(f"privbench: could not update {run_dir}/result.json: {e}", file=sys.stderr)


# ---------------------------------------------------------------------- run = attack + report

def run_job(cfg, attack_name: str, target: str | None = None, runs_dir=None, device="auto") -> dict:
    """``privbench run``: run_attack, then a short per-run report (report.md; the HTML report if available)."""
    result = run_attack(cfg, attack_name, target, runs_dir=runs_dir, device=device)
    run_dir = Path(result["run_dir"])
    out_dir = Path(result["scores_path"]).parent
    text = report_markdown(result)
    paths = {}
    for d in (out_dir, run_dir):
        try:
            atomic_write_text(d / "report.md", text)
            paths.setdefault("markdown", str(d / "report.md"))
        except OSError:
            pass
    try:  # the full HTML/CSV report, when privbench.reports provides it
        from ..reports import render_report  # type: ignore[attr-defined]
    except ImportError:
        render_report = None
    if render_report is not None:
        try:
            produced = render_report(str(run_dir), str(run_dir / "report"), ["html", "csv"])
            paths["rendered"] = [str(p) for p in (produced or [])]
        except Exception as e:  # noqa: BLE001 — the report is a convenience; the attack result stands
            paths["rendered_error"] = f"{type(e).__name__}: {e}"
    result = dict(result)
    result["report"] = paths
    return result


def report_markdown(result: dict) -> str:
    r = result
    lines = [f"# {r['attack']} on {r['method']}/{r['target']} ({r['dataset']}, preset {r['preset']}, seed {r['seed']})",
             "", f"Run directory: `{r['run_dir']}`  ", f"Scores: `{r['scores_path']}`", ""]
    lines += ["```", format_table([r], detailed=True), "```", ""]
    if r.get("privacy"):
        p = r["privacy"]
        lines.append(f"Formal guarantee: epsilon = {p.get('epsilon')} at delta = {p.get('delta')} ({p.get('basis')}).")
    else:
        lines.append("Formal guarantee: none (non-private target).")
    lines.append("")
    lines.append("Convention: members are the positive class; a higher score means more likely a member. "
                 "ASR and TPR@FPR pick thresholds on the evaluation labels (oracle); the calibrated figures pick "
                 "direction and thresholds on one half and report the other.")
    for k, v in (r.get("artifacts") or {}).items():
        lines.append(f"- {k}: `{v}`")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- table

def _f(v, nd=3) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def _ci(ci) -> str:
    return "" if not ci else f" [{ci[0]:.2f},{ci[1]:.2f}]"


def _eps(r: dict) -> str:
    p = r.get("privacy")
    if not p or p.get("epsilon") is None:
        return "-"
    return f"{p['epsilon']:.3g}"


def _one_line(r: dict) -> str:
    m = r.get("metrics") or {}
    if r.get("kind", "membership") == "membership":
        return (f"AUC {_f(m.get('auc'))}{_ci((m.get('ci95') or {}).get('auc'))} ASR {_f(m.get('asr'))} "
                f"TPR@1% {_f(m.get('tpr_at_1pct_fpr'))} TPR@0.1% {_f(m.get('tpr_at_0_1pct_fpr'))}")
    if r.get("kind") == "memorization":
        return f"memorized {_f(m.get('memorized_fraction'))} of {m.get('n_generated')} samples"
    return (f"best {m.get('best_attacker')}: re-id {_f(m.get('reid_rate'))} (chance {_f(m.get('reid_chance'), 4)}) "
            f"PSNR {_f(m.get('psnr'), 2)} dB SSIM {_f(m.get('ssim'))}")


def format_table(results: list[dict], detailed: bool = False) -> str:
    """One screen: target, attack, AUC [CI], ASR, TPR@1% [CI], TPR@0.1%, calibrated AUC/direction, ε; warnings.
    Memorization and reconstruction show their own figures. ``detailed`` adds sweeps, calibration, notes."""
    out = io.StringIO()
    mem = [r for r in results if r.get("kind", "membership") == "membership"]
    other = [r for r in results if r.get("kind", "membership") != "membership"]
    if mem:
        hdr = (f"{'target':24s} {'attack':7s} {'AUC [95% CI]':19s} {'ASR':>5s}  {'TPR@1% [95% CI]':19s} "
               f"{'TPR@.1%':>7s}  {'calib AUC':>9s}  {'epsilon':>7s}")
        out.write(hdr + "\n" + "-" * len(hdr) + "\n")
        for r in mem:
            m = r["metrics"]
            ci = m.get("ci95") or {}
            cal = r.get("calibrated") or {}
            cal_s = f"{_f(cal.get('auc'), 2)}({'+' if cal.get('direction', 1) > 0 else '-'})" if cal else "-"
            out.write(f"{(r['method'] + '/' + r['target'])[:24]:24s} {r['attack']:7s} "
                      f"{_f(m['auc']) + _ci(ci.get('auc')):19s} {_f(m['asr'], 2):>5s}  "
                      f"{_f(m['tpr_at_1pct_fpr']) + _ci(ci.get('tpr_at_1pct_fpr')):19s} "
                      f"{_f(m['tpr_at_0_1pct_fpr']):>7s}  {cal_s:>9s}  {_eps(r):>7s}\n")
    for r in other:
        out.write(f"{(r['method'] + '/' + r['target'])[:24]:24s} {r['attack']:14s} {_one_line(r)}"
                  f"   epsilon {_eps(r)}\n")
    for r in results:
        p = r.get("privacy")
        if p and p.get("basis"):
            out.write(f"  epsilon of {r['method']}/{r['target']}: {_eps(r)} at delta {p.get('delta')} "
                      f"({p['basis']})\n")
    for r in results:
        for w in r.get("warnings") or []:
            out.write(f"  ! {r['attack']}: {w}\n")
    if detailed:
        for r in results:
            out.write(_details(r))
    return out.getvalue().rstrip("\n")


def _details(r: dict) -> str:
    out = io.StringIO()
    out.write(f"\n{r['attack']} on {r['method']}/{r['target']} ({r['dataset']}, preset {r['preset']}, seed {r['seed']}): "
              f"{r['n_members']} members / {r['n_nonmembers']} non-members\n")
    cfg = r.get("attack_config") or {}
    if cfg:
        out.write("  settings: " + ", ".join(f"{k}={v}" for k, v in cfg.items()) + "\n")
    cal = r.get("calibrated")
    if cal:
        t1 = cal.get("tpr_at_1pct_fpr") or {}
        out.write(f"  calibrated (threshold and direction chosen on half the records, reported on the other half): "
                  f"AUC {_f(cal.get('auc'))}, direction {cal.get('direction'):+d}, balanced accuracy "
                  f"{_f(cal.get('accuracy'))}, TPR {_f(t1.get('tpr'))} at realised FPR {_f(t1.get('fpr'))} "
                  f"(target 1%)\n")
    sw = r.get("sweep")
    if sw:
        out.write(f"  timestep sweep — {ORACLE}:\n")
        out.write(f"    {'t':>5s} {'AUC':>6s} {'ASR':>6s} {'TPR@1%':>7s} {'TPR@.1%':>7s}\n")
        for row in sw["per_t"]:
            out.write(f"    {row['t']:5d} {row['auc']:6.3f} {row['asr']:6.3f} {row['tpr_at_1pct_fpr']:7.3f} "
                      f"{row['tpr_at_0_1pct_fpr']:7.3f}\n")
        b = sw["best"]
        out.write(f"    best t = {b['t']} ({b['selection']}): AUC {_f(b['metrics']['auc'])}"
                  f"{_ci((b['metrics'].get('ci95') or {}).get('auc'))}\n")
    fig = r.get("figures") or {}
    if r.get("kind") == "reconstruction" and fig.get("attackers"):
        out.write(f"  uploads: {fig.get('uploads')} at t0={fig.get('t0')}, C={fig.get('clip')}, sigma={fig.get('sigma'):.2f}; "
                  f"pool {fig.get('pool')}; chance {fig.get('reid_chance'):.4f} "
                  f"(same label: {fig.get('reid_chance_label'):.4f})\n")
        out.write(f"    {'attacker':18s} {'re-id':>6s} {'re-id|label':>11s} {'PSNR':>6s} {'SSIM':>6s} {'NFE':>5s}\n")
        for name, a in fig["attackers"].items():
            out.write(f"    {name:18s} {a['reid_rate']:6.3f} {a['reid_rate_label']:11.3f} {a['psnr']:6.2f} "
                      f"{a['ssim']:6.3f} {a['nfe']:5d}\n")
    if r.get("kind") == "memorization":
        out.write(f"  {fig.get('n_memorized')} of {r['metrics'].get('n_generated')} samples memorized "
                  f"({fig.get('threshold')}); {fig.get('n_unique_training_records')} unique training records\n")
    t = r.get("timing") or {}
    if t:
        out.write("  timing: " + ", ".join(f"{k}={v}" for k, v in t.items() if v is not None) + "\n")
    for n in r.get("notes") or []:
        out.write(f"  note: {n}\n")
    for k, v in (r.get("artifacts") or {}).items():
        out.write(f"  {k}: {v}\n")
    out.write(f"  result: {r.get('copy_of') or str(Path(r['scores_path']).parent / 'result.json')}\n")
    return out.getvalue()
