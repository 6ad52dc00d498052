"""Loading attack results (run, bench or ``result.json`` paths) for ``audit``, ``check``, ``report`` and ``bench``.
Paths in a result may be relative to where the attack ran: :class:`Result` resolves them from the result file first.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterable

import numpy as np

from ..bench.cell_schema import BenchCell, cells_of
from ..core.config import HASH_DIGITS, config_from_dict
from ..core.constants import MEMBERSHIP
from ..core.errors import BadInput
from ..core.io import sha256_file
from ..core.jsonio import MAX_RECORD_BYTES, read_json
from ..core.yamlio import read_yaml
from ..metrics.roc import membership_metrics
from ..models.hub_cache import hub_id_of
from ..privacy.claims import claim_of, formal_epsilon
from ..runs.result_schema import OUTSIDE, AttackResult
from ..runs.store import find_results
from .order import is_private

LOG = logging.getLogger(__name__)


@dataclass
class Result:
    path: Path                     # the result.json file
    res: AttackResult              # its content, parsed once
    #: from the bench's cells (None for results read alone): the suite entry's name when it is not the method's
    variant: str | None = None
    #: likewise: the cell's ε on the suite's ``epsilons`` axis (the run's accounted ε is at most this)
    axis_epsilon: float | None = None

    def __getattr__(self, name: str):
        """The result's own fields (``r.method``, ``r.metrics``, ``r.privacy``, …): those of :attr:`res`."""
        if name.startswith("__") or "res" not in self.__dict__:  # copy/pickle probe an instance without its fields
            raise AttributeError(name)
        return getattr(self.res, name)

    @property
    def method_label(self) -> str:
        """The method as reports name it: a variant's suite entry (``dpdm-lora``), else :attr:`method`."""
        return self.variant or self.res.method

    @property
    def attack(self) -> str:
        """The attack's label: its name, with ``@variant`` for a non-default variant (``lira@online``)."""
        return self.res.label

    @property
    def formal_epsilon(self) -> float | None:
        """The formal ε only: a conditional or claimed ε is not a guarantee."""
        return formal_epsilon(self.res.privacy)

    @property
    def claim(self) -> dict | None:
        """The result's ε claim ``{kind, epsilon, delta, basis}`` (formal, conditional or claimed), or None."""
        return claim_of(self.res.privacy)

    @property
    def is_copy(self) -> bool:
        return bool(self.res.copy_of)

    def key(self) -> tuple:
        r = self.res
        # by settings, not attack_hash: a rerun with the same settings and a new hash replaces the stale result
        cfg = json.dumps(r.attack_config, sort_keys=True, default=str) if r.attack_config else r.attack_hash
        return (r.method, r.target, r.attack, r.dataset, r.preset, r.seed, str(self.run_dir.resolve()), cfg)

    def target_key(self) -> tuple:
        """(dataset, seed, model under test, target): one side-by-side row, one audit family. The model is the run
        directory, or for an external model (one directory per attack) its weights' and records' hashes."""
        prov = self.res.provenance
        if self.res.is_outside and prov is not None and prov.weights_sha256:
            return (self.dataset, self.seed, f"external:{prov.weights_sha256}:{prov.records_sha256}", self.target)
        return (self.dataset, self.seed, str(self.run_dir.resolve()), self.target)

    @property
    def outside_model(self) -> str | None:
        """An outside model's name for tables: its folder's name (a Hub id as given); None for privbench's own."""
        prov = self.res.provenance
        model = (prov.model or {}) if prov is not None else {}
        if not self.res.is_outside or not model:
            return None
        path = Path(str(model.get("path") or "?"))
        hub = hub_id_of(path)
        if hub:
            return hub
        return path.name if path.is_dir() or not path.suffix else f"{path.parent.name}/{path.name}"

    @property
    def outside_records(self) -> str | None:
        """An outside model's records for tables: ``members.npz / heldout.npz`` with their pixel range."""
        prov = self.res.provenance
        if not self.res.is_outside or prov is None or not (prov.members or prov.nonmembers):
            return None
        names = [Path(str((d or {}).get("spec") or "?")).name for d in (prov.members, prov.nonmembers)]
        rng = (prov.members or {}).get("range")
        return " / ".join(names) + (f" ({rng})" if rng else "")

    def label(self) -> str:
        return f"{self.attack} on {self.method_label}/{self.target} ({self.dataset}, {self.preset}, seed {self.seed})"

    # ------------------------------------------------------------------ locations
    @cached_property
    def run_dir(self) -> Path:
        p = self.path.resolve()
        if p.parent.parent.name == "attacks" and (p.parents[2] / "config.yaml").exists():
            return p.parents[2]
        if (p.parent / "config.yaml").exists():
            return p.parent
        if self.res.run_dir is None:
            return p.parent
        rd = Path(self.res.run_dir)
        return rd.resolve() if rd.exists() else p.parent

    @cached_property
    def attack_dir(self) -> Path:
        if not self.is_copy:
            return self.path.resolve().parent
        c = Path(self.res.copy_of)
        for cand in (c.parent, self.run_dir / "attacks" / c.parent.name):
            if cand.is_dir():
                return cand
        return self.path.resolve().parent

    @cached_property
    def scores_file(self) -> Path | None:
        cands = [self.attack_dir / "scores.npz"]
        if self.res.scores_path:
            sp = Path(self.res.scores_path)
            cands += [sp, self.run_dir / sp.name] if not sp.is_absolute() else [sp]
        for c in cands:
            if c.is_file():
                return c
        return None

    def artifact(self, name: str) -> Path | None:
        """An artifact (PNG) of this result, looked up next to the result first."""
        v = self.res.artifacts.get(name)
        if not v:
            return None
        p = Path(str(v))
        for c in (self.attack_dir / p.name, p):
            if c.is_file():
                return c
        return None

    def load_scores(self) -> tuple[np.ndarray, np.ndarray]:
        """(scores, labels) of a membership result; BadInput if it has none."""
        f = self.scores_file
        if f is None:
            raise BadInput(f"{self.path}: no scores.npz found for this result (looked next to it and at its "
                           f"scores_path); audit needs a membership attack's scores")
        try:
            with np.load(f) as z:
                if "scores" not in z or "labels" not in z:
                    raise BadInput(f"{f}: holds no membership scores (needs 'scores' and 'labels'); "
                                   f"{self.attack} is not a membership attack")
                return np.asarray(z["scores"], dtype=np.float64), np.asarray(z["labels"]).astype(np.int64)
        except (OSError, ValueError) as e:
            raise BadInput(f"{f}: unreadable scores file ({type(e).__name__})") from None

    @cached_property
    def config(self) -> dict:
        """The run's stored config.yaml ({} when absent or unreadable)."""
        p = self.run_dir / "config.yaml"
        if not p.is_file():
            return {}
        try:
            d = read_yaml(p, str(p))  # no anchors/aliases: a results folder is user input
        except BadInput:
            return {}
        return d if isinstance(d, dict) else {}

    @cached_property
    def config_hash(self) -> str | None:
        """The run's training hash: the one its folder is named by (``METHOD-DATASET-HASH``), else recomputed."""
        cfg = self.config
        if not cfg:
            return None
        named = hash_in_name(self.run_dir.name, cfg)
        if named is not None:
            return named
        try:
            # imports the methods and attacks (and torch): only for a folder not named by its hash
            return config_from_dict(cfg).training_hash()
        except Exception:  # noqa: BLE001 - provenance only
            return None


