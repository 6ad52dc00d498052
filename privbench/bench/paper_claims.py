"""The suite's ``claims:`` — what a paper says, as a comparison of two selections of a bench's cells (docs/cli.md
§9): parsed, checked against the planned grid before anything trains, and recorded in ``bench.json`` (§8). The
verdict rule is :mod:`privbench.reports.claim_rule`; ε claims of a privacy guarantee are :mod:`privbench.privacy.claims`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable

from ..core.errors import BadInput
from ..core.version import STORE_VERSION, upgraded
from .cell_schema import BenchCell

#: metric → the kind of cell that produces it
METRICS = {"auc": "attack", "asr": "attack", "tpr_at_1pct_fpr": "attack", "tpr_at_0_1pct_fpr": "attack",
           "fid": "fid", "kid": "fid", "fid_heldout": "fid", "kid_heldout": "fid", "downstream_accuracy": "utility", "class_fidelity": "utility", "precision": "utility",
           "recall": "utility"}
BETTER = ("lower", "higher")
CLAIM_KEYS = ("id", "source", "text", "metric", "better", "subject", "baseline", "paper", "scale")
SELECTOR_KEYS = ("method", "target", "attack", "epsilon", "dataset", "classes")
PAPER_KEYS = ("subject", "baseline")
#: a selector's ``classes``: which FID of the record (default ``overall``; kid and the held-out ones have none)
FID_CLASSES = ("overall", "majority", "minority", "average")
SIDES = ("subject", "baseline")
#: a claim's id names its row in every table (and a LaTeX cell): a short word, no spaces
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")


@dataclass(frozen=True)
class Selector:
    """The bench cells of one side of a claim: a method entry (the suite's key: a variant's name or the method's)
    and, where the bench has several, its target, attack, ε and dataset; ``classes`` (fid only) chooses the FID."""
    method: str
    target: str | None = None
    attack: str | None = None
    epsilon: float | None = None
    dataset: str | None = None
    classes: str | None = None

    def matches(self, c: BenchCell) -> bool:
        return ((c.variant or c.method) == self.method
                and (self.target is None or c.target == self.target)
                and (self.attack is None or c.attack == self.attack)
                and (self.dataset is None or c.dataset == self.dataset)
                and (self.epsilon is None or (c.epsilon is not None and math.isclose(c.epsilon, self.epsilon))))

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in SELECTOR_KEYS if getattr(self, k) is not None}

    def text(self) -> str:
        """``pfdm-lora/shared loss (ε 10, digits, minority classes)``: the selector as tables name it."""
        head = self.method + (f"/{self.target}" if self.target else "") + (f" {self.attack}" if self.attack else "")
        extra = [f"ε {self.epsilon:g}" if self.epsilon is not None else None, self.dataset,
                 f"{self.classes} classes" if self.classes else None]
        extra = [e for e in extra if e]
        return head + (f" ({', '.join(extra)})" if extra else "")


@dataclass(frozen=True)
class PaperClaim:
    """One claim: ``subject`` is ``better`` than ``baseline`` on ``metric``; the paper's own numbers when given."""
    id: str
    source: str
    text: str
    metric: str
    better: str
    subject: Selector
    baseline: Selector
    paper_subject: float | None = None
    paper_baseline: float | None = None
    scale: str | None = None

    @property
    def kind(self) -> str:
        """The kind of cell whose results the claim reads."""
        return METRICS[self.metric]

    def to_json(self) -> dict:
        """The claim in the suite's grammar (what :func:`parse_claims` reads back)."""
        d = {"id": self.id, "source": self.source, "text": self.text, "metric": self.metric, "better": self.better,
             "subject": self.subject.to_json(), "baseline": self.baseline.to_json()}
        paper = {k: v for k, v in (("subject", self.paper_subject), ("baseline", self.paper_baseline))
                 if v is not None}
        if paper:
            d["paper"] = paper
        if self.scale is not None:
            d["scale"] = self.scale
        return d


def _text(v, where: str, required: bool = True) -> str | None:
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, (str, int, float)) or not str(v).strip():
        raise BadInput(f"{where}: expected a non-empty text, got {v!r}")
    return str(v)


