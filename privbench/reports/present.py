"""What every rendering of a report shares (HTML, LaTeX, Markdown): footnotes (every ε's basis, every "n/a" with
its reason; the rule is :mod:`.cells`), the test-preset banner, the across-seed aggregate, and the report's tables
as plain rows of cells that :mod:`.latex` and :mod:`.markdown` typeset.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..core.constants import MEMORIZATION, RECONSTRUCTION
from ..core.registry import PRESETS
from ..metrics.roc import INVERTED_NOTE, is_inverted
from ..privacy.claims import KIND_LABEL, claim_of, formal_epsilon
from ..runs.result_schema import OUTSIDE, PrivacyClaim
from .cells import FPR_LABEL, FPR_OF, resolvable, unresolvable_reason  # noqa: F401 - the one rule (cells.py)
from .cells import ci as _ci
from .cells import num as _f
from .cells import text as _t
from .coincide import coinciding
from .order import FAMILIES, attack_family
from .tables import Tables

TEST_PRESET = "test"
#: the footnote of a TPR computed with metrics.tpr_rule=lt
TPR_RULE_LT = ("TPR at FPR < x (metrics.tpr_rule=lt, the rule of Carlini et al.'s LiRA code), not the default "
               "FPR ≤ x; the two differ when x·n_non-members is an integer")


def tpr_header(targets: list[dict], fpr_label: str) -> str:
    """The TPR column's label; it says so when some result in the table used FPR < x."""
    lt = any(a["result"].tpr_rule == "lt" for b in targets for a in b.get("attacks") or [])
    return f"TPR@{fpr_label}FPR" + (" (FPR < x where marked)" if lt else "")


