"""``privbench bench --suite S``: a grid of methods × targets × attacks × datasets × seeds, side by side
(docs/benchmarks.md, "Suites"; docs/cli.md §8–§9). Cells run in order (method, dataset, seed, targets, attacks), so
each target trains once; a failed cell is retried ``retries`` times, then recorded. Other executors: pool_executor
(``jobs`` > 1), slurm_executor, ray_executor.
"""
from __future__ import annotations

import datetime as _dt
import logging
import sys
import time
from pathlib import Path

from ..core.config import config_hash, parse_set_args
from ..core.errors import BadInput
from ..core.extras import require
from ..core.io import atomic_write_json
from ..core.jsonio import MAX_RECORD_BYTES, read_json
from ..core.progress import bar, enabled, outer_only
from ..core.provenance import git_commit, version
from ..data.user_records import registered_paths
from ..runs.attack import cached_result
from ..runs.loaded import shared_targets
from ..runs.store import default_runs_dir
from .cell_run import run_cell
from .cell_schema import BenchCell, cells_of
from .executor_options import ExecutorOptions
from .paper_claims import check_claims, claims_record, parse_claims
from .plan import plan
from .pool_executor import LocalPool
from .ray_executor import RayExecutor
from .slurm_executor import SlurmPool
from .suite import fid_settings, load_suite, samples_n

LOG = logging.getLogger(__name__)


def _still_valid(c, result_path: Path) -> bool:
    """Whether a cell finished earlier is still done: an attack result must pass runs/attack.py ``cached_result``."""
    if c.kind != "attack":
        return result_path.is_file()
    return result_path.resolve() == Path(c.result_path).resolve() and \
        cached_result(Path(c.run_dir), result_path.parent, say=False) is not None


