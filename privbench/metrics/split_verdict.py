"""Whether a member/non-member shift check flagged a shift, read from its dict: reports and gates ask this without
importing the check itself (:mod:`privbench.metrics.split_shift` computes with torch)."""
from __future__ import annotations


def flagged(res: dict) -> bool:
    """Whether a shift check's dict flags a shift: detected (p ≤ α) or material (CI lower bound > 0.6)."""
    return bool(res.get("shift") or res.get("material"))