class Footnotes:
    """Numbered notes of one table: equal texts share a mark (a, b, …, z, aa, …)."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return _letters(self.texts.index(text))

    def items(self) -> list[tuple[str, str]]:
        return [(_letters(i), t) for i, t in enumerate(self.texts)]

    def __bool__(self) -> bool:
        return bool(self.texts)


def _letters(i: int) -> str:
    s = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        s = chr(ord("a") + r) + s
    return s


#: the footnote of a target without any ε, by its role (collect.role_of; another role: a non-private baseline)
NO_FORMAL_TEXT = {
    "private": "no formal ε for this target: it is not covered by the method's guarantee",
    OUTSIDE: "no formal ε: an external model (privbench did not train it; any guarantee it has is not known here)"}


def basis_text(privacy: PrivacyClaim | None, role: str) -> str:
    """The footnote of a formal ε cell: what it covers (or that there is none, and what the result has instead)."""
    c = claim_of(privacy)
    if c and c["kind"] == "formal":
        return f"ε basis: {c['basis']}"
    if c and c["kind"] == "conditional":
        return ("no formal ε; conditional ε " + f"{c['epsilon']:.4g} (no guarantee): "
                + str(c["basis"] or "assumptions the run does not meet"))
    if c:
        at = f" at δ={c['delta']:g}" if c["delta"] is not None else ""
        return f"no formal ε; {KIND_LABEL[c['kind']]}: {c['epsilon']:.4g}{at} — {c['basis']}"
    return NO_FORMAL_TEXT.get(role, "no formal ε: a non-private baseline")


def other_epsilon(privacy: PrivacyClaim | None) -> Cell:
    """The "claimed / conditional ε" cell: a number that is no guarantee, with its kind (never in a formal column)."""
    c = claim_of(privacy)
    if not c or c["kind"] == "formal":
        return Cell()
    kind = {"conditional": "conditional", "claimed_by_paper": "claimed by paper",
            "claimed_by_user": "claimed by user"}[c["kind"]]
    return Cell(_f(c["epsilon"], 2), f"({kind})")


def test_preset_banner(tables: Tables) -> str | None:
    """A banner when any result comes from the `test` preset (its registry description says why)."""
    runs = sorted({r.run_dir.name for r in tables.results if r.preset == TEST_PRESET})
    if not runs:
        return None
    desc = PRESETS.get(TEST_PRESET).description if TEST_PRESET in PRESETS else "for unit tests only"
    return (f"Results of the `{TEST_PRESET}` preset ({desc.split('(')[0].strip(' ;,')}): results meaningless. "
            f"{len(runs)} run(s) here were trained for seconds on tiny models; do not cite these numbers.")


# ------------------------------------------------------------------------------------------ table model

@dataclass
class Cell:
    text: str = "–"
    ci: str = ""                   # a bracketed interval shown after the text, smaller
    marks: list[str] = field(default_factory=list)


@dataclass
class PaperTable:
    key: str                       # file stem and label: tab:privbench-<key>
    title: str
    caption: str
    columns: list[str]
    align: str                     # one letter per column: l or r
    rows: list[list[Cell]] = field(default_factory=list)
    block_starts: set[int] = field(default_factory=set)  # rows that begin a new target (a rule above them)
    notes: Footnotes = field(default_factory=Footnotes)


def _eps_cell(b: dict, notes: Footnotes) -> Cell:
    e = formal_epsilon(b.get("privacy"))
    text = _f(e, 2) if e is not None else "none"
    return Cell(text, marks=[notes.mark(basis_text(b.get("privacy"), b["role"]))])


def tpr_cell(a: dict, metric: str, notes: Footnotes, nd: int = 3) -> Cell:
    r = a["result"]
    n = r.n_nonmembers
    if not resolvable(metric, n):
        return Cell("n/a", marks=[notes.mark(unresolvable_reason(metric, n))])
    marks = [notes.mark(TPR_RULE_LT)] if r.tpr_rule == "lt" else []
    return Cell(_f(a["metrics"].get(metric), nd), _ci(a["ci"].get(metric), 2 if metric == "tpr_at_1pct_fpr" else 3),
                marks)


def _where_columns(targets: list[dict]) -> list[str]:
    """"dataset" and/or "seed" columns, when the report spans several of them; "model" and/or "records" only where
    the method/target names do not already tell the rows apart (they are wide)."""
    keys = [k for k in ("dataset", "seed") if len({b.get(k) for b in targets}) > 1]
    named = {tuple(b.get(k) for k in (*keys, "method", "target", "attack")) for b in targets}
    if len(named) < len(targets):
        keys += [k for k in ("model", "records") if len({b.get(k) for b in targets}) > 1]
    return keys


def _frame_where(df) -> list[str]:
    """:func:`_where_columns` for a table built from a frame (audit, shift check)."""
    return _where_columns(df.astype(str).to_dict("records"))  # as text: a missing value is one "nan", not many


def membership_table(targets: list[dict], family: str | None = None) -> PaperTable:
    """Every target's membership attacks, or one ``family``'s (the ε lower bound stays over all its attacks)."""
    where = _where_columns(targets)
    t = PaperTable(
        "membership" if family is None else "membership-" + family.split()[0],
        "Membership inference" + (f", {family}" if family else ""),
        "Per target, private methods first, then the non-private baselines. AUC, ASR and TPR "
        "at a fixed FPR use thresholds chosen on the evaluation labels (oracle, as in the SecMI/PIA papers); "
        "brackets are stratified-bootstrap 95% intervals. Emp. ε lb: the target's headline empirical lower bound, the "
        "largest of the Clopper–Pearson and one-run bounds of all its membership attacks" + (" (of every family)" if
        family else "") + ", each at confidence 1 − 0.05/(2k) for k attacks (Bonferroni over the 2k bounds), so it "
        "holds at 95% family-wise for that target; the audit table gives every bound at 95% alone.",
        where + ["method", "target", "formal ε", "emp. ε lb", "attack", "AUC", "ASR", tpr_header(targets, "1%"),
                 tpr_header(targets, "0.1%")],
        "l" * len(where) + "llrrlrrrr")
    same = {(a, m, tg): note for a, rows, note in coinciding(
        [(a["attack"], b["method"], b["target"], (b["dataset"], b["seed"]), a["result"].scores_file)
         for b in targets for a in b["attacks"]]) for m, tg in rows}
    for b in targets:
        attacks = [a for a in b["attacks"] if family is None or attack_family(a["attack"]) == family]
        if not attacks:
            continue
        t.block_starts.add(len(t.rows))
        for i, a in enumerate(attacks):
            m = a["metrics"]
            head = ([Cell(_t(b[k])) for k in where] +
                    [Cell(b["method"]), Cell(b["target"]), _eps_cell(b, t.notes),
                     _lb_cell(b)] if i == 0
                    else [Cell("") for _ in range(len(where) + 4)])
            inv = [t.notes.mark(INVERTED_NOTE)] if is_inverted(m.get("auc"), a["ci"].get("auc")) else []
            note = same.get((a["attack"], b["method"], b["target"]))
            t.rows.append(head + [Cell(a["attack"], "", [t.notes.mark(note)] if note else []),
                                  Cell(_f(m.get("auc")), _ci(a["ci"].get("auc")), inv),
                                  Cell(_f(m.get("asr"), 2)), tpr_cell(a, "tpr_at_1pct_fpr", t.notes),
                                  tpr_cell(a, "tpr_at_0_1pct_fpr", t.notes)])
    return t


def target_table(targets: list[dict]) -> PaperTable | None:
    """Memorization, reconstruction and FID per target (when any target has one of them)."""
    t = PaperTable("per-target", "Memorization, reconstruction and FID",
                   "Per target: the fraction of generated samples that copy a training record (memorization), the "
                   "re-identification rate of records reconstructed from uploads (chance in brackets), and FID "
                   "(overall; client majority / minority classes against the client's own records).",
                   _where_columns(targets) + ["method", "target", "memorized", "re-id (chance)", "FID overall",
                                              "FID maj / min"], "l" * len(_where_columns(targets)) + "llrrrr")
    where = _where_columns(targets)
    for b in targets:
        mem = (b.get(MEMORIZATION) or {}).get("metrics") or {}
        rec = (b.get(RECONSTRUCTION) or {}).get("metrics") or {}
        fid = b.get("fid") or {}
        if not (mem or rec or fid):
            continue
        t.rows.append([Cell(_t(b[k])) for k in where] + [Cell(b["method"]), Cell(b["target"]),
                       Cell(_f(mem.get("memorized_fraction")) if mem else "–"),
                       Cell(_f(rec.get("reid_rate")), f"({_f(rec.get('reid_chance'), 4)})") if rec else Cell(),
                       Cell(_f(fid.get("overall"), 2) if fid else "–"),
                       Cell(f"{_f(fid.get('majority'), 2)} / {_f(fid.get('minority'), 2)}") if fid else Cell()])
        if fid.get("extractor"):
            t.rows[-1][len(where) + 4].marks.append(t.notes.mark(f"FID feature extractor: {fid['extractor']}"))
    return t if t.rows else None


def _lb_cell(b: dict) -> Cell:
    """A target's headline ε lower bound, one number wide (its source is in audit.csv and the HTML page)."""
    return Cell(_f(b["eps_lb"], 2) if b.get("eps_lb") is not None else "–")


