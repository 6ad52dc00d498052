"""Hand-made Targets with analytic ε-predictors (shipped in privbench.testing.fakes, re-exported for the tests)."""
from __future__ import annotations

from privbench.testing.fakes import SCHEDULE, CallLog, fake_target, gaussian_eps, memorizing_eps

__all__ = ["SCHEDULE", "CallLog", "fake_target", "gaussian_eps", "memorizing_eps"]
