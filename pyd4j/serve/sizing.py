"""How many rows one output() call runs: the fewest that keep the speed of a whole batch, measured.

DL4J sizes a network's inference workspaces by the rows of the largest output() call it has run, and
they stay allocated while the model is resident: they grow in proportion to the rows (measured on the
example networks: 0.16 MB a row for lenet, 3.3 MB a row for resnet_graph). A dynamic batch of
`max_batch` rows run as slices of fewer rows needs workspaces for one slice only. Small slices pay a
per-call overhead; from some size on they cost no time.

At load the model's worker times the whole batch against slices of a half, a quarter, ... of it,
alternated (whole first, then slice first), and keeps the smallest slice whose fastest time is within
`TOLERANCE` of the whole batch's fastest, if a second set of pairs says so again (else the slice
before it). The fastest of several runs, not their median: on the shared 2-core machine one call of
the same batch took 72-297 ms within one run; interference only adds time. Short calls get more pairs
(as many as fit in STEP_SECONDS, up to MAX_PAIRS). It stops at the first slower slice, or before a
candidate that would take the measurement past `TIME_LIMIT_S` (three pairs instead of five where that
is what fits).

The outputs of a sliced call are those of the rows computed in smaller calls: equal to a whole call's
to float32 rounding (BLAS blocks differently), as a request batched with others already is.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

TOLERANCE = 0.05     # a slice may take this much longer than the whole batch (fastest runs)
PAIRS = 5            # alternated whole/slice pairs per candidate, at least ...
MAX_PAIRS = 25       # ... and up to this many where calls are short: as many as fit in STEP_SECONDS
STEP_SECONDS = 4.0
MIN_PAIRS = 3        # three where five would pass the time limit
TIME_LIMIT_S = 30.0  # measuring stops before a candidate that would take it past this


@dataclass
class Step:
    """One candidate slice: its fastest time over the whole batch's fastest (the decision), and the
    paired ratios slice / whole (median and range, for the reader)."""

    rows: int
    ratio: float
    median_pair_ratio: float
    low: float
    high: float
    kept: bool
    confirms: bool = False   # the chosen slice measured again


@dataclass
class SliceSizing:
    """The rows one output() call runs, and how they were chosen."""

    max_batch: int
    rows: int
    how: str                          # "measured", "fixed" (given by the user) or "whole" (no slicing)
    stopped: str = ""                 # measured: "slower", "one row" or "time limit"
    tolerance: float = TOLERANCE
    seconds: float = 0.0              # time the measurement took
    steps: list[Step] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def candidates(max_batch: int) -> list[int]:
    """Slices to try, largest first: half the batch, a quarter, ... down to one row."""
    out, rows = [], max_batch
    while rows > 1:
        rows = math.ceil(rows / 2)
        out.append(rows)
    return out


def alternate(run: Callable[[int], None], a: int, b: int, pairs: int,
              clock: Callable[[], float] = time.perf_counter) -> dict[int, list[float]]:
    """Seconds of `pairs` runs of each side, alternated (a then b, b then a, ...), so a machine that
    gets busier or quieter slows both sides alike."""
    times: dict[int, list[float]] = {a: [], b: []}
    for i in range(pairs):
        for side in ((a, b) if i % 2 == 0 else (b, a)):
            start = clock()
            run(side)
            times[side].append(clock() - start)
    return times


def measure(run: Callable[[int], None], max_batch: int, tolerance: float = TOLERANCE, pairs: int = PAIRS,
            max_pairs: int = MAX_PAIRS, step_seconds: float = STEP_SECONDS, time_limit_s: float = TIME_LIMIT_S,
            clock: Callable[[], float] = time.perf_counter) -> SliceSizing:
    """`run(rows)` runs the same `max_batch` rows as slices of `rows` (`rows == max_batch`: one call)."""
    t0 = clock()
    run(max_batch)                              # untimed: the first call after load
    start = clock()
    run(max_batch)
    whole = clock() - start

    def pairs_that_fit() -> int:
        left = time_limit_s - (clock() - t0)
        want = min(max_pairs, max(pairs, int(step_seconds / (2 * whole))))  # more pairs where calls are short
        return next((k for k in (want, pairs, MIN_PAIRS) if (2 * k + 1) * whole <= left), 0)  # fewer for a slow model

    def compare(rows: int, n: int, confirms: bool = False) -> Step:
        nonlocal whole
        run(rows)                               # untimed: a first call at this size
        times = alternate(run, max_batch, rows, n, clock)
        whole = min(times[max_batch])
        ratio = min(times[rows]) / whole
        paired = [a / b for a, b in zip(times[rows], times[max_batch])]
        return Step(rows, round(ratio, 4), round(statistics.median(paired), 4), round(min(paired), 4),
                    round(max(paired), 4), ratio <= 1 + tolerance, confirms)

    kept, steps, stopped = [max_batch], [], "one row"
    for rows in candidates(max_batch):
        n = pairs_that_fit()
        if not n:
            stopped = "time limit"
            break
        steps.append(compare(rows, n))
        if not steps[-1].kept:
            stopped = "slower"
            break
        kept.append(rows)
    # the choice measured again: a slice kept on one lucky set of pairs goes back to the one before it
    n = pairs_that_fit()
    if len(kept) > 1 and n:
        steps.append(compare(kept[-1], n, confirms=True))
        if not steps[-1].kept:
            kept.pop()
    elif len(kept) > 1:
        kept.pop()                              # no time left to confirm it
        stopped = "time limit"
    return SliceSizing(max_batch, kept[-1], "measured", stopped, tolerance, round(clock() - t0, 3), steps)