def audit_table(tables: Tables) -> PaperTable | None:
    df = tables.audit_frame()
    if not len(df):
        return None
    t = PaperTable("audit", "Empirical ε audit",
                   "Details of the headline: every membership result's lower bounds at 95% each, not "
                   "family-wise: Clopper–Pearson (threshold chosen on a split half) and one-run (Steinke, Nasr & "
                   "Jagielski 2023), with the largest bound the record counts allow (ceiling). The headline of a "
                   "target is the largest of these recomputed at 1 − 0.05/(2k) (95% family-wise). A bound above "
                   "the formal ε means the implementation or the claim is broken.",
                   ["method", "target", "attack", "CP ε lb (ceiling)", "one-run ε lb (ceiling)", "formal ε",
                    "claimed ε", "verdict"],
                   "lllrrrrl")
    where = _frame_where(df)
    t.columns, t.align = where + t.columns, "l" * len(where) + t.align
    for r in df.astype(object).to_dict("records"):
        e = r.get("formal_epsilon")
        e = None if e is None or (isinstance(e, float) and math.isnan(e)) else e
        claimed = r.get("claimed_epsilon")
        claimed = None if claimed is None or (isinstance(claimed, float) and math.isnan(claimed)) else claimed
        t.rows.append([Cell(_t(r[k])) for k in where] + [Cell(r["method"]), Cell(r["target"]), Cell(r["attack"]),
                       Cell(_f(r["epsilon_lower_bound"], 2), f"({_f(r['ceiling'], 2)})"),
                       Cell(_f(r["one_run_epsilon_lower_bound"], 2), f"({_f(r['one_run_ceiling'], 2)})"),
                       Cell(_f(e, 2) if e is not None else "none"),
                       Cell(_f(claimed, 2), f"({_who(r.get('claim_kind'))})") if claimed is not None else Cell(),
                       Cell(audit_verdict(r))])
    return t


def _who(kind) -> str:
    return "by paper" if kind == "claimed_by_paper" else "by user"


def audit_verdict(r: dict) -> str:
    """An audit row's verdict: only a formal ε is ever "consistent"; a claim not exceeded is "not refuted"."""
    hit = r.get("exceeds_claim")
    if hit is None or (isinstance(hit, float) and math.isnan(hit)):
        return "nothing to compare"
    if r.get("formal_epsilon") is not None and not (isinstance(r["formal_epsilon"], float)
                                                    and math.isnan(r["formal_epsilon"])):
        return "EXCEEDS formal ε" if hit else "consistent"
    return f"EXCEEDS claimed ε ({_who(r.get('claim_kind'))})" if hit else f"not refuted (claim {_who(r.get('claim_kind'))})"
