"""The verdict rule of a paper claim (docs/conventions.md §9), as pure functions of the numbers: no file is read.
:func:`summarize` makes each side's mean and interval, :func:`verdict` compares the two sides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

#: the confidence of every interval the rule compares (the bootstrap CIs of results are 95 % too)
CONFIDENCE = 0.95
#: how far privbench's relative gap may be from the paper's, as a ratio either way, for "reproduced"
MAGNITUDE_FACTOR = 2.0

REPRODUCED = "reproduced"
DIRECTION = "direction reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive at this n"

T_OVER_SEEDS = "t-interval over seeds"
OWN_CI = "the result's bootstrap CI (one seed)"


@dataclass(frozen=True)
class Side:
    """One side of a claim: mean, interval (None: none), the seeds with a value, how the interval was made, and
    why there is no value."""
    mean: float | None
    lo: float | None
    hi: float | None
    n_seeds: int
    basis: str | None = None
    why: str | None = None

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reason: str
    gap: float | None = None        # privbench's (subject − baseline) / baseline
    paper_gap: float | None = None  # the paper's


def _finite(v) -> bool:
    return v is not None and not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(float(v))


def summarize(values: list, own_ci=None, why: str | None = None,
              bounds: tuple[float, float] = (-math.inf, math.inf)) -> Side:
    """The side of one claim from its values, one per seed (None and NaN dropped); ``own_ci``: the result's
    bootstrap ``[lo, hi]``, used with one seed; ``bounds``: the metric's range the interval is clipped to; ``why``:
    the reason given when no value is left."""
    vals = [float(v) for v in values if _finite(v)]
    n = len(vals)
    if n == 0:
        return Side(None, None, None, 0, why=f"missing ({why or 'no value'})")
    m = math.fsum(vals) / n
    if n >= 2:
        sd = math.sqrt(math.fsum((v - m) ** 2 for v in vals) / (n - 1))
        h = float(stats.t.ppf(1 - (1 - CONFIDENCE) / 2, n - 1)) * sd / math.sqrt(n)
        return Side(m, max(m - h, bounds[0]), min(m + h, bounds[1]), n, T_OVER_SEEDS)
    if own_ci is not None and len(own_ci) == 2 and all(_finite(x) for x in own_ci) and own_ci[0] <= own_ci[1]:
        return Side(m, float(own_ci[0]), float(own_ci[1]), 1, OWN_CI)
    return Side(m, None, None, 1, why="one seed and no CI of its own")


@dataclass(frozen=True)
class Paired:
    """The per-seed difference subject − baseline over the seeds both sides share: mean and t-interval."""
    mean: float
    lo: float
    hi: float
    n_seeds: int

    def text(self, better: str) -> str:
        """One line: the difference, its interval, and whether it excludes 0 in the claim's direction."""
        side = ((self.hi < 0) if better == "lower" else (self.lo > 0))
        against = (self.lo > 0) if better == "lower" else (self.hi < 0)
        what = ("excludes 0 in the claim's direction" if side else "excludes 0 against the claim" if against
                else "includes 0")
        return (f"paired over {self.n_seeds} seeds: subject − baseline {self.mean:.4g} [{self.lo:.4g}, "
                f"{self.hi:.4g}], {what}")


def paired(subject: dict, baseline: dict) -> Paired | None:
    """:class:`Paired` of two ``{seed: value}`` maps over the seeds with a finite value on both sides; None with
    fewer than two such seeds. Never part of the verdict."""
    diffs = [float(subject[k]) - float(baseline[k]) for k in sorted(set(subject) & set(baseline))
             if _finite(subject[k]) and _finite(baseline[k])]
    s = summarize(diffs)
    return Paired(s.mean, s.lo, s.hi, s.n_seeds) if s.n_seeds >= 2 else None


def relative_gap(subject: float | None, baseline: float | None) -> float | None:
    """(subject − baseline) / baseline; None when either is missing or the baseline is 0."""
    if not _finite(subject) or not _finite(baseline) or baseline == 0:
        return None
    return (subject - baseline) / baseline


def _pct(g: float) -> str:
    return f"{100 * g:+.3g} %"


def _interval(s: Side) -> str:
    return f"[{s.lo:.4g}, {s.hi:.4g}]"


def verdict(subject: Side, baseline: Side, better: str, paper_subject: float | None = None,
            paper_baseline: float | None = None) -> Verdict:
    """The verdict of a claim that ``subject`` is ``better`` ("lower" or "higher") than ``baseline``;
    ``paper_*``: the paper's numbers, when it gives them."""
    if better not in ("lower", "higher"):
        raise ValueError(f"better: {better!r}; lower or higher")
    gap, paper_gap = relative_gap(subject.mean, baseline.mean), relative_gap(paper_subject, paper_baseline)
    lacking = [f"{name}: {s.why}" for name, s in (("subject", subject), ("baseline", baseline))
               if not s.has_interval]
    if lacking:
        return Verdict(INCONCLUSIVE, "; ".join(lacking), gap, paper_gap)
    if subject.lo <= baseline.hi and baseline.lo <= subject.hi:
        return Verdict(INCONCLUSIVE, f"the 95 % intervals overlap (subject {_interval(subject)}, baseline "
                                     f"{_interval(baseline)})", gap, paper_gap)
    wins = subject.hi < baseline.lo if better == "lower" else subject.lo > baseline.hi
    if not wins:
        return Verdict(NOT_REPRODUCED, f"the baseline is {better} than the subject, intervals apart", gap, paper_gap)
    if paper_gap is None or gap is None:
        why = ("the paper gives no numbers for both sides" if paper_gap is None
               else "privbench's baseline is 0: no relative gap")
        return Verdict(DIRECTION, f"the subject is {better}, intervals apart; magnitude not compared ({why})",
                       gap, paper_gap)
    ratio = gap / paper_gap
    within = 1 / MAGNITUDE_FACTOR <= ratio <= MAGNITUDE_FACTOR
    words = "within" if within else "outside"
    return Verdict(REPRODUCED if within else DIRECTION,
                   f"the subject is {better}, intervals apart; relative gap {_pct(gap)} vs the paper's "
                   f"{_pct(paper_gap)}: {words} a factor {MAGNITUDE_FACTOR:g}", gap, paper_gap)
