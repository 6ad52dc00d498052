"""Numbers more than one module agrees on (one copy each)."""
from __future__ import annotations

#: δ of a DP guarantee or an empirical bound when none is given (dp.delta, account, audit)
DEFAULT_DELTA = 1e-5
#: confidence of the empirical ε lower bounds
DEFAULT_CONFIDENCE = 0.95
