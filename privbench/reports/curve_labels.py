"""What tells one result apart from the others in the same figure: the shortest label that names every curve once
(the rule: docs/benchmarks.md, "Reports"; the parts are tried in the order of :data:`KEYS`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

#: the parts a label may add, in the order they are tried
KEYS = ("epsilon", "seed", "model", "records", "weights", "run")


@dataclass(frozen=True)
class Part:
    key: str   # one of KEYS
    text: str  # in a legend or title: "ε=4"
    file: str  # in a file name (ASCII letters, digits and "-" only): "eps4"


def _ascii(text: str) -> str:
    # "." would read as a suffix to Path.with_suffix; other characters are not portable in file names
    out = "".join(ch if ch.isascii() and (ch.isalnum() or ch == "-") else "p" if ch == "." else "-" for ch in text)
    return "-".join(p for p in out.split("-") if p)


def _number(v: float) -> str:
    return "∞" if math.isinf(v) else f"{v:.3g}"


def _epsilon(block: dict) -> Part:
    axis = block.get("axis_epsilon")
    claim = block.get("claim") or {}
    if axis is not None:
        text = f"ε={_number(float(axis))}"
    elif claim.get("epsilon") is not None:
        kind = {"conditional": "conditional ", "claimed_by_paper": "claimed ", "claimed_by_user": "claimed "}
        text = f"{kind.get(claim.get('kind'), '')}ε={_number(float(claim['epsilon']))}"
    else:
        return Part("epsilon", "no ε", "noeps")
    return Part("epsilon", text, _ascii(text.replace("ε=", "eps").replace("∞", "inf")))


def _provenance(block: dict):
    return next((a["result"].provenance for a in block.get("attacks") or ()
                 if a["result"].provenance is not None), None)


def _name_part(key: str, value, prefix: str = "") -> Part | None:
    if not value:
        return None
    return Part(key, f"{prefix}{value}", _ascii(f"{prefix}{value}"))


def parts_of(block: dict) -> dict[str, Part | None]:
    """Every part a result's label may add (None: the result has no such attribute)."""
    prov = _provenance(block)
    model = Path(str((prov.model or {}).get("path") or "")).name if prov else ""
    members = Path(str((prov.members or {}).get("spec") or "")).name if prov else ""
    weights = (prov.weights_sha256 or "")[:8] if prov else ""
    return {"epsilon": _epsilon(block), "seed": Part("seed", f"seed {block['seed']}", f"seed{block['seed']}"),
            "model": _name_part("model", model), "records": _name_part("records", members),
            "weights": _name_part("weights", weights, "weights "),
            "run": _name_part("run", Path(str(block.get("run_dir") or "")).name)}


def distinguishing_parts(blocks: list[dict], base: list[str]) -> list[list[Part]]:
    """For each block, the parts its label adds to ``base`` (its name in the figure) so that no two labels are
    equal; the last resort is a number in the group (``#2``)."""
    parts = [parts_of(b) for b in blocks]
    chosen: list[list[Part]] = [[] for _ in blocks]

    def groups() -> list[list[int]]:
        by: dict[tuple, list[int]] = {}
        for i, name in enumerate(base):
            by.setdefault((name, *(p.text for p in chosen[i])), []).append(i)
        return [g for g in by.values() if len(g) > 1]

    for key in KEYS:
        for g in groups():
            if len({parts[i][key] for i in g}) > 1:
                none = Part(key, f"no {key}", f"no{key}")
                for i in g:
                    chosen[i].append(parts[i][key] or none)
    for g in groups():
        for n, i in enumerate(g[1:], start=2):
            chosen[i].append(Part("index", f"#{n}", str(n)))
    return chosen


def label(base: str, parts: list[Part]) -> str:
    return " ".join([base, *(p.text for p in parts)])


def file_suffix(parts: list[Part]) -> str:
    return "".join(f"-{p.file}" for p in parts)
