"""Reference (shadow) models for LiRA, RMIA and GSA, cached in the run store and shared by every attack and target
of the run (pool, inclusion and store layout: docs/attacks-threat-models.md, "Reference models").

Reference i trains with the target's config except ``seed`` (:func:`reference_seed`), ``data.n_members`` /
``data.n_nonmembers`` (its halves' sizes) and the member split, handed to :class:`~privbench.models.method.RunContext`;
on the target's public split where the method uses one, as the target did. Population records (RMIA's z) lie
outside the partition and the pool, in no training set.
"""
from __future__ import annotations

import copy
import logging
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from ..attacks.base import Records
from ..attacks.references import ReferenceModels
from ..core.config import config_hash
from ..core.errors import BadInput
from ..core.io import atomic_write_json, atomic_write_text, read_json_or_none
from ..core.registry import METHODS
from ..core.seeding import sub_seed
from ..data.splits import MemberSplit, reference_pool
from ..models.method import RunContext, run_partition
from .loaded import load_target
from .store import run_lock

LOG = logging.getLogger(__name__)

#: bump when the pool, inclusion or reference training changes (new store directory)
REFERENCE_VERSION = 1
_INCLUSION_STREAM, _SEED_STREAM = 0x1C1, 0x4EF


def plan_pool(split: MemberSplit, n_total: int, mode: str, seed: int, n_population: int = 0
              ) -> tuple[list[int], list[int]]:
    """(pool indices, population indices), sorted, outside the run's partition
    (:func:`privbench.data.splits.reference_pool`)."""
    return reference_pool(split, n_total, mode, seed, n_population)


def check_pool(cfg, method, mode: str, n_population: int = 0) -> None:
    """Everything about the pool that can be bad input, checked before anything is trained or written."""
    labels = method.ctx.dataset[1]
    plan_pool(run_partition(cfg, labels), len(labels), mode, cfg.seed, n_population)


def inclusion(seed: int, i: int, n_pool: int) -> np.ndarray:
    """Reference i's coin per pool record (True = trains on it); independent of how many references exist."""
    return np.random.default_rng([seed, _INCLUSION_STREAM, i]).random(n_pool) < 0.5


def reference_seed(seed: int, i: int) -> int:
    return sub_seed(seed, _SEED_STREAM, i)


def reference_config(cfg, i: int, n_in: int, n_out: int):
    rcfg = copy.deepcopy(cfg)
    rcfg.seed = reference_seed(cfg.seed, i)
    rcfg.data.n_members, rcfg.data.n_nonmembers = int(n_in), int(n_out)
    return rcfg


def store_dir(run_dir: Path, mode: str, pool: list[int], seed: int, public: list[int] = ()) -> Path:
    what = {"pool": pool, "seed": seed, "version": REFERENCE_VERSION}
    if public:  # references trained with the target's public split (key unchanged for runs without one)
        what["public"] = list(public)
    key = config_hash(what)
    return Path(run_dir) / "references" / f"{mode}-{key}"


def _target_members(method, target_name: str) -> set[int]:
    """The records ``target_name`` of this (reference) method was trained on."""
    return {int(i) for i in method.attack_split(target_name)[0]}


def train_reference(cfg, store: Path, i: int, pool: list[int], device, log=None, public: list[int] = (),
                    public_mode: str = "none", runs_root: Path | None = None):
    """Train (or load) reference i; returns its Method."""
    incl = inclusion(cfg.seed, i, len(pool))
    members = [p for p, keep in zip(pool, incl) if keep]
    nonmembers = [p for p, keep in zip(pool, incl) if not keep]
    if min(len(members), len(nonmembers)) < 2:
        raise BadInput(f"reference {i}: the pool of {len(pool)} records gives a half of {len(members)} records; "
                       f"use more records")
    rcfg = reference_config(cfg, i, len(members), len(nonmembers))
    ref_dir = store / f"ref-{i}"
    # the target's public split (public records are public; a public split of its own could hold its members)
    split = MemberSplit(members, nonmembers, rcfg.seed, list(public), public_mode)
    ctx = RunContext(rcfg, ref_dir, device, split_override=split, runs_root=runs_root)  # shares the pre-training
    method = METHODS.create(rcfg.method, ctx)
    done = ref_dir / "train_done.json"
    if not done.exists():
        with run_lock(ref_dir):
            if not done.exists():
                method.validate()
                atomic_write_text(ref_dir / "config.yaml", yaml.safe_dump(rcfg.to_dict(), sort_keys=False))
                if log is not None:
                    log(f"[references] training reference {i} ({len(members)} of {len(pool)} pool records, "
                        f"seed {rcfg.seed}) in {ref_dir}")
                LOG.info(f"privbench: training reference model {i} in {ref_dir}")
                t0 = time.time()
                method.train()
                atomic_write_json(done, {"seconds": round(time.time() - t0, 1), "device": str(ctx.device)})
    return method, incl


def _records(ctx, idx: list[int], labels: torch.Tensor | None = None) -> Records:
    x, y = ctx.records(idx)
    lab = labels if labels is not None else torch.zeros(len(idx), dtype=torch.long)
    return Records(x, y.long(), lab, torch.as_tensor(idx, dtype=torch.long))


def build_references(cfg, method, target_name: str, records: Records, *, n: int, mode: str,
                     n_population: int = 0, device=None) -> ReferenceModels:
    """Train (or load from the run store) ``n`` reference models and return them with their memberships over
    ``records`` (the evaluation records), the pool and the population."""
    ctx = method.ctx
    device = device if device is not None else ctx.device
    n_total = len(ctx.dataset[1])
    pool, population = plan_pool(ctx.split, n_total, mode, cfg.seed, n_population)
    store = store_dir(ctx.run_dir, mode, pool, cfg.seed, ctx.split.public)
    store.mkdir(parents=True, exist_ok=True)
    if not (store / "pool.json").exists():
        atomic_write_json(store / "pool.json", {"mode": mode, "seed": cfg.seed, "pool_index": pool,
                                                 "version": REFERENCE_VERSION})
    targets, seeds, in_masks, pool_in = [], [], [], []
    eval_index = records.index.tolist()
    pool_records = _records(ctx, pool)
    for i in range(n):
        ref_method, _ = train_reference(cfg, store, i, pool, device, log=ctx.log, public=ctx.split.public,
                                        public_mode=ctx.split.public_mode, runs_root=ctx.store_root)
        members = _target_members(ref_method, target_name)
        targets.append(load_target(ref_method, target_name, run=ctx.run_dir))
        seeds.append(int(ref_method.cfg.seed))
        in_masks.append([j in members for j in eval_index])
        pool_in.append([p in members for p in pool])
    with run_lock(store, "inclusion"):
        known = read_json_or_none(store / "inclusion.json", "corrupt inclusion matrix; remove it") or {}
        rows = dict(known.get("references", {}))
        for i in range(n):
            rows[str(i)] = inclusion(cfg.seed, i, len(pool)).astype(int).tolist()
        atomic_write_json(store / "inclusion.json", {"pool_index": pool, "references": rows,
                                                     "note": "references[i][k] = 1: reference i trained on "
                                                             "pool_index[k] (before any per-target sub-split)"})
    pop = _records(ctx, population) if population else None
    # n = 0 (qmia): no model, only the pool and population records
    return ReferenceModels(targets=targets, in_masks=np.asarray(in_masks, dtype=bool).reshape(n, len(eval_index)),
                           mode=mode, pool=pool_records,
                           pool_in=np.asarray(pool_in, dtype=bool).reshape(n, len(pool)), population=pop,
                           seeds=seeds, store=str(store))