def split_check_table(tables: Tables) -> PaperTable | None:
    """The member/non-member shift check of the external targets (none: no table)."""
    df = tables.split_check_frame()
    if not len(df):
        return None
    t = PaperTable("split-check", "Member/non-member shift check",
                   "A model-free classifier (ridge regression on pixel statistics and a fixed random-convolution "
                   "feature map, k-fold cross-fitted) tells members from non-members with this AUC (95% CI); p: a "
                   "label-permutation test against 0.5. At p <= 0.05 the two sets differ without the model, and an "
                   "attack's AUC up to the classifier's is not evidence of leakage (Das, Zhang & Tramèr 2024); "
                   "material: the CI's lower bound exceeds 0.6. Without a shift, the smallest AUC the test detects "
                   "with 80% power.",
                   ["method", "target", "AUC", "p", "members / non-members", "verdict"], "llrrrl")
    where = _frame_where(df)
    t.columns, t.align = where + t.columns, "l" * len(where) + t.align
    for r in df.astype(object).to_dict("records"):
        ci = _ci((r['ci95_low'], r['ci95_high']), 3) if r.get("ci95_low") is not None else ""
        t.rows.append([Cell(_t(r[k])) for k in where] + [Cell(str(r["method"])), Cell(str(r["target"])), Cell(_f(r["auc"]), ci),
                       Cell(_f(r.get("p_value"))), Cell(f"{r['n_members']} / {r['n_nonmembers']}"),
                       Cell(_split_verdict(r))])
    return t


def _split_verdict(r: dict) -> str:
    if r["shift"]:
        return "SHIFT: not evidence of leakage" + (" (material)" if r.get("material") else "")
    x = r.get("detectable_auc")
    known = x is not None and not (isinstance(x, float) and math.isnan(x))
    return "no shift detected" + (f" (detectable: AUC >= {_f(x)})" if known else "")


def accountant_table(targets: list[dict]) -> PaperTable:
    where = _where_columns(targets)
    t = PaperTable("accountant", "Formal privacy",
                   "Every target's guarantee; the footnotes say what each ε covers.",
                   where + ["method", "target", "ε", "claimed / conditional ε", "δ", "accountant", "empirical ε lb"],
                   "l" * len(where) + "llrrrlr")
    seen = set()
    for b in targets:
        key = (b["run_dir"], b["target"])
        if key in seen:
            continue
        seen.add(key)
        p = b["privacy"]
        t.rows.append([Cell(_t(b[k])) for k in where] + [Cell(b["method"]), Cell(b["target"]), _eps_cell(b, t.notes),
                       other_epsilon(p), Cell(f"{p.delta:g}" if p and p.delta is not None else "–"),
                       Cell(_t(p and p.accountant)), _lb_cell(b)])
    return t


def fid_table(tables: Tables) -> PaperTable | None:
    df = tables.fid_frame()
    if not len(df):
        return None
    t = PaperTable("fid", "FID", "Per method (lower is better): overall (samples with the members' class "
                   "proportions against all member records) and the client's majority / minority classes against "
                   "its own records, with their average. FIDs of different extractors are not comparable.",
                   ["method", "target", "seed", "client", "overall", "majority", "minority", "average", "sampler"],
                   "llrrrrrrl")
    for r in df.astype(object).to_dict("records"):
        t.rows.append([Cell(_t(r["method"])), Cell(_t(r["target"])), Cell(_t(r.get("seed"))), Cell(_t(r["client"])),
                       Cell(_f(r["overall"], 2)), Cell(_f(r["majority"], 2)), Cell(_f(r["minority"], 2)),
                       Cell(_f(r["average"], 2)), Cell(_t(r.get("sampler")))])
        t.rows[-1][4].marks.append(t.notes.mark(f"feature extractor: {r['extractor']}"))
    return t


# ------------------------------------------------------------------------------------------ across seeds

SEED_METRICS = {"auc": "auc", "asr": "asr", "tpr_1pct": "tpr_at_1pct_fpr", "tpr_0_1pct": "tpr_at_0_1pct_fpr"}