def cell_file(p: str | None, base: Path | None) -> Path | None:
    """A bench cell's result file: as recorded, else relative to the bench directory ``base``; None if absent."""
    if not p:
        return None
    path = Path(p)
    if not path.is_absolute() and not path.exists() and base is not None:
        path = base / path
    return path if path.is_file() else None


def hash_in_name(folder: str, cfg: dict) -> str | None:
    """The training hash in a run folder named ``<method>-<dataset>-<12 hex digits>`` for the config, else None."""
    head = f"{cfg.get('method')}-{cfg.get('dataset')}-"
    tail = folder[len(head):] if folder.startswith(head) else ""
    return tail if len(tail) == HASH_DIGITS and all(c in "0123456789abcdef" for c in tail) else None


# ------------------------------------------------------------------ verification (docs/cli.md §3)

#: membership metrics recomputed from scores.npz; equal to what result.json records up to float rounding
_VERIFIED_METRICS = ("auc", "asr", "tpr_at_1pct_fpr", "tpr_at_0_1pct_fpr")
_TOL = 1e-9


def _target_checkpoints(target: str) -> list[str]:
    """The checkpoint names of a target's networks: its own name (``client:0`` → ``client0``); a PFDM pipeline
    is the client's network below t0 and the shared one above."""
    if target.startswith("pipeline:"):
        return [f"client{target.split(':', 1)[1]}", "shared"]
    return [target.replace(":", "")]


