"""PIAN: PIA with ε₀ rescaled to the mean absolute value of a standard normal (Kong et al., ICLR 2024; official code
``kong13661/PIA``). The formula and the constant are in :mod:`privbench.attacks.pia` (docs/attacks.md §3)."""
from __future__ import annotations

from ..core.registry import ATTACKS
from .pia import PIA


@ATTACKS.register_class
class PIAN(PIA):
    name = "pian"
    description = "PIAN: PIA with eps0 rescaled to mean |eps0| = sqrt(2/pi) (official constant)"
    report_order = 32  # beside pia (the same query, rescaled)
    normalize = True
