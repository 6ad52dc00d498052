"""The sort key of a method's target in reports, without importing the method (reports stay torch-free)."""
from __future__ import annotations


def rank_target(target: str, order: tuple[str, ...], kind: str | None = None) -> tuple:
    """The sort key of ``target`` among a method's targets: its kind's place in ``order`` (``client:3`` is kind
    ``client`` unless ``kind`` says otherwise; unknown kinds last), then its index, then its name."""
    kind = target.split(":", 1)[0] if kind is None else kind
    idx = target.split(":", 1)[1] if ":" in target else ""
    return (order.index(kind) if kind in order else len(order), int(idx) if idx.isdigit() else 0, target)
