"""The headline empirical ε lower bound of each model (:meth:`Result.target_key`): one number, the same in
``audit``, the report and the Python API (docs/accountants.md §3.4). δ: as ``audit`` chooses it; when a model's
results state different δ, the largest (a bound at a larger δ is also one at every smaller δ).
"""
from __future__ import annotations

from typing import Any

from ..core.constants import DEFAULT_CONFIDENCE, DEFAULT_DELTA
from ..privacy.compare import KIND_TEXT, REPLACE_ONE, headline_bounds
from .collect import Result

RULE = ("headline: the largest of a model's Clopper-Pearson and one-run lower bounds over all its membership "
        "attacks, each recomputed at 1 - alpha/(2k) for k attacks (Bonferroni), so it holds at the stated "
        "confidence family-wise; the other bounds are details")


def result_delta(res: Result, delta: float | None = None) -> float:
    """The δ a result is audited at: ``delta``, else its formal or claimed δ, else :data:`DEFAULT_DELTA`."""
    if delta is not None:
        return float(delta)
    d = res.privacy and res.privacy.delta
    try:
        return float(d) if d else DEFAULT_DELTA
    except (TypeError, ValueError):
        return DEFAULT_DELTA


def relation_of(res: Result) -> str:
    """The neighbouring relation the model's membership game tests (privbench.privacy.compare)."""
    if res.is_outside:
        return f"{REPLACE_ONE} if the members given were a fixed-size random subset of one pool of records"
    return f"{REPLACE_ONE} (privbench's fixed-size member split)"


def headlines(results: list[Result], *, delta: float | None = None, confidence: float = DEFAULT_CONFIDENCE,
              seed: int = 0) -> dict[tuple, dict[str, Any]]:
    """target key → the model's headline (:func:`headline_bounds` plus ``model``, ``dataset``, ``seed``, ``run``,
    ``relation``, ``rule``, ``statement``; each bound names its ``result``), for every model with loadable scores."""
    groups: dict[tuple, list[tuple[Result, Any, Any]]] = {}
    for r in results:
        if r.kind != "membership" or r.scores_file is None:
            continue
        try:
            s, y = r.load_scores()
        except Exception:  # noqa: BLE001 - a result without readable scores has no bound (audit says why)
            continue
        groups.setdefault(r.target_key(), []).append((r, s, y))
    out = {}
    for key, items in groups.items():
        r0 = items[0][0]
        d = max(result_delta(r, delta) for r, _, _ in items)
        h = headline_bounds([(r.attack, s, y) for r, s, y in items], delta=d, confidence=confidence, seed=seed)
        for row, (r, _, _) in zip(h["bounds"][::2], items):
            row["result"] = str(r.path)
        for row, (r, _, _) in zip(h["bounds"][1::2], items):
            row["result"] = str(r.path)
        h.update(model=f"{r0.method_label}/{r0.target}", run=r0.run_dir.name, dataset=r0.dataset, seed=r0.seed,
                 relation=relation_of(r0), rule=RULE)
        h["statement"] = statement(h)
        out[key] = h
    return out


def statement(h: dict[str, Any]) -> str:
    """The one sentence that says what a headline bounds: which model, which relation, which confidence."""
    k = h["family_size"] // 2
    where = (f"{KIND_TEXT[h['bound']]} bound of {h['attack']}" if h["bound"] is not None
             else "no bound is above 0, which does not show privacy")
    return (f"epsilon >= {h['epsilon_lower_bound']:.3f} at delta {h['delta']:g} for the training of {h['model']} "
            f"({h['dataset']}, seed {h['seed']}, run {h['run']}), neighbours {h['relation']}, at confidence {h['confidence']:g} "
            f"family-wise: the largest of {h['family_size']} bounds (Clopper-Pearson and one-run of {k} membership "
            f"attack{'s' * (k != 1)}, each at {h['bound_confidence']:.4g}, Bonferroni): {where}.")
