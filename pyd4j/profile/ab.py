"""A noise-aware A/B of training speed: is "after" faster than "before", and by how much?

Runs of the two sides are alternated (before, after, before, after, ...), so a machine that gets
busier or quieter during the comparison slows both sides alike. Each run gives one number, its
iterations per second. The ratio after/before is estimated on the log scale with the
Hodges-Lehmann estimator (the median of all pairwise differences log(after_i) - log(before_j))
and its 95% interval is the distribution-free one that inverts the exact Mann-Whitney test
(Hollander & Wolfe, Nonparametric Statistical Methods, ch. 4.3): no normality assumed, robust to
one run slowed by a neighbour, and honest with few runs (with 3 runs a side no interval can
exclude 1 at 95%; with 4 it can). Runs are added one pair at a time until the interval excludes
1, or lies inside the "same speed" band, or the run budget is spent; with `futility`, also once
more runs cannot make the change worth keeping: its interval lies below 1 + SAME_BAND (at best a
gain too small to be a setting), or after the least runs its estimate is not above 1 (the runs so
far say it is not faster; more would at best prove a gain within their noise). `out_of_budget`
ends a comparison before its next run when a budget over many comparisons is spent.

Pure: this module runs nothing. `pyd4j.profile.speed` feeds it job runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

CONFIDENCE = 0.95
MIN_RUNS = 4          # per side: the fewest with which a 95% interval can exclude 1
MAX_RUNS = 8          # per side, unless the caller says otherwise
SAME_BAND = 0.03      # an interval inside [1/1.03, 1.03] says "no difference worth a setting"


class ABError(ValueError):
    """Bad input to the comparison (too few or non-positive speeds, a bad budget)."""


def _u_distribution(n: int, m: int) -> np.ndarray:
    """Number of arrangements giving each Mann-Whitney U = 0..n*m for samples of n and m without
    ties (the recursion c(n, m, u) = c(n-1, m, u-m) + c(n, m-1, u))."""
    # table[j] holds the counts for (i, j) while i grows row by row
    table = [np.ones(1, dtype=object) for _ in range(m + 1)]  # i = 0: one arrangement, U = 0
    for i in range(1, n + 1):
        row = [np.ones(1, dtype=object)]                       # j = 0: U = 0
        for j in range(1, m + 1):
            size = i * j + 1
            counts = np.zeros(size, dtype=object)
            left = table[j]                                    # (i-1, j): the largest value is an x, adds j
            counts[j:j + len(left)] += left
            up = row[j - 1]                                    # (i, j-1): the largest value is a y, adds 0
            counts[:len(up)] += up
            row.append(counts)
        table = row
    return table[m]


def _critical_rank(n: int, m: int, confidence: float) -> int:
    """The largest k with P(U <= k - 1) <= (1 - confidence) / 2 under the null: the interval runs from
    the k-th smallest to the k-th largest pairwise difference. 0 when no interval is possible."""
    counts = _u_distribution(n, m)
    total = sum(counts)
    tail = (1.0 - confidence) / 2.0
    cumulative = 0
    k = 0
    for u, c in enumerate(counts):
        cumulative += c
        if cumulative / total <= tail:
            k = u + 1
        else:
            break
    return k


def ratio_interval(before: list[float], after: list[float], confidence: float = CONFIDENCE
                   ) -> tuple[float, float, float]:
    """(estimate, low, high) of after/before: Hodges-Lehmann estimate of the ratio and its
    distribution-free interval at `confidence` (low 0 and high inf when the runs are too few)."""
    b = _speeds(before, "before")
    a = _speeds(after, "after")
    diffs = np.sort((np.log(a)[:, None] - np.log(b)[None, :]).ravel())
    estimate = float(np.exp(np.median(diffs)))
    k = _critical_rank(len(a), len(b), confidence)
    if k == 0:
        return estimate, 0.0, math.inf
    return estimate, float(np.exp(diffs[k - 1])), float(np.exp(diffs[len(diffs) - k]))


def _speeds(values: list[float], side: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ABError(f"no {side} runs to compare; each side needs at least one run with a measured speed")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ABError(f"{side} speeds {list(values)} hold a value that is not a positive number; "
                      f"a run that trained no iteration has no speed and cannot be compared")
    return arr


@dataclass
class Comparison:
    """The result of an A/B: the runs, the ratio after/before (median over median, and the
    Hodges-Lehmann estimate) with its interval, and the verdict."""

    before: list[float] = field(default_factory=list)
    after: list[float] = field(default_factory=list)
    ratio: float | None = None            # median(after) / median(before)
    estimate: float | None = None         # Hodges-Lehmann estimate of after/before
    interval: tuple[float, float] | None = None
    verdict: str = "undecided"            # faster | slower | same | futile | undecided | broken
    reason: str = ""
    failed: list[str] = field(default_factory=list)   # what broke (the after side's failed runs)
    budget_spent: str = ""                # why the comparison ended before its own run budget (a total budget)

    @property
    def runs(self) -> int:
        return len(self.before) + len(self.after)

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "ratio": _round(self.ratio), "estimate": _round(self.estimate),
                "interval": None if self.interval is None else [_round(self.interval[0]), _round(self.interval[1])],
                "before_iterations_per_s": [_round(v) for v in self.before],
                "after_iterations_per_s": [_round(v) for v in self.after],
                "runs": self.runs, "reason": self.reason, "failed": list(self.failed),
                "budget_spent": self.budget_spent or None}


def _round(v: float | None) -> float | None:
    if v is None or not math.isfinite(v):
        return None if v is None else (None if math.isnan(v) else v)
    return round(v, 4)


def judge(before: list[float], after: list[float], confidence: float = CONFIDENCE,
          same_band: float = SAME_BAND) -> Comparison:
    """The verdict on the runs so far: faster/slower when the interval excludes 1, same when it
    lies inside [1/(1+same_band), 1+same_band], undecided otherwise."""
    estimate, low, high = ratio_interval(before, after, confidence)
    ratio = float(np.median(after) / np.median(before))
    c = Comparison(list(before), list(after), ratio, estimate, (low, high))
    pct = f"{confidence:.0%}"
    if low > 1.0:
        c.verdict, c.reason = "faster", f"{pct} interval {low:.3f}-{high:.3f} lies above 1"
    elif high < 1.0:
        c.verdict, c.reason = "slower", f"{pct} interval {low:.3f}-{high:.3f} lies below 1"
    elif low >= 1.0 / (1.0 + same_band) and high <= 1.0 + same_band:
        c.verdict, c.reason = "same", f"{pct} interval {low:.3f}-{high:.3f} lies within {same_band:.0%} of 1"
    else:
        c.verdict = "undecided"
        c.reason = (f"{pct} interval {low:.3f}-{'inf' if math.isinf(high) else f'{high:.3f}'} contains 1 "
                    f"after {len(before)}+{len(after)} runs")
    return c


class RunFailed(Exception):
    """A run of one side did not finish cleanly or measured no speed; `why` says what happened."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class NoProgress(RunFailed):
    """A run finished cleanly but trained too few iterations to measure a speed: on a job that
    trains for a fixed time, the side is too slow to measure, not broken."""