def _number(v, where: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise BadInput(f"{where}: expected a finite number, got {v!r}")
    return float(v)


def _unknown(d: dict, allowed: tuple, where: str) -> None:
    bad = sorted(str(k) for k in d if k not in allowed)
    if bad:
        raise BadInput(f"{where}: unknown key(s) {', '.join(bad)}; allowed: {', '.join(allowed)}")


def _selector(d, metric: str, where: str) -> Selector:
    if not isinstance(d, dict):
        raise BadInput(f"{where}: expected a mapping {{method, target, attack, epsilon, dataset, classes}}, got {d!r}")
    _unknown(d, SELECTOR_KEYS, where)
    if d.get("method") is None:
        raise BadInput(f"{where}: 'method' (the suite's method entry) is required")
    kind = METRICS[metric]
    if kind == "attack" and d.get("attack") is None:
        raise BadInput(f"{where}: metric {metric} is an attack's: name the attack ('attack: LABEL')")
    if kind != "attack" and d.get("attack") is not None:
        raise BadInput(f"{where}.attack: metric {metric} is not an attack's (it comes from the {kind} cell)")
    classes = d.get("classes")
    if classes is not None and kind != "fid":
        raise BadInput(f"{where}.classes: only a fid / kid claim chooses its classes")
    allowed = FID_CLASSES if metric == "fid" else FID_CLASSES[1:]
    if kind == "fid" and (classes or "overall") not in allowed:
        raise BadInput(f"{where}.classes: {classes!r}; choose {', '.join(allowed)}")
    eps = d.get("epsilon")
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float))
                            or not 0 < float(eps) < math.inf):
        raise BadInput(f"{where}.epsilon: {eps!r} is not a finite epsilon > 0 (a value of the suite's epsilons)")
    return Selector(method=_text(d["method"], f"{where}.method"), target=_text(d.get("target"), f"{where}.target", False),
                    attack=_text(d.get("attack"), f"{where}.attack", False),
                    epsilon=None if eps is None else float(eps),
                    dataset=_text(d.get("dataset"), f"{where}.dataset", False),
                    classes=(classes or "overall") if kind == "fid" else None)


def _claim(d, where: str) -> PaperClaim:
    if not isinstance(d, dict):
        raise BadInput(f"{where}: expected a mapping {{{', '.join(CLAIM_KEYS)}}}, got {type(d).__name__}")
    _unknown(d, CLAIM_KEYS, where)
    missing = [k for k in ("id", "source", "text", "metric", "better", "subject", "baseline") if d.get(k) is None]
    if missing:
        raise BadInput(f"{where}: missing key(s) {', '.join(missing)}")
    cid = d["id"]
    if isinstance(cid, bool) or not isinstance(cid, (str, int)) or not ID_RE.fullmatch(str(cid)):
        raise BadInput(f"{where}.id: {cid!r} is not an id (letters, digits, _ . : -, at most 64 characters)")
    cid = str(cid)
    where = f"claims.{cid}"
    metric = d["metric"]
    if metric not in METRICS:
        raise BadInput(f"{where}.metric: {metric!r}; choose {', '.join(METRICS)}")
    if d["better"] not in BETTER:
        raise BadInput(f"{where}.better: {d['better']!r}; choose lower or higher")
    paper = d.get("paper")
    if paper is not None:
        if not isinstance(paper, dict) or not paper:
            raise BadInput(f"{where}.paper: expected a mapping {{subject: x, baseline: y}}, got {paper!r}")
        _unknown(paper, PAPER_KEYS, f"{where}.paper")
    paper = paper or {}
    claim = PaperClaim(id=cid, source=_text(d["source"], f"{where}.source"), text=_text(d["text"], f"{where}.text"),
                      metric=metric, better=d["better"], subject=_selector(d["subject"], metric, f"{where}.subject"),
                      baseline=_selector(d["baseline"], metric, f"{where}.baseline"),
                      paper_subject=_number(paper.get("subject"), f"{where}.paper.subject"),
                      paper_baseline=_number(paper.get("baseline"), f"{where}.paper.baseline"),
                      scale=_text(d.get("scale"), f"{where}.scale", False))
    ps, pb = claim.paper_subject, claim.paper_baseline
    if ps is not None and pb is not None and not (ps < pb if claim.better == "lower" else ps > pb):
        raise BadInput(f"{where}.paper: subject {ps:g} is not {claim.better} than baseline {pb:g}, as the claim "
                       f"says (better: {claim.better})")
    return claim


