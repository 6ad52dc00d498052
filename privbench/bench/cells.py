"""What each bench cell does: an attack, a sample grid, or the FID of a target (docs/benchmarks.md)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from ..core.errors import BadInput
from ..core.io import atomic_write_json, safe_name
from ..metrics.extractor import resolve_extractor
from ..metrics.fid import fid_with
from ..metrics.roc import FPR_OF, resolvable
from ..runs import train as api
from ..runs.attack import cached_result, run_attack
from ..runs.external import OutsideSpec, attack_external
from ..runs.utility import measure_utility
from .plan import Cell, fid_record_path


def summary(res: dict) -> dict:
    m = res.get("metrics") or {}
    keep = ("auc", "asr", "tpr_at_1pct_fpr", "tpr_at_0_1pct_fpr", "memorized_fraction", "n_generated", "reid_rate",
            "reid_chance", "psnr", "ssim")
    out = {k: m[k] for k in keep if k in m}
    for k in FPR_OF:  # n/a, as in every table: the non-member count cannot resolve that FPR
        if k in out and not resolvable(k, res.get("n_nonmembers")):
            out[k] = None
    p = res.get("privacy") or {}
    if p.get("epsilon") is not None:
        out["epsilon"] = p["epsilon"]
    return out


def run_attack_cell(c: Cell, runs_dir, device) -> None:
    res = cached_result(Path(c.run_dir), Path(c.result_path).parent) if c.result_path else None
    if res is not None:  # intact, and computed from the run's current training artefacts
        c.summary = summary(res.to_json())
        c.status, c.reason = "done", "cached"
        return
    if c.external is not None:
        spec = OutsideSpec(**{**c.external, "sets": tuple(c.external["sets"]), "device": device})
        res = attack_external(spec, c.attack, seed=c.seed, runs_dir=runs_dir, strict=False).to_json()
    else:
        # strict=False as when it was planned: suite-wide attack.* settings apply to the attacks that have them
        res = run_attack(c.cfg, c.attack, c.target, runs_dir=runs_dir, device=device, strict=False).to_json()
    c.result_path = str(Path(res["scores_path"]).parent / "result.json")
    c.summary = summary(res)
    c.status, c.reason = "done", None


def run_samples_cell(c: Cell, runs_dir, device, n: int) -> None:
    """samples-<target>.png (the name the report finds), reused while its sidecar JSON's settings_hash holds."""
    path = Path(c.run_dir) / f"samples-{safe_name(c.target)}.png"
    side = path.with_suffix(".json")
    try:
        cached = path.is_file() and json.loads(side.read_text()).get("settings_hash") == c.settings_hash
    except (OSError, ValueError, AttributeError):
        cached = False
    if cached:
        c.status, c.reason, c.result_path = "done", "cached", str(path)
        return
    res = api.sample(c.cfg, runs_dir, device, n=n, target=c.target)
    atomic_write_json(side, {"settings_hash": c.settings_hash, "n": n, "sampler": c.cfg.sample.sampler,
                             "ddim_steps": c.cfg.sample.ddim_steps, "seed": c.seed})
    c.status, c.result_path = "done", res["grid"]


def run_utility_cell(c: Cell, runs_dir, device) -> None:
    """Downstream accuracy, precision/recall and class fidelity of the run's target (runs/utility.py; cached)."""
    cached = Path(c.result_path).is_file()
    rec = measure_utility(c.cfg, runs_dir, device, target=c.target, **c.utility)
    d = rec["downstream"]
    c.summary = {"downstream_accuracy": d["accuracy"], "downstream_ci": d["ci"],
                 "class_fidelity": rec["class_fidelity"]["class_fidelity"],
                 "precision": rec["precision_recall"]["precision"], "recall": rec["precision_recall"]["recall"]}
    c.status, c.reason = "done", "cached" if cached else None


def run_fid_cell(c: Cell, runs_dir, device, fcfg: dict) -> None:
    """FID of the method's FID target: client K's majority/minority classes (the PFDM paper's Table 1) and, with
    ``n_overall`` > 0, samples with the members' class proportions against all member records."""
    path = fid_record_path(c, fcfg)
    if path.is_file():
        c.status, c.reason, c.result_path = "done", "cached", str(path)
        return
    t0 = time.time()
    method = api.train(c.cfg, runs_dir, device)
    cfg = c.cfg
    sampler = fcfg.get("sampler") or cfg.sample.sampler
    weights = fcfg.get("inception_weights")
    rec = client_fid(method, int(fcfg["client"]), int(fcfg["n_per_class"]), target=c.target, seed=c.seed,
                     sampler=sampler, inception_weights=weights, kid=bool(fcfg.get("kid")),
                     heldout=bool(fcfg.get("heldout")))
    rec.update({"method": c.method, "dataset": c.dataset, "seed": c.seed, "n_per_class": int(fcfg["n_per_class"]),
                "overall": None, "n_overall": 0})
    n_all = int(fcfg["n_overall"])
    if n_all > 0:
        ctx = method.ctx
        xm, ym = ctx.records(ctx.split.members)
        n_all = min(n_all, len(ym)) if len(ym) >= 2 else 0
        if n_all >= 2:
            ex = resolve_extractor(cfg.dataset, ctx.run_dir.parent, inception_weights=weights,
                                   resolution=cfg.data.resolution, data_root=cfg.data.data_root or None)
            tgt = method.load_target(c.target)
            y = matched_labels(ym, n_all) if tgt.num_classes else None
            gen, _ = tgt.sample(n_all, y, seed=c.seed + 1, sampler=sampler,
                                ddim_steps=cfg.sample.ddim_steps, batch_size=cfg.sample.batch_size)
            r = fid_with(ex, gen.float().clamp(-1, 1), xm, device=ctx.device, seed=c.seed)
            rec["overall"], rec["n_overall"] = r["fid"], n_all
            rec["n_real_overall"] = int(len(ym))
    rec["seconds"] = round(time.time() - t0, 1)
    rec["note"] = ("overall: samples (labels in the members' class proportions) vs all member records; "
                   "majority/minority: client {c}'s classes vs its own records; average = their mean"
                   .format(c=fcfg["client"]))
    atomic_write_json(path, rec)
    c.status, c.result_path = "done", str(path)
    c.summary = {k: rec.get(k) for k in ("overall", "majority", "minority", "average", "extractor")}