def futile(c: Comparison, same_band: float = SAME_BAND) -> str | None:
    """Why more runs of an undecided comparison cannot make the change worth keeping (None: they can)."""
    if c.interval is None or c.estimate is None:
        return None
    low, high = c.interval
    if high <= 1.0 + same_band:
        return (f"futile: the 95% interval {low:.3f}-{high:.3f} allows at most {high - 1:+.1%}, below the "
                f"{same_band:.0%} a setting is worth")
    if c.estimate <= 1.0:
        return (f"futile: after {len(c.before)}+{len(c.after)} runs the estimate {c.estimate:.3f} is not above 1; more "
                f"runs would at best prove a gain within their noise")
    return None


def compare(run_before: Callable[[], float], run_after: Callable[[], float], min_runs: int = MIN_RUNS,
            max_runs: int = MAX_RUNS, confidence: float = CONFIDENCE, same_band: float = SAME_BAND,
            before_runs: list[float] | None = None, futility: bool = False,
            out_of_budget: Callable[[], str | None] | None = None) -> Comparison:
    """Alternate runs of the two sides (each callable runs the job once and returns its iterations
    per second, or raises RunFailed) until the interval excludes 1 or lies in the same-speed band,
    with at least `min_runs` and at most `max_runs` per side. `before_runs` are speeds already
    measured for the before side (they count towards its runs, and the after side is run first
    until it catches up, so the sides stay alternated). An after run that fails ends the
    comparison as "broken" (the change breaks the job); a before run that fails raises RunFailed."""
    if not 1 <= min_runs <= max_runs:
        raise ABError(f"run budget min_runs={min_runs}, max_runs={max_runs}: need 1 <= min_runs <= max_runs")
    before = list(before_runs or [])
    after: list[float] = []
    while True:
        spent = out_of_budget() if out_of_budget is not None else None
        if spent:
            n = min(len(before), len(after))
            c = judge(before[:n], after[:n], confidence, same_band) if n else Comparison(before, after)
            if c.verdict != "faster":   # faster on the runs so far is proved; anything else is left open
                c.verdict = "undecided"
            c.reason = f"{c.reason or 'no runs'}; the total budget was spent ({spent})"
            c.budget_spent = spent
            return c
        if len(after) < len(before) or len(before) >= max_runs:
            try:
                after.append(run_after())
            except NoProgress as err:
                return Comparison(before, after, verdict="slower", reason=f"the job with this change {err.why}",
                                  failed=[err.why])
            except RunFailed as err:
                return Comparison(before, after, verdict="broken", reason=f"the job with this change failed: {err.why}",
                                  failed=[err.why])
        else:
            before.append(run_before())
        if len(after) == len(before) or (len(after) >= max_runs and len(before) >= max_runs):
            n = min(len(before), len(after))
            if n >= min_runs:
                c = judge(before, after, confidence, same_band)
                why = futile(c, same_band) if futility and c.verdict == "undecided" else None
                if why:
                    c.verdict, c.reason = "futile", f"{why} ({c.reason})"
                    return c
                if c.verdict != "undecided" or n >= max_runs:
                    if c.verdict == "undecided":
                        c.reason += f" (run budget of {max_runs} runs a side spent)"
                    return c