def released_start_weight(run_dir: Path, target: str | None = None) -> float | None:
    """The largest ``ema_start_weight`` (``ema_decay ** steps``) in the checkpoint manifests of ``target``'s
    networks, else of every network of the run; None when none records it."""
    weights = []
    paths = sorted((Path(run_dir) / "checkpoints").glob("*.state.json"))
    if target is not None:
        own = [p for p in paths if p.name.removesuffix(".state.json") in _target_checkpoints(target)]
        paths = own or paths
    for path in paths:
        try:
            w = read_json(path, "manifest", MAX_RECORD_BYTES).get("ema_start_weight")
        except (BadInput, AttributeError):  # an unreadable manifest records nothing
            continue
        if isinstance(w, (int, float)) and not isinstance(w, bool):
            weights.append(float(w))
    return max(weights) if weights else None


def verify_result(r: Result) -> None:
    """Believe a result only once its files agree with it (the rule: docs/cli.md §3, "What is verified")."""
    recorded = r.res.sha256
    if recorded is None:
        return
    for name, digest in recorded.items():
        f = r.attack_dir / Path(str(name)).name
        if not f.is_file():
            what = "not a regular file" if f.exists() else "missing"
            raise BadInput(f"{f}: {what}, but {r.path} records its SHA-256; the result cannot be verified (re-run "
                           f"the attack)")
        if sha256_file(f) != digest:
            raise BadInput(f"{f}: its SHA-256 differs from the one {r.path} records: the file was changed after "
                           f"the attack wrote it (re-run the attack)")
    if r.kind == MEMBERSHIP and "scores.npz" in recorded:
        key = (str(r.path.resolve()), r.path.stat().st_mtime_ns, recorded.get("scores.npz"))
        if key not in _VERIFIED:  # once per process per unchanged file (check loads its results twice)
            _check_metrics(r)
            _VERIFIED.add(key)


_VERIFIED: set[tuple] = set()


def _check_metrics(r: Result) -> None:
    """The recorded membership metrics against the ones recomputed from scores.npz (BadInput on a mismatch)."""
    scores, labels = r.load_scores()
    boot = r.res.attack_config.get("bootstrap")
    boot = boot if isinstance(boot, int) and not isinstance(boot, bool) and 0 < boot <= 100_000 else 0
    keys = list(_VERIFIED_METRICS)
    rule = r.res.tpr_rule or "le"
    if rule not in ("le", "lt"):
        raise BadInput(f"{r.path}: tpr_rule {rule!r} is not one privbench writes (le, lt)")
    try:
        got = membership_metrics(scores, labels, bootstrap=boot, seed=r.seed, tpr_rule=rule)
    except BadInput as e:
        raise BadInput(f"{r.scores_file}: {e}") from None
    where = f"{r.path} records"
    for k in keys:
        if k not in r.metrics:
            continue
        if not _same(r.metrics[k], got[k]):
            raise BadInput(f"{r.path}: metrics.{k} = {r.metrics[k]!r} but {r.scores_file.name} gives {got[k]:.6g}: "
                           f"the result was edited after the attack wrote it (re-run the attack)")
        ci = (r.metrics.get("ci95") or {}).get(k)
        if boot and ci is not None and got["ci95"][k] is not None:
            if not (isinstance(ci, list) and len(ci) == 2 and all(_same(a, b) for a, b in zip(ci, got["ci95"][k]))):
                raise BadInput(f"{r.path}: metrics.ci95.{k} = {ci!r} but {r.scores_file.name} gives "
                               f"[{got['ci95'][k][0]:.6g}, {got['ci95'][k][1]:.6g}] ({where} bootstrap={boot}, "
                               f"seed {r.seed}): the result was edited after the attack wrote it")


def _same(recorded, computed) -> bool:
    if isinstance(recorded, bool) or not isinstance(recorded, (int, float)):
        return False
    a, b = float(recorded), float(computed)
    if np.isnan(a) or np.isnan(b):
        return bool(np.isnan(a) and np.isnan(b))
    return abs(a - b) <= _TOL * max(1.0, abs(b))