def run_suite(suite: str, out: str | None = None, device: str = "auto", runs_dir: str | None = None,
              preset: str | None = None, sets: list[str] | tuple[str, ...] = (),
              inception_weights: str | None = None, executor: ExecutorOptions | None = None) -> dict:
    """Run (or resume) a suite; returns the bench summary (also written to ``<out>/bench.json``).

    ``inception_weights``: FIDs with torch-fidelity's Inception-v3 from this file; ``executor``: where the cells
    run (default: here, one after another)."""
    executor = executor or ExecutorOptions()
    retries = executor.checked_retries()
    spec, path = load_suite(suite)
    name = str(spec["name"])
    fid_on = _fid_setup(spec, name, inception_weights)
    cli_sets = parse_set_args(list(sets))
    if device in (None, "auto") and spec.get("device"):
        device = str(spec["device"])
    runs = Path(runs_dir) if runs_dir else default_runs_dir()
    out_dir = Path(out) if out else runs / f"bench-{name}"
    if out_dir.exists() and not out_dir.is_dir():  # before the grid is planned (it loads every dataset)
        raise BadInput(f"--out {out_dir}: exists and is not a folder")
    cells = plan(spec, preset=preset, sets=cli_sets, runs_dir=runs, device=device)
    claims = _suite_claims(spec, cells, path)
    fcfg = fid_settings(spec) if fid_on else None
    n_samples = samples_n(spec)
    bench_json = out_dir / "bench.json"
    _resume(cells, bench_json)
    ray_exec, pool, device = _start_executor(executor, retries, cells, device, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    meta = {
        "suite": name, "suite_path": str(path), "suite_hash": config_hash(spec),
        "description": spec.get("description"), "preset": preset or spec.get("preset") or "tiny",
        "device": device, "runs_dir": str(runs), "overrides": [list(kv) for kv in cli_sets],
        "roles": {c.method: c.role for c in cells}, **_provenance(executor.name, retries, ray_exec, pool),
        # so a report reads the claims without the suite file
        **({"paper_claims": claims_record(claims)} if claims else {}),
    }
    write = _BenchJson(bench_json, meta, cells, ray_exec or pool, started)
    write()
    log_path = out_dir / "bench.log"
    pb = bar(total=len(cells), desc=f"bench {name}", unit="cell", leave=True)
    report_failure = _FailureReport(pb)

    try:
        # the grid's bar on top; under it the bar of the cell running here (executors: their workers draw none)
        with outer_only(nest=ray_exec is None and pool is None):
            if ray_exec is not None or pool is not None:
                (ray_exec or pool).run(cells, runs=runs, device=device, n_samples=n_samples, fcfg=fcfg,
                                       log_path=log_path, write=write, pb=pb, report_failure=report_failure)
            else:
                with shared_targets():
                    _run_here(cells, runs, device, n_samples, fcfg, log_path, retries, write, pb, report_failure)
    finally:
        pb.close()
        if ray_exec is not None:
            ray_exec.close()  # a cluster this bench started (not one it joined)
        if pool is not None:
            pool.close()

    d = write(final=True)
    d["out"] = str(out_dir)
    d["bench_json"] = str(bench_json)
    return d


class _BenchJson:
    """Writes ``bench.json`` (called after every cell, ``final`` at the end); returns what it wrote."""

    def __init__(self, path: Path, meta: dict, cells, workers, started: float):
        self.path, self.meta, self.cells, self.workers, self.started = path, meta, cells, workers, started

    def __call__(self, final: bool = False) -> dict:
        counts = {s: sum(c.status == s for c in self.cells) for s in ("done", "skipped", "failed", "pending")}
        d = {**self.meta, "elapsed_s": round(time.time() - self.started, 1), "counts": counts, "finished": final,
             "cells": [c.to_json() for c in self.cells]}
        if self.workers is not None:
            d["trainings"] = self.workers.trainings
        atomic_write_json(self.path, d)
        return d


class _FailureReport:
    """One line per failed cell: above the progress bar when it is drawn, else to the log."""

    def __init__(self, pb):
        self.pb, self.show = pb, enabled()

    def __call__(self, c) -> None:
        tries = f" (after {c.attempts} attempts)" if (c.attempts or 0) > 1 else ""
        msg = f"privbench bench: {c.label()} failed{tries}: {c.reason}"
        if self.show:
            self.pb.write(msg, file=sys.stderr)
        else:
            LOG.warning(msg)


def _suite_claims(spec: dict, cells, path) -> list:
    """The suite's paper claims, each side checked to select one row of this grid before anything trains."""
    claims = parse_claims(spec.get("claims"))
    try:
        check_claims(claims, cells)
    except BadInput as e:
        raise BadInput(f"--suite {path}: {e}") from None
    return claims


def _provenance(executor: str, retries: int, ray_exec, pool) -> dict:
    """What ran the bench: privbench's version and commit, when, and the executor with its settings."""
    return {"privbench_version": version(), "git_commit": git_commit(),
            "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "executor": executor, "retries": retries,
            **({"ray": ray_exec.describe()} if ray_exec and ray_exec.ray else {}),
            **({pool.name if pool.name != "local" else "pool": pool.describe()} if pool is not None else {})}


def _fid_setup(spec: dict, name: str, inception_weights: str | None) -> bool:
    """Whether the suite computes FIDs; ``--inception-weights`` goes into its fid settings."""
    fid_on = spec.get("fid", False) not in (False, None)
    if inception_weights:
        if not fid_on:
            raise BadInput(f"--inception-weights: suite {name} computes no FID (fid: false)")
        spec["fid"] = {**(spec["fid"] if isinstance(spec["fid"], dict) else {}), "inception_weights": inception_weights}
    if fid_on:
        require("torch_fidelity", f"suite {name}'s fid")  # before any cell runs, not as a failed cell
    return fid_on


def _resume(cells, bench_json: Path) -> None:
    """Cells finished by an earlier run of this bench (``bench.json``) whose results still hold are done."""
    prev: dict[str, BenchCell] = {}
    if bench_json.is_file():
        try:
            prev = {c.id: c for c in cells_of(read_json(bench_json, "bench", MAX_RECORD_BYTES))}
        except (OSError, ValueError):  # unreadable (BadInput is a ValueError too): every cell runs again
            prev = {}
    for c in cells:
        p = prev.get(c.id)
        if c.status == "pending" and p and p.status == "done" and p.result_path \
                and _still_valid(c, Path(p.result_path)):
            c.status, c.reason = "done", "finished in an earlier run of this bench"
            c.result_path, c.summary, c.seconds = p.result_path, p.summary, p.seconds


def _start_executor(executor: ExecutorOptions, retries: int, cells, device: str, out_dir: Path):
    """(Ray executor or None, job pool or None, device); after planning, so a bad suite starts no cluster."""
    pending = any(c.status == "pending" for c in cells)
    known = registered_paths()  # the user's records this suite names (datasets: PATH), as their workers load them
    records = tuple(sorted({known[c.dataset] for c in cells if c.dataset in known}))
    if executor.name in ("ray", "slurm") and records:
        raise BadInput(f"suite datasets: the user's records (a path) run with the local executor (--jobs N), not "
                       f"--executor {executor.name}; register them as a dataset plug-in to run there")
    ray_exec = pool = None
    if executor.name == "ray":
        ray_exec = RayExecutor(address=executor.address, retries=retries, cpus_per_task=executor.cpus_per_task)
        if pending:
            device = ray_exec.connect(device)
    elif pending and executor.name == "slurm":
        pool = SlurmPool(out_dir / "submitit", retries=retries, cpus_per_task=executor.cpus_per_task,
                         **(executor.slurm or {}))
    elif pending and executor.jobs > 1:
        pool = LocalPool(executor.jobs, retries, records=records)
    return ray_exec, pool, device


def _run_here(cells, runs, device, n_samples, fcfg, log_path, retries: int, write, pb, report_failure) -> None:
    """The local executor: the cells one after another in this process (a run's models loaded once for its cells)."""
    for c in cells:
        if c.status != "pending":
            pb.update(1)
            continue
        pb.set_postfix_str(c.label()[:60])
        try:
            for attempt in range(1, retries + 2):
                c.status, c.reason, c.attempts = "pending", None, attempt
                t0 = time.time()
                run_cell(c, runs, device, n_samples, fcfg, log_path)
                if c.status != "failed":
                    break
        except KeyboardInterrupt:
            c.status, c.reason = "pending", "interrupted"
            write()
            raise
        if c.reason is None or c.reason != "cached":
            c.seconds = round(time.time() - t0, 1)
        if c.status == "failed":
            report_failure(c)
        write()
        pb.update(1)


