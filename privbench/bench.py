"""``privbench bench --suite S``: a grid of methods × targets × attacks × datasets × seeds, side by side.

A suite is a YAML file (``benchmarks/suites/<name>.yaml``, or any path)::

    name: tiny
    description: ...
    preset: tiny                 # --preset overrides it
    device: cpu                  # used when --device is auto
    datasets: [digits]
    seeds: [0]
    set: {train.steps: 4000}     # --set overrides for every cell (the command line's --set comes last)
    attacks: [loss, secmi, pia, pian, memorization]      # default attacks of every target
    fid: {client: 0, n_per_class: 20, n_overall: 256, sampler: ddpm}    # or false; sampler: default sample.sampler
    samples: {n: 32}                                     # or false: a sample grid per target for the report
    methods:
      pfdm:
        role: private            # private | baseline (default: pfdm/dpdm/dpsad are private)
        targets: [shared, "client:0", "pipeline:0"]
        attacks: {shared: [loss, pia, reconstruction], "client:0": [loss, pia]}   # or a list for all targets
        set: {pfdm.t0: 690}
        datasets: [digits, {mnist: {data.resolution: 32}}]   # optional: per-method datasets (+ their --set)
      centralized: {role: baseline}

Cells run in order (method, dataset, seed, then targets and attacks), so each target is trained once; every cell
reuses cached runs (training is cached by config hash, attacks by their settings' hash). ``<out>/bench.json`` is
rewritten after every cell: an interrupted bench resumes where it stopped, and a rerun skips finished cells.

A method or attack named in docs/cli.md §1 but not registered in this build is reported as ``skipped`` (not an error); an
unknown name, key or value is bad input, checked for the whole grid before anything runs. A cell that fails is
recorded with its error and the bench continues; ``privbench bench`` then exits 3.

Outputs: ``bench.json`` (every cell, its status, result path and headline numbers), ``side_by_side.csv`` (one row
per target; see :mod:`privbench.reports.tables`), ``results.csv`` and ``bench.log`` (what the cells printed). ``privbench report <out>`` renders the HTML.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import BadInput, WorkFailed
from .runs import safe_name

KNOWN_METHODS = ("centralized", "local", "feddm", "pfdm", "dpdm", "dpsad")
KNOWN_ATTACKS = ("loss", "secmi", "pia", "pian", "memorization", "reconstruction")
SUITE_KEYS = {"name", "description", "preset", "device", "datasets", "seeds", "set", "attacks", "methods", "fid",
              "samples"}
METHOD_KEYS = {"targets", "attacks", "set", "datasets", "role", "fid", "samples"}
FID_KEYS = {"client", "n_per_class", "n_overall", "target", "sampler"}
DEFAULT_FID = {"client": 0, "n_per_class": 20, "n_overall": 256, "target": "auto", "sampler": None}


# ---------------------------------------------------------------------------------------------- suite files

def suite_dirs() -> list[Path]:
    here = Path(__file__).resolve().parents[1] / "benchmarks" / "suites"
    return [Path.cwd() / "benchmarks" / "suites", here]


def find_suite(suite: str) -> Path:
    p = Path(suite)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise BadInput(f"--suite {suite}: file not found")
        return p
    for d in suite_dirs():
        for ext in (".yaml", ".yml"):
            c = d / f"{suite}{ext}"
            if c.is_file():
                return c
    names = sorted({f.stem for d in suite_dirs() if d.is_dir() for f in d.glob("*.y*ml")})
    raise BadInput(f"--suite {suite}: unknown suite; available: {', '.join(names) or 'none found'} "
                   f"(or give a YAML path)")


def _as_list(v, what: str) -> list:
    if v is None:
        return []
    if isinstance(v, (str, int)):
        return [v]
    if not isinstance(v, list):
        raise BadInput(f"{what}: expected a list, got {type(v).__name__}")
    return v


def _as_sets(v, what: str) -> list[tuple[str, Any]]:
    if v is None:
        return []
    if not isinstance(v, dict):
        raise BadInput(f"{what}: expected a mapping of key: value (e.g. train.steps: 2000)")
    return [(str(k), val) for k, val in v.items()]


def load_suite(suite: str) -> tuple[dict, Path]:
    path = find_suite(suite)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        raise BadInput(f"--suite {path}: malformed YAML") from None
    except OSError as e:
        raise BadInput(f"--suite {path}: unreadable ({e.strerror})") from None
    if not isinstance(data, dict):
        raise BadInput(f"--suite {path}: expected a mapping (name, preset, datasets, seeds, methods, ...)")
    unknown = sorted(set(data) - SUITE_KEYS)
    if unknown:
        raise BadInput(f"--suite {path}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(SUITE_KEYS))}")
    if not isinstance(data.get("methods"), dict) or not data["methods"]:
        raise BadInput(f"--suite {path}: 'methods' must map method names to their settings")
    for m, spec in data["methods"].items():
        if spec is not None and not isinstance(spec, dict):
            raise BadInput(f"--suite {path}: methods.{m}: expected a mapping (targets, attacks, set, ...)")
        bad = sorted(set(spec or {}) - METHOD_KEYS)
        if bad:
            raise BadInput(f"--suite {path}: methods.{m}: unknown key(s) {', '.join(bad)}; allowed: "
                           f"{', '.join(sorted(METHOD_KEYS))}")
    data.setdefault("name", path.stem)
    return data, path


# ---------------------------------------------------------------------------------------------- the grid

@dataclass
class Cell:
    kind: str                      # attack | fid | samples
    method: str
    dataset: str
    seed: int
    target: str
    attack: str | None = None
    role: str = "baseline"
    overrides: list = field(default_factory=list)
    status: str = "pending"        # pending | done | skipped | failed
    reason: str | None = None
    id: str = ""
    run_dir: str | None = None
    config_hash: str | None = None
    attack_hash: str | None = None
    settings_hash: str | None = None  # samples/fid cells: what they draw (sampler, n, ...), so a change re-runs them
    result_path: str | None = None
    summary: dict | None = None
    seconds: float | None = None
    cfg: Any = None                # not serialised

    def to_json(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("cfg", "overrides")}
        d["overrides"] = [[k, v] for k, v in self.overrides]
        return d

    def label(self) -> str:
        what = self.attack if self.kind == "attack" else self.kind
        return f"{self.method}/{self.target} {what} ({self.dataset}, seed {self.seed})"


def _datasets(spec_ds, default) -> list[tuple[str, list]]:
    out = []
    for item in _as_list(spec_ds if spec_ds is not None else default, "datasets"):
        if isinstance(item, str):
            out.append((item, []))
        elif isinstance(item, dict) and len(item) == 1:
            (name, sets), = item.items()
            out.append((str(name), _as_sets(sets, f"datasets.{name}")))
        else:
            raise BadInput(f"datasets: entries are names or {{name: {{key: value}}}}, got {item!r}")
    if not out:
        raise BadInput("suite: no datasets given")
    return out


def _attacks_for(spec_attacks, default: list, target: str, method: str) -> list[str]:
    if spec_attacks is None:
        return list(default)
    if isinstance(spec_attacks, list):
        return [str(a) for a in spec_attacks]
    if isinstance(spec_attacks, dict):
        return [str(a) for a in _as_list(spec_attacks.get(target, []), f"methods.{method}.attacks.{target}")]
    raise BadInput(f"methods.{method}.attacks: expected a list or a mapping target -> list")


def plan(suite: dict, *, preset: str | None, sets: list[tuple[str, Any]], runs_dir, device: str,
         validate_methods: bool = True) -> list[Cell]:
    """Expand and validate the whole grid before anything is trained (BadInput on any bad name or value).

    ``validate_methods`` also runs each untrained method's own checks (DP methods calibrate their noise there,
    seconds each); trained runs are not re-validated."""
    from . import api
    from .attacks.runner import attack_dir, attack_hash, make_attack
    from .config import build_config
    from .registry import ATTACKS, METHODS
    from .runs import run_dir_for

    preset = preset or suite.get("preset") or "tiny"
    seeds = _as_list(suite.get("seeds", [0]), "seeds")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise BadInput(f"seeds: expected non-negative integers, got {s!r}")
    default_attacks = [str(a) for a in _as_list(suite.get("attacks", list(KNOWN_ATTACKS)), "attacks")]
    fid_on = suite.get("fid", False) not in (False, None)
    fcfg = fid_settings(suite) if fid_on else None  # validated before anything else
    samples_on = suite.get("samples", False) not in (False, None)
    cells: list[Cell] = []
    checked_data: set = set()
    for mname, spec in suite["methods"].items():
        spec = spec or {}
        mname = str(mname)
        if mname not in KNOWN_METHODS and mname not in METHODS:
            raise BadInput(f"suite methods: unknown method {mname!r}; privbench knows: {', '.join(KNOWN_METHODS)}")
        registered = mname in METHODS
        role = spec.get("role") or ("private" if mname in ("pfdm", "dpdm", "dpsad") else "baseline")
        if role not in ("private", "baseline"):
            raise BadInput(f"methods.{mname}.role: {role!r}; choose private or baseline")
        msets = _as_sets(spec.get("set"), f"methods.{mname}.set")
        for ds, dsets in _datasets(spec.get("datasets"), suite.get("datasets", ["digits"])):
            for seed in seeds:
                base = dict(method=mname, dataset=ds, seed=int(seed), role=role)
                overrides = _as_sets(suite.get("set"), "set") + msets + dsets + list(sets)
                targets = [str(t) for t in _as_list(spec.get("targets"), f"methods.{mname}.targets")]
                if not registered:
                    for t in targets or ["(default)"]:
                        for a in _attacks_for(spec.get("attacks"), default_attacks, t, mname):
                            cells.append(Cell("attack", target=t, attack=a, overrides=overrides, status="skipped",
                                              reason=f"method {mname} is not registered in this privbench build",
                                              **base))
                    continue
                try:
                    cfg = build_config(mname, ds, preset, int(seed), overrides)
                except BadInput as e:
                    raise BadInput(f"suite, method {mname} on {ds}: {e}") from None
                rd = run_dir_for(cfg, runs_dir)
                method = api.make_method(cfg, rd, device)
                key = (cfg.dataset, cfg.data.data_root, cfg.data.resolution)
                if key not in checked_data:
                    method.ctx.dataset  # noqa: B018 - a missing dataset / data root is bad input, now
                    checked_data.add(key)
                if validate_methods and not (rd / "train_done.json").is_file():
                    method.validate()
                targets = [method.check_target(t) for t in (targets or [method.default_target])]
                common = dict(base, overrides=overrides, cfg=cfg, run_dir=str(rd), config_hash=cfg.training_hash())
                for t in targets:
                    for a in _attacks_for(spec.get("attacks"), default_attacks, t, mname):
                        if a not in ATTACKS:
                            if a in KNOWN_ATTACKS:
                                cells.append(Cell("attack", target=t, attack=a, status="skipped",
                                                  reason=f"attack {a} is not registered in this privbench build",
                                                  **common))
                                continue
                            raise BadInput(f"suite, method {mname}: unknown attack {a!r}; choose from "
                                           f"{', '.join(ATTACKS.names())}")
                        att = make_attack(cfg, a)
                        c = Cell("attack", target=t, attack=a, attack_hash=attack_hash(att, cfg, t),
                                 result_path=str(attack_dir(rd, att, cfg, t) / "result.json"), **common)
                        cells.append(c)
                if samples_on and spec.get("samples", True) is not False:
                    for t in targets:
                        cells.append(Cell("samples", target=t, settings_hash=samples_settings_hash(cfg, suite),
                                          **common))
                if fid_on and spec.get("fid", True) is not False:
                    ft = fcfg["target"]
                    if ft == "auto":
                        from .metrics.fid import fid_target_name

                        ft = fid_target_name(method, int(fcfg["client"]))
                    else:
                        ft = method.check_target(ft)
                    c = Cell("fid", target=ft, **common)
                    c.settings_hash, c.result_path = fid_settings_hash(c, fcfg), str(fid_record_path(c, fcfg))
                    cells.append(c)
    for c in cells:
        c.id = "|".join(str(x) for x in (c.kind, c.method, c.dataset, c.seed, c.target, c.attack, c.config_hash,
                                          c.attack_hash or c.settings_hash))
    return cells


def fid_settings(suite: dict) -> dict:
    f = suite.get("fid")
    f = {} if f in (True, None) else f
    if not isinstance(f, dict):
        raise BadInput("fid: expected false or a mapping (client, n_per_class, n_overall, target)")
    bad = sorted(set(f) - FID_KEYS)
    if bad:
        raise BadInput(f"fid: unknown key(s) {', '.join(bad)}; allowed: {', '.join(sorted(FID_KEYS))}")
    out = {**DEFAULT_FID, **f}
    if out["sampler"] not in (None, "ddpm", "ddim"):
        raise BadInput(f"fid.sampler: {out['sampler']!r}; choose ddpm or ddim (default: sample.sampler)")
    for k in ("client", "n_per_class", "n_overall"):
        if isinstance(out[k], bool) or not isinstance(out[k], int) or out[k] < 0:
            raise BadInput(f"fid.{k}: expected a non-negative integer, got {out[k]!r}")
    return out


# ---------------------------------------------------------------------------------------------- cell work

def _summary(res: dict) -> dict:
    m = res.get("metrics") or {}
    keep = ("auc", "asr", "tpr_at_1pct_fpr", "tpr_at_0_1pct_fpr", "memorized_fraction", "n_generated", "reid_rate",
            "reid_chance", "psnr", "ssim")
    out = {k: m[k] for k in keep if k in m}
    p = res.get("privacy") or {}
    if p.get("epsilon") is not None:
        out["epsilon"] = p["epsilon"]
    return out


def _run_attack_cell(c: Cell, runs_dir, device) -> None:
    from .attacks.runner import run_attack

    if c.result_path and Path(c.result_path).is_file() and (Path(c.run_dir) / "train_done.json").is_file():
        try:
            res = json.loads(Path(c.result_path).read_text())
            c.summary = _summary(res)
            c.status, c.reason = "done", "cached"
            return
        except (OSError, ValueError):
            pass
    res = run_attack(c.cfg, c.attack, c.target, runs_dir=runs_dir, device=device)
    c.result_path = str(Path(res["scores_path"]).parent / "result.json")
    c.summary = _summary(res)
    c.status, c.reason = "done", None


def samples_n(suite: dict) -> int:
    sp = suite.get("samples")
    return int(sp.get("n", 32)) if isinstance(sp, dict) else 32


def samples_settings_hash(cfg, suite: dict) -> str:
    from .config import config_hash

    return config_hash({"n": samples_n(suite), "seed": cfg.seed, "sampler": cfg.sample.sampler,
                        "ddim_steps": cfg.sample.ddim_steps})


def _run_samples_cell(c: Cell, runs_dir, device, n: int) -> None:
    """The grid keeps its plain name (the report finds samples-<target>.png); a sidecar JSON records what drew it,
    so a grid drawn with other settings is redrawn rather than reused."""
    from . import api
    from .runs import atomic_write_json

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


def fid_settings_hash(c: Cell, fcfg: dict) -> str:
    from .config import config_hash

    return config_hash({"target": c.target, "seed": c.seed, **{k: fcfg[k] for k in ("client", "n_per_class",
                                                                                      "n_overall")},
                        "sampler": fcfg.get("sampler") or c.cfg.sample.sampler,
                        "ddim_steps": c.cfg.sample.ddim_steps, "version": 1})


def fid_record_path(c: Cell, fcfg: dict) -> Path:
    return Path(c.run_dir) / "fid" / f"fid-{safe_name(c.target)}-{fid_settings_hash(c, fcfg)}.json"


def _run_fid_cell(c: Cell, runs_dir, device, fcfg: dict) -> None:
    """FID of the method's FID target: client K's majority/minority classes (the PFDM paper's Table 1) and, with
    ``n_overall`` > 0, samples with the members' class proportions against all member records."""
    from . import api
    from .metrics.extractor import resolve_extractor
    from .metrics.fid import _matched_labels, client_fid, fid_with
    from .runs import atomic_write_json

    path = fid_record_path(c, fcfg)
    if path.is_file():
        c.status, c.reason, c.result_path = "done", "cached", str(path)
        return
    t0 = time.time()
    method = api.train(c.cfg, runs_dir, device)
    cfg = c.cfg
    sampler = fcfg.get("sampler") or cfg.sample.sampler
    rec = client_fid(method, int(fcfg["client"]), int(fcfg["n_per_class"]), target=c.target, seed=c.seed,
                     sampler=sampler)
    rec.update({"method": c.method, "dataset": c.dataset, "seed": c.seed, "n_per_class": int(fcfg["n_per_class"]),
                "overall": None, "n_overall": 0})
    n_all = int(fcfg["n_overall"])
    if n_all > 0:
        ctx = method.ctx
        xm, ym = ctx.records(ctx.split.members)
        n_all = min(n_all, len(ym)) if len(ym) >= 2 else 0
        if n_all >= 2:
            ex = resolve_extractor(cfg.dataset, ctx.run_dir.parent, resolution=cfg.data.resolution,
                                   data_root=cfg.data.data_root or None)
            tgt = method.load_target(c.target)
            y = _matched_labels(ym, n_all, c.seed) if tgt.num_classes else None
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


# ---------------------------------------------------------------------------------------------- the runner

def _git_commit() -> str | None:
    from .reports.html import git_info

    g = git_info()
    return None if not g["commit"] else g["commit"] + ("+modified" if g.get("dirty") else "")


def run_suite(suite: str, out: str | None = None, device: str = "auto", runs_dir: str | None = None,
              preset: str | None = None, sets: list[str] | tuple[str, ...] = ()) -> dict:
    """Run (or resume) a suite; returns the bench summary (also written to ``<out>/bench.json``)."""
    from . import __version__
    from .config import config_hash, parse_set_args
    from .progress import bar, enabled
    from .runs import atomic_path, atomic_write_json, default_runs_dir

    spec, path = load_suite(suite)
    name = str(spec["name"])
    cli_sets = parse_set_args(list(sets))
    if device in (None, "auto") and spec.get("device"):
        device = str(spec["device"])
    runs = Path(runs_dir) if runs_dir else default_runs_dir()
    out_dir = Path(out) if out else runs / f"bench-{name}"
    cells = plan(spec, preset=preset, sets=cli_sets, runs_dir=runs, device=device)
    fcfg = fid_settings(spec) if spec.get("fid", False) not in (False, None) else None
    n_samples = samples_n(spec)

    bench_json = out_dir / "bench.json"
    prev: dict[str, dict] = {}
    if bench_json.is_file():
        try:
            prev = {c["id"]: c for c in json.loads(bench_json.read_text()).get("cells", [])}
        except (OSError, ValueError, KeyError, TypeError):
            prev = {}
    for c in cells:
        p = prev.get(c.id)
        if c.status == "pending" and p and p.get("status") == "done" and p.get("result_path") \
                and Path(p["result_path"]).is_file():
            c.status, c.reason = "done", "finished in an earlier run of this bench"
            c.result_path, c.summary, c.seconds = p["result_path"], p.get("summary"), p.get("seconds")
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    meta = {
        "suite": name, "suite_path": str(path), "suite_hash": config_hash(spec),
        "description": spec.get("description"), "preset": preset or spec.get("preset") or "tiny",
        "device": device, "runs_dir": str(runs), "overrides": [list(kv) for kv in cli_sets],
        "roles": {c.method: c.role for c in cells},
        "privbench_version": __version__, "git_commit": _git_commit(),
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }

    def write(final: bool = False) -> dict:
        counts = {s: sum(c.status == s for c in cells) for s in ("done", "skipped", "failed", "pending")}
        d = {**meta, "elapsed_s": round(time.time() - started, 1), "counts": counts, "finished": final,
             "cells": [c.to_json() for c in cells]}
        atomic_write_json(bench_json, d)
        return d

    write()
    log_path = out_dir / "bench.log"
    show = enabled()
    pb = bar(total=len(cells), desc=f"bench {name}", unit="cell", leave=True)
    old_env = os.environ.get("PRIVBENCH_PROGRESS")
    os.environ["PRIVBENCH_PROGRESS"] = "0"  # one progress bar: the grid's
    try:
        for c in cells:
            if c.status != "pending":
                pb.update(1)
                continue
            pb.set_postfix_str(c.label()[:60])
            t0 = time.time()
            try:
                # the cells' own messages (cache hits, training logs) go to bench.log: one bar on the terminal
                with open(log_path, "a") as log, contextlib.redirect_stderr(log):
                    print(f"--- {_dt.datetime.now().isoformat(timespec='seconds')} {c.label()}", file=log)
                    if c.kind == "attack":
                        _run_attack_cell(c, runs, device)
                    elif c.kind == "samples":
                        _run_samples_cell(c, runs, device, n_samples)
                    else:
                        _run_fid_cell(c, runs, device, fcfg)
            except KeyboardInterrupt:
                c.status, c.reason = "pending", "interrupted"
                write()
                raise
            except (BadInput, WorkFailed) as e:
                c.status, c.reason = "failed", f"{type(e).__name__}: {e}"
            except Exception as e:  # noqa: BLE001 - one broken cell must not lose the others
                c.status, c.reason = "failed", f"{type(e).__name__}: {e}"
            if c.reason is None or c.reason != "cached":
                c.seconds = round(time.time() - t0, 1)
            if c.status == "failed" and show:
                pb.write(f"privbench bench: {c.label()} failed: {c.reason}", file=sys.stderr)
            elif c.status == "failed":
                print(f"privbench bench: {c.label()} failed: {c.reason}", file=sys.stderr)
            write()
            pb.update(1)
    finally:
        pb.close()
        if old_env is None:
            os.environ.pop("PRIVBENCH_PROGRESS", None)
        else:
            os.environ["PRIVBENCH_PROGRESS"] = old_env

    # the side-by-side table
    from .reports.collect import read_result
    from .reports.tables import Tables

    results = [read_result(c.result_path) for c in cells if c.kind == "attack" and c.status == "done"]
    table_paths = {}
    if results:
        tables = Tables.build(results, {"roles": meta["roles"]})
        for fname, df in (("side_by_side.csv", tables.side_by_side_frame()), ("results.csv", tables.results_frame())):
            with atomic_path(out_dir / fname) as tmp:
                df.to_csv(tmp, index=False, float_format="%.6g")
            os.chmod(out_dir / fname, 0o644)
            table_paths[fname] = str(out_dir / fname)
        meta["tables"] = table_paths
        summary_rows = tables.targets()
    else:
        summary_rows = []
    d = write(final=True)
    d["out"] = str(out_dir)
    d["bench_json"] = str(bench_json)
    d["_rows"] = summary_rows  # for format_bench only (not JSON)
    return d


def format_bench(res: dict) -> str:
    """The side-by-side table in text, then the cell counts and where everything was written."""
    from .reports.tables import fmt

    lines = []
    rows = res.get("_rows") or []
    if rows:
        hdr = (f"{'method/target':24s} {'role':8s} {'formal eps':>10s} {'eps lb':>6s}  {'attack':7s} {'AUC [95% CI]':19s} "
               f"{'TPR@1%':>6s} {'TPR@.1%':>7s} {'memorized':>9s} {'re-id':>6s} {'FID all/maj/min':>17s}")
        lines += [hdr, "-" * len(hdr)]
        for b in rows:
            p = b["privacy"] or {}
            mem = (b["memorization"] or {}).get("metrics") or {}
            rec = (b["reconstruction"] or {}).get("metrics") or {}
            f = b["fid"] or {}
            fid = (f"{fmt(f.get('overall'), 1)}/{fmt(f.get('majority'), 1)}/{fmt(f.get('minority'), 1)}" if f else "-")
            atts = b["attacks"] or [None]
            for i, a in enumerate(atts):
                head = (f"{(b['method'] + '/' + b['target'])[:24]:24s} {b['role'][:8]:8s} "
                        f"{fmt(p.get('epsilon'), 2) if p.get('epsilon') is not None else 'none':>10s} "
                        f"{fmt(b['eps_lb_cp'], 2):>6s}{'!' if b['exceeds_formal'] else ' '}" if i == 0 else " " * 52)
                if a:
                    m, ci = a["metrics"], (a["ci"].get("auc") or [None, None])
                    auc = f"{fmt(m.get('auc'))} [{fmt(ci[0], 2)},{fmt(ci[1], 2)}]"
                    body = (f" {a['attack']:7s} {auc:19s} {fmt(m.get('tpr_at_1pct_fpr')):>6s} "
                            f"{fmt(m.get('tpr_at_0_1pct_fpr')):>7s}")
                else:
                    body = f" {'-':7s} {'-':19s} {'-':>6s} {'-':>7s}"
                tail = (f" {fmt(mem.get('memorized_fraction')) if mem else '-':>9s} "
                        f"{fmt(rec.get('reid_rate')) if rec else '-':>6s} {fid:>17s}") if i == 0 else ""
                lines.append(head + body + tail)
        lines.append("eps lb: Clopper-Pearson lower bound (split threshold), max over the target's membership attacks "
                     "with a Bonferroni correction, 95%; '!' = exceeds the formal epsilon")
    c = res.get("counts", {})
    lines.append(f"bench {res.get('suite')}: {c.get('done', 0)} done, {c.get('skipped', 0)} skipped, "
                 f"{c.get('failed', 0)} failed, {c.get('pending', 0)} pending in {res.get('elapsed_s')} s")
    for cell in res.get("cells", []):
        if cell["status"] in ("failed", "skipped"):
            what = cell["attack"] if cell["kind"] == "attack" else cell["kind"]
            lines.append(f"  {cell['status']}: {cell['method']}/{cell['target']} {what} ({cell['dataset']}, seed "
                         f"{cell['seed']}): {cell['reason']}")
    lines.append(f"wrote {res.get('bench_json')}" + "".join(f", {p}" for p in (res.get("tables") or {}).values()))
    lines.append(f"render the HTML report with: privbench report {res.get('out')} --out <dir>")
    return "\n".join(lines)