def read_result(path: str | Path) -> Result:
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise BadInput(f"{path}: no such file")
    data = read_json(path, "result", MAX_RECORD_BYTES)
    try:
        return Result(path, AttackResult.from_json(data))
    except BadInput as e:
        raise BadInput(f"{path}: {e}") from None


def read_cell_result(cell: BenchCell, path: str | Path) -> Result:
    """The result of a bench cell at ``path``, with the cell's variant and axis ε."""
    r = read_result(path)
    r.variant = cell.variant or None
    r.axis_epsilon = cell.epsilon
    return r


def _mtime(r: Result) -> float:
    try:
        return r.path.stat().st_mtime
    except OSError:
        return 0.0


def dedupe(results: Iterable[Result]) -> list[Result]:
    """One result per (run, target, attack, settings): the newest attack folder's own file wins (the run
    directory's copy of the latest result only counts when nothing else does)."""
    best: dict[tuple, Result] = {}
    order: list[tuple] = []
    for r in results:
        k = r.key()
        if k not in best:
            best[k] = r
            order.append(k)
        elif (best[k].is_copy, -_mtime(best[k])) > (r.is_copy, -_mtime(r)):
            # the bench's name and ε for the run survive the de-duplication
            r.variant = r.variant or best[k].variant
            r.axis_epsilon = best[k].axis_epsilon if r.axis_epsilon is None else r.axis_epsilon
            best[k] = r
        else:
            best[k].variant = best[k].variant or r.variant
            if best[k].axis_epsilon is None:
                best[k].axis_epsilon = r.axis_epsilon
    return [best[k] for k in order]


def load_results(paths: list[str | Path]) -> list[Result]:
    """RESULTS arguments → de-duplicated, verified results, sorted by (dataset, seed, method, target, attack).
    Other ``.json`` files inside a directory are skipped; a file named on the command line must be a result."""
    if not paths:
        raise BadInput("no RESULTS given: pass run directories, bench directories or result.json files")
    out: list[Result] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise BadInput(f"{p}: no such file or directory")
        if p.is_dir() and (p / "bench.json").is_file():
            out.extend(_bench_results(p))
            continue
        for f in find_results([p]):
            out.append(read_result(f))
    res = dedupe(out)
    res.sort(key=lambda r: (r.dataset, r.seed, r.method, r.method_label, r.target, r.attack))
    for r in res:
        verify_result(r)
    return res


def _bench_results(bench_dir: Path) -> list[Result]:
    """Results of a bench directory: the cells listed in bench.json (plus result.json files found below it)."""
    out, lost = [], []
    cells = cells_of(read_bench(bench_dir))
    for c in cells:
        if c.kind == "attack" and c.status == "done" and c.result_path:
            p = Path(c.result_path)
            if not p.is_absolute() and not p.exists():
                p = bench_dir / c.result_path
            if p.is_file():
                out.append(read_cell_result(c, p))
            else:
                lost.append(c.result_path)
    if lost:  # a moved or pruned run store: said, not silently left out of the tables
        LOG.warning(f"privbench: warning: {bench_dir}: {len(lost)} finished attack cell(s) have no result file "
                    f"(first: {lost[0]}); they are not in what follows")
    for f in sorted(bench_dir.rglob("result.json")):
        out.append(read_result(f))
    if not out and not any(c.status == "done" for c in cells):
        raise BadInput(f"{bench_dir}: the bench has no finished results yet")
    return out  # empty for a bench of FID cells only


def read_bench(bench_dir: str | Path) -> dict:
    p = Path(bench_dir) / "bench.json"
    if not p.exists() and not p.is_symlink():
        raise BadInput(f"{bench_dir}: not a bench directory (no bench.json)")
    d = read_json(p, "bench", MAX_RECORD_BYTES)
    if not isinstance(d, dict):
        raise BadInput(f"{p}: not a bench file")
    try:
        cells_of(d)  # every cell readable before a report reads any
    except BadInput as e:
        raise BadInput(f"{p}: {e}") from None
    return d


def role_of(r: Result, bench: dict | None = None) -> str:
    """'private', 'baseline' (the suite's word first) or, for an outside model, :data:`OUTSIDE`."""
    roles = (bench or {}).get("roles") or {}
    if r.method in roles:
        return roles[r.method]
    if r.res.is_outside:
        return OUTSIDE
    return "private" if is_private(r.method) else "baseline"