def parse_claims(v, where: str = "claims") -> list[PaperClaim]:
    """The suite's ``claims:`` (a list of claims; absent: none); BadInput (one line) on anything else."""
    if v is None:
        return []
    if not isinstance(v, list):
        raise BadInput(f"{where}: expected a list of claims ({{id, source, text, metric, better, subject, "
                       f"baseline, paper, scale}}), got {type(v).__name__}")
    out = []
    for i, d in enumerate(v):
        try:
            out.append(_claim(d, f"claims[{i}]"))
        except BadInput as e:
            raise BadInput(f"{where}: {e}" if where != "claims" else str(e)) from None
    ids = [c.id for c in out]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise BadInput(f"{where}: claim id(s) {', '.join(twice)} given twice")
    return out


# ---------------------------------------------------------------------------------------------- against the grid

def select(claim: PaperClaim, side: str, cells: Iterable[BenchCell]) -> list[BenchCell]:
    """The cells of ``claim``'s ``side`` (subject or baseline): the cells of its metric's kind that it selects."""
    sel: Selector = getattr(claim, side)
    return [c for c in cells if c.kind == claim.kind and sel.matches(c)]


#: what one row of the bench is, besides its seed: a selector must pick one value of each
_ROW = (("method", lambda c: c.variant or c.method), ("dataset", lambda c: c.dataset),
        ("target", lambda c: c.target), ("epsilon", lambda c: c.epsilon), ("attack", lambda c: c.attack))


def check_claims(claims: list[PaperClaim], cells: list[BenchCell]) -> None:
    """BadInput unless each side of each claim selects one row of the planned grid and the two sides differ."""
    for claim in claims:
        rows = {}
        for side in SIDES:
            where = f"claims.{claim.id}.{side}"
            got = select(claim, side, cells)
            if not got:
                have = sorted({f"{c.variant or c.method}/{c.target}" + (f" {c.attack}" if c.attack else "")
                               for c in cells if c.kind == claim.kind})
                listed = ", ".join(have[:12]) + (", ..." if len(have) > 12 else "")
                raise BadInput(f"{where}: {getattr(claim, side).text()} selects no {claim.kind} cell of the suite "
                               f"(its {claim.kind} cells: {listed or 'none'})")
            for key, of in _ROW:
                values = sorted({of(c) for c in got}, key=str)
                if len(values) > 1:
                    raise BadInput(f"{where}: {getattr(claim, side).text()} selects cells of several {key}s "
                                   f"({', '.join(map(str, values))}); name one with '{key}:'")
            rows[side] = {c.id for c in got}
        if rows["subject"] == rows["baseline"]:
            raise BadInput(f"claims.{claim.id}: subject and baseline select the same cells")


# ---------------------------------------------------------------------------------------------- bench.json

def claims_record(claims: list[PaperClaim]) -> dict:
    """``bench.json``'s ``paper_claims``: ``{schema_version, claims}``, the claims in the suite's grammar."""
    return {"schema_version": STORE_VERSION, "claims": [c.to_json() for c in claims]}


def claims_of_bench(bench: dict | None) -> list[PaperClaim]:
    """The claims a bench recorded (``[]``: none); BadInput on a malformed object or another schema version."""
    rec = (bench or {}).get("paper_claims")
    if rec is None:
        return []
    where = "bench.json paper_claims"
    if not isinstance(rec, dict):
        raise BadInput(f"{where}: expected an object {{schema_version, claims}}")
    _unknown(rec, ("schema_version", "claims"), where)
    rec = upgraded(rec, rec.get("schema_version"), where)
    return parse_claims(rec.get("claims"), where)