def matched_labels(ref_labels: torch.Tensor, n_total: int) -> torch.Tensor:
    """n_total labels with the class proportions of ``ref_labels`` (largest remainder)."""
    classes, counts = torch.unique(ref_labels, return_counts=True)
    share = counts.double() / counts.sum() * n_total
    k = share.floor().long()
    rem = n_total - int(k.sum())
    order = torch.argsort(-(share - k), stable=True)
    k[order[:rem]] += 1
    return torch.cat([torch.full((int(c),), int(cl)) for cl, c in zip(classes, k)]).long()


def client_fid(method, client: int = 0, n_per_class: int = 50, *, target: str | None = None, seed: int = 0,
               inception_weights: str | None = None, kid: bool = False, sampler: str | None = None,
               ddim_steps: int | None = None, batch_size: int | None = None, heldout: bool = False) -> dict:
    """Per-client FID on the client's majority and minority classes (+ their average), the paper's Table 1.

    ``method``: a trained Method. The reference is the client's own training records, as the paper specifies;
    ``heldout`` adds the held-out non-members of those classes (``out["heldout"]``), ``kid`` each group's KID
    (docs/benchmarks.md, "Suites").
    """
    ctx = method.ctx
    cfg = method.cfg
    runs_dir = ctx.run_dir.parent
    ex = resolve_extractor(cfg.dataset, runs_dir, inception_weights=inception_weights,
                           resolution=cfg.data.resolution, data_root=cfg.data.data_root or None)
    split = ctx.clients
    if not 0 <= client < len(split.clients):
        raise BadInput(f"client {client}: the split has clients 0..{len(split.clients) - 1}")
    tname = target or method.fid_target(client)
    tgt = method.load_target(tname)
    xr, yr = ctx.records(split.clients[client])
    sampler = sampler or cfg.sample.sampler
    ddim_steps = ddim_steps or cfg.sample.ddim_steps
    batch_size = batch_size or cfg.sample.batch_size
    out = {"target": tname, "client": client, "extractor": ex.name, "sampler": sampler,
           "majority_classes": list(split.majority[client]), "minority_classes": list(split.minority[client])}
    groups = {"majority": split.majority[client], "minority": split.minority[client]}
    # one sampling call for both groups (fewer chains); labels in class proportions of the real records
    y_all, spans = _group_labels(groups, yr, n_per_class)
    gen = None
    if len(y_all):
        gen, _ = tgt.sample(len(y_all), y_all, seed=seed, sampler=sampler, ddim_steps=ddim_steps,
                            batch_size=batch_size)
        gen = gen.float().clamp(-1, 1)
    fids = _GroupFIDs(ex, gen, groups, spans, ctx.device, seed)
    out.update(fids.against(xr, yr, kid))
    out["n_generated"] = {g: spans[g][1] for g in groups if spans[g] is not None}
    if heldout:
        xh, yh = ctx.records(ctx.split.nonmembers)
        out["heldout"] = fids.against(xh, yh, kid)
    return out


def _group_labels(groups: dict, yr: torch.Tensor, n_per_class: int) -> tuple[torch.Tensor, dict]:
    """All groups' labels to sample in one tensor, and each group's (start, length) in it (None: < 2 records)."""
    labels, spans = [], {}
    for gname, classes in groups.items():
        ref_y = yr[torch.isin(yr, torch.as_tensor(classes))]
        if len(ref_y) < 2:
            spans[gname] = None
            continue
        lab = matched_labels(ref_y, n_per_class * len(set(ref_y.tolist())))
        spans[gname] = (sum(len(a) for a in labels), len(lab))
        labels.append(lab)
    return (torch.cat(labels) if labels else torch.zeros(0, dtype=torch.long)), spans


class _GroupFIDs:
    """Each group's generated samples (a span of ``gen``) against a reference set's records of its classes."""

    def __init__(self, ex, gen, groups: dict, spans: dict, device, seed: int):
        self.ex, self.gen, self.groups, self.spans, self.device, self.seed = ex, gen, groups, spans, device, seed

    def against(self, x_ref, y_ref, with_kid: bool) -> dict:
        """FID (+ KID) of each group's samples vs the reference records of that group's classes."""
        res: dict = {"n_real": {}}
        for gname, classes in self.groups.items():
            mask = torch.isin(y_ref, torch.as_tensor(classes))
            if self.spans[gname] is None or int(mask.sum()) < 2:
                res[gname] = None
                continue
            lo, n = self.spans[gname]
            r = fid_with(self.ex, self.gen[lo:lo + n], x_ref[mask], kid=with_kid, device=self.device, seed=self.seed)
            res[gname] = r["fid"]
            if with_kid:
                res[f"{gname}_kid"] = r["kid"]
            res["n_real"][gname] = int(mask.sum())
        vals = [res[g] for g in self.groups if res[g] is not None]
        res["average"] = float(np.mean(vals)) if len(vals) == 2 else None
        if with_kid:
            kids = [res.get(f"{g}_kid") for g in self.groups if res.get(f"{g}_kid") is not None]
            res["average_kid"] = float(np.mean(kids)) if len(kids) == 2 else None
        return res
