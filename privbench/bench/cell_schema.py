"""Typed schema of ``bench.json``'s cells (docs/cli.md §8), written by the bench and read by the reports and a
resumed bench. It lives in ``bench``, the writer's package; reports sit above bench, so they may import it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import BadInput
from ..core.schema import Schema, json_keys


@dataclass
class BenchCell(Schema):
    """One cell of ``bench.json``: the JSON keys are the field names in their order, their types the type hints
    (core/schema.py); ``overrides`` is written as [key, value] pairs."""
    absent_reads_default = True
    doc = "written by a newer privbench? docs/cli.md §8"

    kind: str                      # attack | fid | samples | utility
    method: str
    dataset: str
    seed: int
    target: str
    attack: str | None = None
    role: str = "baseline"
    status: str = "pending"        # pending | done | skipped | failed
    reason: str | None = None
    id: str = ""
    run_dir: str | None = None
    config_hash: str | None = None
    attack_hash: str | None = None
    settings_hash: str | None = None  # samples/fid cells: a change of what they draw re-runs them
    external: dict | None = None
    result_path: str | None = None
    summary: dict | None = None
    seconds: float | None = None
    attempts: int | None = None
    variant: str | None = None
    epsilon: float | None = None
    utility: dict | None = None
    overrides: list = field(default_factory=list)

    def to_json(self) -> dict:
        d = super().to_json()
        d["overrides"] = [[k, v] for k, v in self.overrides]
        return d

    @classmethod
    def from_json(cls, d, where: str = "") -> BenchCell:
        cell = super().from_json(d, where)
        if not all(isinstance(p, list) and len(p) == 2 for p in cell.overrides):
            raise BadInput(f"overrides: expected [key, value] pairs, got {cell.overrides!r}"[:200])
        cell.overrides = [tuple(p) for p in cell.overrides]
        return cell


#: the declared keys, in the order bench.json holds them
KEYS = json_keys(BenchCell)


def cells_of(bench: dict | None) -> list[BenchCell]:
    """The typed cells of a bench.json object (or of ``bench --json``'s, which holds the same ``cells``)."""
    if bench is not None and not isinstance(bench, dict):
        raise BadInput(f"not a bench (a JSON {type(bench).__name__}, not an object)")
    cells = (bench or {}).get("cells") or []
    if not isinstance(cells, list):
        raise BadInput(f"cells: expected a list, got {type(cells).__name__}")
    out = []
    for i, c in enumerate(cells):
        try:
            out.append(BenchCell.from_json(c))
        except BadInput as e:
            raise BadInput(f"cell {i}: {e}") from None
    return out
