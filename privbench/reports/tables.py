"""The report's tables (pandas): side by side per target, every result, audits, the accountant, provenance.
Columns and order: docs/benchmarks.md, "The side-by-side table"; ``eps_lb`` and the flag: docs/accountants.md §3.4.
``noise_source`` labels seeded privacy noise as reproducible benchmark noise, not a deployable release.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..bench.cell_schema import cells_of
from ..core.constants import MEMBERSHIP, MEMORIZATION, RECONSTRUCTION, SEEDED_NOISE_LABEL
from ..core.errors import BadInput
from ..core.jsonio import MAX_RECORD_BYTES, read_json
from ..metrics.split_verdict import flagged
from ..privacy.claims import as_number, claim_of, compared_claim, formal_epsilon
from ..privacy.compare import (
    KIND_TEXT,
    bound_confidence,
    comparable_claim,
    exceeds,
    flag_delta,
    formal_relation,
    membership_flag_bounds,
)
from ..runs.result_schema import OUTSIDE, PrivacyClaim
from .cells import ci, num, resolvable
from .cells import metric_value as cell_value
from .collect import Result, cell_file, released_start_weight, role_of
from .headline import headlines, result_delta
from .order import attack_rank, method_rank, target_rank

CONFIDENCE = 0.95
_CI_KEYS = {"auc": "auc", "asr": "asr", "tpr_at_1pct_fpr": "tpr_1pct", "tpr_at_0_1pct_fpr": "tpr_0_1pct"}


def rel(p, base=None) -> str:
    """``p`` relative to ``base`` (the report's source directory, else the working directory), with ``..`` where
    needed: a report never holds an absolute path."""
    p = Path(p).resolve()
    b = Path(base).resolve() if base is not None else Path.cwd().resolve()
    try:
        return p.relative_to(b).as_posix() or "."
    except ValueError:
        pass
    try:
        return Path(os.path.relpath(p, b)).as_posix()
    except ValueError:  # another drive (Windows): the name is all that can be said without an absolute path
        return p.name


def conditional_columns(p: PrivacyClaim | None) -> dict:
    """The columns of a conditional or claimed ε (never ``formal_epsilon``: no guarantee) and the noise source."""
    claim = claim_of(p)
    p = p or PrivacyClaim()
    cond = p.conditional_on
    # a privbench method's claim without a noise source (public-only's) is shown as seeded; a user's claim about an
    # outside model says nothing about privbench's noise
    native = claim is not None and claim["kind"] != "claimed_by_user"
    source = p.noise_source or ("seeded" if native else None)
    label = p.noise_label or (SEEDED_NOISE_LABEL if source == "seeded" else None)
    claimed = claim is not None and claim["kind"] in ("claimed_by_paper", "claimed_by_user")
    return {"conditional_epsilon": as_number(p.conditional_epsilon),
            "conditional_on": ", ".join(cond) if isinstance(cond, list) else cond,
            "claimed_epsilon": claim["epsilon"] if claimed else None,
            "claim_kind": claim["kind"] if claimed else None,
            "noise_source": f"{source} ({label})" if source and label else source}


# ------------------------------------------------------------------------------------------ FID records

def fid_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "fid"


def run_fid_files(run_dirs: list[Path]) -> list[Path]:
    """Every FID record (written by ``bench``) in the given runs' folders."""
    files: list[Path] = []
    for rd in sorted({Path(r).resolve() for r in run_dirs}):
        files += sorted(fid_dir(rd).glob("*.json"))
    return files


def load_fids(files: list[Path]) -> dict[tuple, dict]:
    """FID records → {(run_dir, target): record} (newest wins)."""
    out: dict[tuple, tuple[float, dict]] = {}
    for f in files:
        try:
            rec = read_json(f, "FID record", MAX_RECORD_BYTES)
        except BadInput:
            continue
        if not isinstance(rec, dict):
            continue
        key = (str(Path(f).resolve().parents[1]), rec.get("target"))
        mt = f.stat().st_mtime
        if key not in out or mt > out[key][0]:
            out[key] = (mt, rec)
    return {k: v for k, (_, v) in out.items()}


# ------------------------------------------------------------------------------------------ audits

def _audits(results: list[Result]) -> dict[int, dict]:
    """Per membership result: CP and one-run bounds at 95 %, its bounds in the target's headline family, the
    headline, and the flag's bounds (2k per target at 1 − α/(2k), at the δ of the comparable claim)."""
    # lazy: privacy.audit loads scipy.optimize/stats
    from ..privacy.audit import clopper_pearson_epsilon, one_run_epsilon

    groups: dict[tuple, list[Result]] = {}
    for r in results:
        if r.kind == MEMBERSHIP and r.scores_file is not None:
            groups.setdefault(_tkey(r), []).append(r)
    heads = headlines(results, confidence=CONFIDENCE)
    out: dict[int, dict] = {}
    for key, rs in groups.items():
        k = len(rs)
        head = heads.get(key)
        corrected = {(b["result"], b["bound"]): b["epsilon_lower_bound"] for b in (head or {}).get("bounds", [])}
        for r in rs:
            try:
                s, y = r.load_scores()
            except Exception:  # noqa: BLE001 - a result without readable scores has no audit
                continue
            d = result_delta(r)
            cp = clopper_pearson_epsilon(s, y, delta=d, confidence=CONFIDENCE)
            one = one_run_epsilon(s, y, delta=d, confidence=CONFIDENCE)
            cpb, oneb = corrected.get((str(r.path), "clopper_pearson")), corrected.get((str(r.path), "one_run"))
            claim, flag_bounds, conf_f, d_flag = None, {}, bound_confidence(CONFIDENCE, 2 * k), None
            stated = compared_claim(r.privacy)  # formal, or claimed by a paper or the user
            if stated is not None:
                claim = comparable_claim(stated["epsilon"], d, formal_relation(r.privacy))
                claim["kind"] = stated["kind"]
                d_flag = flag_delta(d, claim)
                if claim["testable"]:
                    flag_bounds = membership_flag_bounds(s, y, delta=d_flag, confidence=conf_f)
            out[id(r)] = {"cp": cp, "one_run": one, "cp_bonf": cpb, "one_run_bonf": oneb, "k": k, "delta": d,
                          "confidence_bonf": head["bound_confidence"] if head else None, "headline": head,
                          "claim": claim, "flag_bounds": flag_bounds, "flag_bound_confidence": conf_f,
                          "flag_delta": d_flag}
    return out


def _exceeds(audit: dict) -> bool:
    """Any of one result's flag bounds above the comparable ε."""
    return bool(audit["claim"] is not None and exceeds(audit["flag_bounds"], audit["claim"]))


def _headline_source(h: dict | None) -> str | None:
    """Where a headline came from: "<bound> of <attack>" (None without a headline or for a bound of 0)."""
    if not h or h["bound"] is None:
        return None
    return f"{KIND_TEXT[h['bound']]} of {h['attack']}"


def _relation_text(claim: dict) -> str:
    return (f"formal {claim['formal']}; membership game {claim['empirical']}; {claim['conversion']}")


def _mtime(r: Result) -> float:
    try:
        return r.path.stat().st_mtime
    except OSError:
        return 0.0


def _tkey(r: Result) -> tuple:
    return r.target_key()


# ------------------------------------------------------------------------------------------ tables

#: the accountant table's basis of a target with no privacy claim, by its role (other roles: non-private)
NO_CLAIM_BASIS = {OUTSIDE: "none claimed: external model (trained outside privbench)"}


@dataclass
class Tables:
    results: list[Result]
    bench: dict | None = None
    fids: dict[tuple, dict] = field(default_factory=dict)
    audits: dict[int, dict] = field(default_factory=dict)
    base: Path | None = None       # paths in the tables are relative to it (the report's source directory)
    fid_labels: dict[str, str] = field(default_factory=dict)  # run dir → its suite row, for runs no attack names

    @classmethod
    def build(cls, results: list[Result], bench: dict | None = None, base=None) -> "Tables":
        base = Path(base) if base is not None else None
        fid_runs = _fid_cell_runs(bench, base)
        if bench and bench.get("cells") is not None:
            # a bench's own FID cells only: a run folder shared with other benches may hold other FIDs
            files = [f for c in cells_of(bench) if c.kind == "fid" and c.status == "done"
                     for f in [cell_file(c.result_path, base)] if f is not None]
        else:
            files = run_fid_files([r.run_dir for r in results])
        fids = load_fids(files)
        return cls(results, bench, fids, _audits(results), base, {str(k.resolve()): v for k, v in fid_runs.items()})

    # -------------------------------------------------------------- long: one row per result
    def results_frame(self) -> pd.DataFrame:
        rows = []
        for r in self.sorted_results():
            m = r.metrics
            ci = m.get("ci95") or {}
            p = r.privacy
            a = self.audits.get(id(r))
            row: dict[str, Any] = {
                "dataset": r.dataset, "seed": r.seed, "preset": r.preset, "role": role_of(r, self.bench),
                "method": r.method_label, "registered_method": r.method, "target": r.target, "attack": r.attack,
                "kind": r.kind,
                "n_members": r.n_members, "n_nonmembers": r.n_nonmembers,
            }
            n_non = r.n_nonmembers
            for k, short in _CI_KEYS.items():
                # a TPR the non-member count cannot resolve is empty (reports.cells)
                row[short] = cell_value(m, k, n_non)
                c = ci.get(k) if resolvable(k, n_non) else None
                row[f"{short}_ci_lo"] = as_number(c[0]) if c else None
                row[f"{short}_ci_hi"] = as_number(c[1]) if c else None
            cal = r.calibrated or {}
            row["calibrated_auc"] = as_number(cal.get("auc"))
            for k in ("memorized_fraction", "n_generated", "reid_rate", "reid_chance", "psnr", "ssim"):
                row[k] = as_number(m.get(k))
            row["formal_epsilon"] = formal_epsilon(p)
            row["formal_delta"] = as_number(p and p.delta)
            row["epsilon_basis"] = p and p.basis
            row.update(conditional_columns(p))
            # the target's headline (family-wise), then this result's own bounds at 95 % each (details)
            row["eps_lb"] = a["headline"]["epsilon_lower_bound"] if a and a["headline"] else None
            row["eps_lb_cp"] = a["cp"]["epsilon_lower_bound"] if a else None
            row["eps_lb_cp_ceiling"] = a["cp"]["ceiling"] if a else None
            row["eps_lb_one_run"] = a["one_run"]["epsilon_lower_bound"] if a else None
            row["eps_lb_one_run_ceiling"] = a["one_run"]["ceiling"] if a else None
            row["audit_delta"] = a["delta"] if a else None
            row["attack_hash"] = r.attack_hash
            row["config_hash"] = r.config_hash
            row["run_dir"] = rel(r.run_dir, self.base)
            row["result"] = rel(r.path, self.base)
            rows.append(row)
        return pd.DataFrame(rows)

    def sorted_results(self) -> list[Result]:
        return sorted(self.results, key=lambda r: (r.dataset, r.seed, role_of(r, self.bench) != "private",
                                                    method_rank(r.method), r.method, r.method_label,
                                                    target_rank(r.method, r.target), attack_rank(r.attack),
                                                    r.attack))

    # -------------------------------------------------------------- side by side: one row per target
    def targets(self) -> list[dict]:
        """Per (dataset, seed, run, target): target-level figures and the membership attacks' rows."""
        blocks: dict[tuple, dict] = {}
        for r in self.sorted_results():
            key = _tkey(r)
            b = blocks.get(key)
            if b is None:
                b = blocks[key] = {
                    "dataset": r.dataset, "seed": r.seed, "preset": r.preset, "method": r.method_label,
                    "registered_method": r.method, "target": r.target,
                    "role": role_of(r, self.bench), "run_dir": str(r.run_dir), "config_hash": r.config_hash,
                    "axis_epsilon": r.axis_epsilon, "privacy": None, "attacks": [], MEMORIZATION: None, RECONSTRUCTION: None, "fid": None,
                    "model": r.outside_model, "records": r.outside_records,
                }
            if r.privacy and not b["privacy"]:
                b["privacy"] = r.privacy
            # one entry per (target, attack): the newest of several settings; results.csv lists them all
            if r.kind == MEMBERSHIP:
                m = r.metrics
                entry = {"attack": r.attack, "metrics": m, "ci": m.get("ci95") or {},
                         "audit": self.audits.get(id(r)), "result": r}
                old = next((i for i, a in enumerate(b["attacks"]) if a["attack"] == r.attack), None)
                if old is None:
                    b["attacks"].append(entry)
                elif _mtime(r) > _mtime(b["attacks"][old]["result"]):
                    b["attacks"][old] = entry
            elif r.kind in (MEMORIZATION, RECONSTRUCTION):
                if not b[r.kind] or _mtime(r) > _mtime(b[r.kind]["result"]):
                    b[r.kind] = {"metrics": r.metrics, "result": r}
        # FID: on the row of the FID's own target; a target that has FID but no attack row gets its own row
        for (rd, tname), rec in self.fids.items():
            hit = [b for b in blocks.values() if b["run_dir"] == rd and b["target"] == tname]
            if hit:
                hit[0]["fid"] = rec
                continue
            same = [b for b in blocks.values() if b["run_dir"] == rd]
            if not same:
                continue
            s = same[0]
            key = (s["dataset"], s["seed"], rd, tname)
            blocks[key] = {**{k: s[k] for k in ("dataset", "seed", "preset", "method", "registered_method", "role",
                                                "run_dir", "config_hash", "axis_epsilon", "model", "records")},
                           "target": tname, "privacy": None, "attacks": [], MEMORIZATION: None,
                           RECONSTRUCTION: None, "fid": rec}
        out = list(blocks.values())
        out.sort(key=lambda b: (b["dataset"], b["seed"], b["role"] != "private", method_rank(b["registered_method"]),
                                b["registered_method"], b["method"], target_rank(b["registered_method"], b["target"])))
        for b in out:
            b["attacks"].sort(key=lambda a: (attack_rank(a["attack"]), a["attack"]))
            self._headline(b)
            b["noise_source"] = conditional_columns(b["privacy"])["noise_source"]
            b["claim"] = claim_of(b["privacy"])
            b["formal_epsilon"] = formal_epsilon(b["privacy"])
            claim = compared_claim(b["privacy"])
            hit = (None if claim is None or b["eps_lb"] is None
                   else any(_exceeds(a["audit"]) for a in b["attacks"] if a["audit"]))
            b["exceeds_claim"] = hit
            b["exceeds_formal"] = hit if claim is not None and claim["kind"] == "formal" else None
            claims = [a["audit"]["claim"] for a in b["attacks"] if a["audit"] and a["audit"]["claim"]]
            b["comparable_epsilon"] = claims[0]["comparable_epsilon"] if claims else None
            b["neighbouring_relation"] = _relation_text(claims[0]) if claims else None
        return out

    @staticmethod
    def _headline(b: dict) -> None:
        """The target's headline ε lower bound into its block: ``headline`` (the record) and its ``eps_lb*`` keys."""
        head = next((a["audit"]["headline"] for a in b["attacks"] if a["audit"] and a["audit"]["headline"]), None)
        b["headline"] = head
        b["eps_lb"] = head["epsilon_lower_bound"] if head else None
        b["eps_lb_attack"] = head["attack"] if head else None  # None for a bound of 0: it came from no attack
        b["eps_lb_bound"] = head["bound"] if head else None
        for kind, col in (("clopper_pearson", "eps_lb_cp"), ("one_run", "eps_lb_one_run")):
            vals = [x["epsilon_lower_bound"] for x in (head or {}).get("bounds", []) if x["bound"] == kind]
            b[col] = max(vals) if vals else None

    def side_by_side_frame(self) -> pd.DataFrame:
        rows = []
        blocks = self.targets()
        attacks = sorted({a["attack"] for b in blocks for a in b["attacks"]}, key=lambda a: (attack_rank(a), a))
        for b in blocks:
            p = b["privacy"]
            row: dict[str, Any] = {"dataset": b["dataset"], "seed": b["seed"], "role": b["role"],
                                   "method": b["method"], "registered_method": b["registered_method"],
                                   "target": b["target"]}
            if any(x.get("model") for x in blocks):  # outside models: which model and which records
                row.update(model=b.get("model"), records=b.get("records"))
            row.update(formal_epsilon=formal_epsilon(p), formal_delta=as_number(p and p.delta),
                       epsilon_basis=p and p.basis)
            row.update(conditional_columns(p))
            by = {a["attack"]: a for a in b["attacks"]}
            for att in attacks:
                a = by.get(att)
                m = a["metrics"] if a else {}
                ci = a["ci"] if a else {}
                for k, short in _CI_KEYS.items():
                    hide = a is not None and not resolvable(k, a["result"].n_nonmembers)
                    row[f"{att}_{short}"] = None if hide else as_number(m.get(k))
                    if k != "asr":
                        c = None if hide else ci.get(k)
                        row[f"{att}_{short}_ci_lo"] = as_number(c[0]) if c else None
                        row[f"{att}_{short}_ci_hi"] = as_number(c[1]) if c else None
            mem = (b[MEMORIZATION] or {}).get("metrics") or {}
            row["memorized_fraction"] = as_number(mem.get("memorized_fraction"))
            row["memorization_n_generated"] = as_number(mem.get("n_generated"))
            rec = (b[RECONSTRUCTION] or {}).get("metrics") or {}
            row["reconstruction_reid_rate"] = as_number(rec.get("reid_rate"))
            row["reconstruction_reid_chance"] = as_number(rec.get("reid_chance"))
            row["reconstruction_psnr"] = as_number(rec.get("psnr"))
            f = b["fid"] or {}
            for k in ("overall", "majority", "minority", "average"):
                row[f"fid_{k}"] = as_number(f.get(k))
            row["fid_extractor"] = f.get("extractor")
            h = b["headline"] or {}
            row["eps_lb"] = b["eps_lb"]
            row["eps_lb_attack"] = b["eps_lb_attack"]
            row["eps_lb_bound"] = b["eps_lb_bound"]
            row["eps_lb_confidence"] = h.get("confidence")
            row["eps_lb_delta"] = h.get("delta")
            row["eps_lb_family_size"] = h.get("family_size")
            row["eps_lb_statement"] = h.get("statement")
            row["eps_lb_cp"] = b["eps_lb_cp"]
            row["eps_lb_one_run"] = b["eps_lb_one_run"]
            row["eps_lb_exceeds_formal"] = b["exceeds_formal"]
            row["eps_lb_exceeds_claim"] = b["exceeds_claim"]
            row["flag_confidence"] = CONFIDENCE if b["exceeds_claim"] is not None else None
            row["flag_comparable_epsilon"] = b["comparable_epsilon"]
            row["neighbouring_relation"] = b["neighbouring_relation"]
            row["config_hash"] = b["config_hash"]
            row["run_dir"] = rel(b["run_dir"], self.base)
            rows.append(row)
        return pd.DataFrame(rows)

    # -------------------------------------------------------------- audit, accountant, provenance
    def audit_frame(self) -> pd.DataFrame:
        rows = []
        for r in self.sorted_results():
            a = self.audits.get(id(r))
            if not a:
                continue
            cp, one = a["cp"], a["one_run"]
            e = r.formal_epsilon
            claim = compared_claim(r.privacy)
            other = conditional_columns(r.privacy)
            rows.append({
                "dataset": r.dataset, "seed": r.seed, "model": r.outside_model, "records": r.outside_records,
                "method": r.method_label, "registered_method": r.method,
                "target": r.target, "attack": r.attack, "epsilon_lower_bound": cp["epsilon_lower_bound"], "ceiling": cp["ceiling"],
                "confidence": cp["confidence"], "delta": cp["delta"], "threshold_selection": cp["threshold_selection"],
                "one_run_epsilon_lower_bound": one["epsilon_lower_bound"], "one_run_ceiling": one["ceiling"],
                "one_run_guesses": one["n_guesses"], "one_run_correct": one["n_correct"],
                # the target's headline and this result's two bounds in its family
                "headline_eps_lb": a["headline"]["epsilon_lower_bound"] if a["headline"] else None,
                "headline_confidence": a["headline"]["confidence"] if a["headline"] else None,
                "headline_from": _headline_source(a["headline"]),
                "corrected_confidence": a["confidence_bonf"],
                "corrected_eps_lb_cp": a["cp_bonf"], "corrected_eps_lb_one_run": a["one_run_bonf"],
                "formal_epsilon": e, "conditional_epsilon": other["conditional_epsilon"],
                "claimed_epsilon": other["claimed_epsilon"], "claim_kind": other["claim_kind"],
                "exceeds_formal": None if e is None else _exceeds(a),
                "exceeds_claim": None if claim is None else _exceeds(a),
                "n_members": cp["n_members"], "n_nonmembers": cp["n_nonmembers"],
                # the flag: one family per target (2k bounds), each at 1 − α/(2k), against the comparable claim
                "flag_confidence": None if claim is None else CONFIDENCE,
                "flag_family_size": None if claim is None else 2 * a["k"],
                "flag_bound_confidence": None if claim is None else a["flag_bound_confidence"],
                "flag_delta": a["flag_delta"],
                "flag_eps_lb_cp": a["flag_bounds"].get("clopper_pearson"),
                "flag_eps_lb_one_run": a["flag_bounds"].get("one_run"),
                "comparable_epsilon": a["claim"]["comparable_epsilon"] if a["claim"] else None,
                "neighbouring_relation": _relation_text(a["claim"]) if a["claim"] else None,
            })
        return pd.DataFrame(rows)

    def split_check_frame(self) -> pd.DataFrame:
        """One row per target whose results carry ``attack --model``'s member/non-member shift check."""
        rows, seen = [], set()
        for r in self.sorted_results():
            sc = r.split_check
            if not isinstance(sc, dict) or "auc" not in sc:
                continue
            ci = sc.get("ci95") or [None, None]
            key = (r.dataset, r.seed, r.method_label, r.target, sc.get("auc"), tuple(ci))
            if key in seen:
                continue
            seen.add(key)
            rows.append({"dataset": r.dataset, "seed": r.seed, "model": r.outside_model,
                         "records": r.outside_records, "method": r.method_label, "target": r.target,
                         "auc": sc.get("auc"), "ci95_low": ci[0], "ci95_high": ci[1], "p_value": sc.get("p_value"),
                         "detectable_auc": sc.get("detectable_auc"), "shift": flagged(sc),
                         "material": bool(sc.get("material")), "bound": sc.get("bound"),
                         "folds": sc.get("folds"), "n_members": sc.get("n_members"),
                         "n_nonmembers": sc.get("n_nonmembers"), "verdict": sc.get("verdict")})
        return pd.DataFrame(rows)

    def accountant_frame(self) -> pd.DataFrame:
        rows, seen = [], set()
        for b in self.targets():
            p = b["privacy"]
            key = (b["run_dir"], b["target"])
            if key in seen:
                continue
            seen.add(key)
            row = {"dataset": b["dataset"], "seed": b["seed"], "method": b["method"],
                   "registered_method": b["registered_method"], "target": b["target"], "role": b["role"]}
            if p:
                row.update({"epsilon": formal_epsilon(p), "delta": as_number(p.delta), "accountant": p.accountant,
                            "basis": p.basis})
                for k, v in p.to_json().items():
                    if k not in ("epsilon", "delta", "accountant", "basis") and not isinstance(v, (dict, list)):
                        row[k] = v
                row.update({k: v for k, v in conditional_columns(p).items() if k in ("claimed_epsilon",
                                                                                  "claim_kind")})
            else:
                row.update({"epsilon": None, "delta": None, "accountant": None,
                            "basis": NO_CLAIM_BASIS.get(b["role"], "none: non-private target (no formal guarantee)")})
            row["empirical_eps_lb"] = b["eps_lb"]
            row["empirical_eps_lb_attack"] = b["eps_lb_attack"]
            row["empirical_eps_lb_bound"] = b["eps_lb_bound"]
            rows.append(row)
        return pd.DataFrame(rows)

    def provenance_frame(self) -> pd.DataFrame:
        rows, results = [], self.sorted_results()
        ema = {k: released_start_weight(*k) for k in {(r.run_dir, r.target) for r in results}}  # once per target
        for r in results:
            rows.append({"dataset": r.dataset, "seed": r.seed, "preset": r.preset, "method": r.method_label,
                         "target": r.target, "attack": r.attack, "config_hash": r.config_hash,
                         "attack_hash": r.attack_hash, "run_dir": r.run_dir.name,
                         "ema_start_weight": ema[(r.run_dir, r.target)],
                         "attack_config": json.dumps(r.attack_config or {}, sort_keys=True, default=str),
                         "device": r.timing.device, "attack_s": r.timing.attack_s})
        return pd.DataFrame(rows)

    def fid_frame(self) -> pd.DataFrame:
        rows = []
        # a variant names its runs (a run with FID cells and no attack: by its FID cells)
        labels = self.fid_labels | {str(r.run_dir): r.method_label for r in self.results}
        def order(kv):  # a method's rows together, its suite rows (variants) apart, then by dataset and seed
            (rd, tname), rec = kv
            return (method_rank(rec.get("method", "")), str(labels.get(rd, rec.get("method"))), str(rec.get("dataset")),
                    rec.get("seed") if isinstance(rec.get("seed"), int) else -1, str(tname), rd)

        for (rd, _t), rec in sorted(self.fids.items(), key=order):
            rows.append({k: rec.get(k) for k in ("dataset", "seed", "method", "target", "client", "overall", "majority",
                                                 "minority", "average", "extractor", "n_overall", "n_per_class",
                                                 "sampler", "seconds")}
                        | {"method": labels.get(rd, rec.get("method")), "registered_method": rec.get("method"),
                           "run_dir": Path(rd).name} | _fid_extras(rec))
        return pd.DataFrame(rows)


def _fid_cell_runs(bench: dict | None, base: Path | None) -> dict[Path, str]:
    """{run dir: suite row} of a bench's finished FID cells (a row with ``attacks: []`` has no result naming it)."""
    out = {}
    for c in cells_of(bench) if bench and bench.get("cells") else []:
        p = cell_file(c.result_path, base) if c.kind == "fid" and c.status == "done" else None
        if p is not None:
            out[p.parents[1]] = c.variant or c.method
    return out


def _fid_extras(rec: dict) -> dict:
    """The KID and held-out columns of an FID record that has them (none otherwise)."""
    out = {f"{g}_kid": rec[f"{g}_kid"] for g in ("majority", "minority", "average") if f"{g}_kid" in rec}
    held = rec.get("heldout") or {}
    for k in ("majority", "minority", "average", "majority_kid", "minority_kid", "average_kid"):
        if k in held:
            out[f"heldout_{k}"] = held[k]
    return out


def fmt(v, nd: int = 3) -> str:
    """The one cell rule (:mod:`.cells`), as the HTML template's ``f`` filter."""
    return num(v, nd)


def fmt_ci(c, nd: int = 2) -> str:
    return ci(c, nd)
