"""Numbers more than one module agrees on (one copy each)."""
from __future__ import annotations

#: δ of a DP guarantee or an empirical bound when none is given (dp.delta, account, audit)
DEFAULT_DELTA = 1e-5
#: confidence of the empirical ε lower bounds
DEFAULT_CONFIDENCE = 0.95
#: samples one request draws at most (``sample --n``, a suite's ``samples.n``, its FID and utility counts)
MAX_SAMPLES = 100_000
#: the kinds of attack result (a result's ``kind``), readable without torch; privbench.attacks.base holds the same
MEMBERSHIP, MEMORIZATION, RECONSTRUCTION = "membership", "memorization", "reconstruction"
#: the pseudo-method of a model privbench did not train (``--model``, ``privbench.attack``, a suite's ``external:``)
OUTSIDE = "external"
#: the label every result with seeded privacy noise carries (privacy block, report text and tables)
SEEDED_NOISE_LABEL = "reproducible benchmark noise, not a deployable release"
