"""Numbers more than one module agrees on (one copy each)."""
from __future__ import annotations

#: δ of a DP guarantee or an empirical bound when none is given (dp.delta, account, audit)
DEFAULT_DELTA = 1e-5
#: confidence of the empirical ε lower bounds
DEFAULT_CONFIDENCE = 0.95
#: samples one request draws at most (``privbench sample --n``, a suite's ``samples.n``, its FID and utility
#: counts; 64 is sample's default, and a grid of 100 000 images is already unreadable)
MAX_SAMPLES = 100_000
#: the kinds of attack result (a result's ``kind``), readable without importing the attacks (and torch) so that
#: ``report``, ``audit`` and ``check`` stay light; privbench.attacks.base holds the same names
MEMBERSHIP, MEMORIZATION, RECONSTRUCTION = "membership", "memorization", "reconstruction"
#: the pseudo-method of a model privbench did not train (``attack``/``run --model``, ``privbench.attack``, a suite's
#: ``external:``), and the reports' role of its results
OUTSIDE = "external"
#: the label every result with seeded privacy noise carries (privacy block, report text and tables)
SEEDED_NOISE_LABEL = "reproducible benchmark noise, not a deployable release"