def several_seeds(targets: list[dict]) -> bool:
    groups: dict[tuple, set] = {}
    for b in targets:
        for a in b["attacks"]:
            groups.setdefault((b["dataset"], b["method"], b["target"], a["attack"]), set()).add(b["seed"])
    return any(len(s) > 1 for s in groups.values())


def seeds_frame(targets: list[dict]):
    """Per (dataset, method, target, attack): mean, sample std and every seed's value of each membership metric
    (unresolvable TPRs count as missing), with the empirical ε lower bound of the target."""
    groups: dict[tuple, list[tuple[dict, dict]]] = {}
    for b in targets:
        for a in b["attacks"]:
            groups.setdefault((b["dataset"], b["role"], b["method"], b["target"], a["attack"]), []).append((b, a))
    rows = []
    for (dataset, role, method, target, attack), items in groups.items():
        items.sort(key=lambda ba: ba[0]["seed"])
        row: dict[str, Any] = {"dataset": dataset, "role": role, "method": method, "target": target,
                               "attack": attack, "n_seeds": len(items),
                               "seeds": " ".join(str(b["seed"]) for b, _ in items)}
        eps = {b["privacy"] and b["privacy"].epsilon for b, _ in items}
        row["formal_epsilon"] = eps.pop() if len(eps) == 1 else None
        per: dict[str, dict[int, float]] = {}
        for short, metric in SEED_METRICS.items():
            vals = {}
            for b, a in items:
                v = a["metrics"].get(metric)
                if v is None or not resolvable(metric, a["result"].n_nonmembers):
                    continue
                vals[b["seed"]] = float(v)
            per[short] = vals
        per["eps_lb"] = {b["seed"]: float(b["eps_lb"]) for b, _ in items if b["eps_lb"] is not None}
        for short, vals in per.items():
            v = np.array(list(vals.values()), dtype=float)
            row[f"{short}_mean"] = float(v.mean()) if len(v) else None
            row[f"{short}_std"] = float(v.std(ddof=1)) if len(v) > 1 else None
            row[f"{short}_n"] = len(v)
        for short, vals in per.items():
            for s, v in vals.items():
                row[f"{short}_seed{s}"] = v
        rows.append(row)
    return pd.DataFrame(rows)


def pm(mean, std, nd: int = 3) -> tuple[str, str]:
    """("mean", "± std") for a cell; a single value has no spread."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–", ""
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return _f(mean, nd), ""
    return _f(mean, nd), f"± {_f(std, nd)}"


def seeds_table(targets: list[dict]) -> PaperTable | None:
    if not several_seeds(targets):
        return None
    df = seeds_frame(targets)
    t = PaperTable("seeds", "Across seeds",
                   "Mean ± sample standard deviation over seeds (n = number of seeds with a value; per-seed values "
                   "are in seeds.csv). TPRs the non-member count cannot resolve are left out.",
                   ["method", "target", "attack", "seeds", "AUC", "TPR@1%FPR", "TPR@0.1%FPR", "empirical ε lb"],
                   "lllrrrrr")
    last = None
    for r in df.astype(object).to_dict("records"):
        if (r["dataset"], r["method"], r["target"]) != last:
            t.block_starts.add(len(t.rows))
            last = (r["dataset"], r["method"], r["target"])
        cells = [Cell(r["method"]), Cell(r["target"]), Cell(r["attack"]), Cell(_t(r["n_seeds"]))]
        for short in ("auc", "tpr_1pct", "tpr_0_1pct", "eps_lb"):
            m, s = pm(r.get(f"{short}_mean"), r.get(f"{short}_std"), 2 if short == "eps_lb" else 3)
            c = Cell(m, s)
            if r.get(f"{short}_n") == 0 and short.startswith("tpr"):
                c = Cell("n/a", marks=[t.notes.mark("n/a: no seed's non-member count resolves this FPR")])
            elif r.get(f"{short}_n") not in (None, r["n_seeds"]):
                c.marks.append(t.notes.mark("not every seed has a value: the mean is over the seeds that do"))
            cells.append(c)
        t.rows.append(cells)
    return t


def paper_tables(tables: Tables, targets: list[dict] | None = None, by_family: bool = False) -> list[PaperTable]:
    """The report's non-empty tables in page order; ``by_family``: one membership table per attack family."""
    targets = tables.targets() if targets is None else targets
    membership = ([membership_table(targets, f) for f in FAMILIES] if by_family
                  else [membership_table(targets)])
    out = [*membership, seeds_table(targets), target_table(targets), audit_table(tables),
           split_check_table(tables), accountant_table(targets), fid_table(tables)]
    return [t for t in out if t is not None and t.rows]
