"""Leak statistics: whether memory a job keeps rises with its iterations, at what rate, and how sure.

Growth is judged only on what is left after collections that can free it. Heap after young
collections still holds old-generation garbage, and array buffers are freed only when the Java
objects owning them are collected, so both grow in healthy jobs until an old or full collection.
The agent writes a "live" point after every full collection (the job's own, or its own heap
inspection, the same as `jcmd GC.class_histogram`), once the deallocators have freed what the
collection released: live heap, libnd4j buffers, JavaCPP bytes. A leak is kept memory that rises
with the iterations (at 99% confidence): Kendall's tau over the points (one-sided, exact for small
samples) gives the confidence, the Theil-Sen slope the rate; both are robust to the odd point taken
mid-iteration. "Not enough data" rather than a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pyd4j.output import human_bytes
from pyd4j.profile.timeline import Timeline

MIB = 1 << 20
# Leak verdicts (over live points: memory left after full collections).
LEAK_MIN_POINTS = 5           # after warm-up; 5 points in rising order is p = 1/120 one-sided
LEAK_MIN_ITERATIONS = 20      # span of iterations the points cover (or seconds, for jobs without iterations)
LEAK_MIN_SECONDS = 20
LEAK_CONFIDENCE = 0.99
LEAK_MIN_GROWTH = 16 * MIB    # off-heap kept memory grown over the points
LEAK_MIN_GROWTH_HEAP = 8 * MIB
LEAK_MIN_RELATIVE_HEAP = 0.25  # ... and a quarter of the live heap: caches DL4J/ND4J grow once are not leaks
LEAK_LATE_SHARE = 0.5         # a leak still rises over the later half of the run at half its rate or more
ENVELOPE_SAMPLES = 20         # samples per window of the off-heap envelope (2 s at the default 100 ms)
ENVELOPE_GCS = 3              # young collections per window of the heap envelope


def plural(unit: str) -> str:
    """'iterations' for 'iteration'; 's' stays 's' (seconds: not "ss")."""
    return unit if unit == "s" else unit + "s"


@dataclass(frozen=True)
class Trend:
    """How a kept quantity moves with iterations (or seconds) over the live points."""

    slope: float          # bytes per x unit (Theil-Sen)
    intercept: float
    p_value: float        # one-sided: the quantity does not rise with x
    growth: float         # slope x span of x, bytes
    n: int                # points used
    span: float           # x span of the points used
    x_unit: str           # "iteration" or "s"
    last_x: float
    last_y: float

    @property
    def confidence(self) -> float:
        return 1.0 - self.p_value


def fit_trend(x: np.ndarray, y: np.ndarray, x_unit: str) -> Trend | None:
    """Robust slope and one-sided significance of y rising with x; None with fewer than 3 usable points."""
    from scipy import stats  # noqa: PLC0415

    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = np.asarray(x, float)[ok], np.asarray(y, float)[ok]
    if x.size < 3 or np.ptp(x) == 0:
        return None
    slope, intercept, _, _ = stats.theilslopes(y, x)
    if np.ptp(y) == 0:
        p = 1.0
    else:
        p = float(stats.kendalltau(x, y, alternative="greater").pvalue)
    span = float(np.ptp(x))
    return Trend(float(slope), float(intercept), p, float(slope) * span, int(x.size), span, x_unit,
                 float(x[-1]), float(y[-1]))


@dataclass(frozen=True)
class LeakVerdict:
    """For one kept quantity: leak, no leak, or not enough data (and why)."""

    status: str           # "leak" | "no-leak" | "not-enough-data"
    label: str
    trend: Trend | None
    reason: str


def _usable(t: Timeline, what: str) -> list[dict]:
    """Live points fit to judge `what` ("heap" or "offheap"): taken once the deallocators had freed
    what the collection released (before that, memory and the bookkeeping of dead arrays are still
    held). For the heap, only the agent's inspections when there are any: right after the job's own
    full collections, that bookkeeping is always still reachable. An inspection during which the job
    collected too (`job_collected`: a job calling System.gc() every iteration keeps its deallocators
    busy for good) counts undrained when its histogram measured that bookkeeping (`heap_bookkeeping`,
    left out of the heap verdict)."""
    points = sorted(t.live_points, key=lambda p: p["t"])
    if what == "heap" and any(p.get("trigger") == "inspection" for p in points):
        return [p for p in points if p.get("trigger") == "inspection" and (
            p.get("heap_drained", True) or (p.get("job_collected") and p.get("heap_bookkeeping") is not None))]
    return [p for p in points if p.get(f"{what}_drained", True)]


def _training_end(t: Timeline) -> float:
    """Epoch ms of the first sample that saw the last iteration. On an iteration axis what the job holds
    after it has no x of its own: a job that returns from its training loop frees what the loop kept, a
    leak included, and the envelope must not read that as the rise levelling off."""
    last = t.iterations()
    return min((s["t"] for s in t.samples if (s.get("iterations") or 0) >= last), default=float("inf"))


def live_axis(t: Timeline, what: str = "offheap") -> tuple[list[dict], np.ndarray, str]:
    """Usable live points after warm-up, and their x: iterations when the job reports them, else seconds."""
    points = _usable(t, what)
    if t.iterations() >= LEAK_MIN_ITERATIONS:
        # warm-up: before the first iteration, and the first point after it (updater state, workspaces learning)
        points = [p for p in points if (p.get("iterations") or 0) >= 1][1:]
        return points, np.array([p.get("iterations") or 0 for p in points], dtype=float), "iteration"
    points = points[1:]
    return points, np.array([(p["t"] - t.t0) / 1000.0 for p in points], dtype=float), "s"


def judge(x: np.ndarray, y: np.ndarray, unit: str, label: str, min_growth: float,
          min_relative: float = 0.0) -> LeakVerdict:
    """Leak when y rises with x at >= LEAK_CONFIDENCE and grows over the points by >= min_growth and
    >= min_relative of where it started."""
    need_span = LEAK_MIN_ITERATIONS if unit == "iteration" else LEAK_MIN_SECONDS
    ok = ~np.isnan(y)
    n, span = int(ok.sum()), float(np.ptp(x[ok])) if ok.any() else 0.0
    if n < LEAK_MIN_POINTS or span < need_span:
        return LeakVerdict("not-enough-data", label, None,
                           f"{n} live points after full collections over {span:.0f} {plural(unit)} after warm-up; "
                           f"a verdict needs {LEAK_MIN_POINTS} points over {need_span} {plural(unit)}")
    trend = fit_trend(x, y, unit)
    if trend is None:
        return LeakVerdict("not-enough-data", label, None, "no spread in the points")
    start = trend.intercept + trend.slope * float(np.nanmin(x[ok]))
    needed = max(min_growth, min_relative * max(start, 0.0))
    if trend.confidence >= LEAK_CONFIDENCE and trend.slope > 0 and trend.growth >= needed:
        return LeakVerdict("leak", label, trend, "")
    why = (f"grows {human_bytes(trend.growth)} at {trend.confidence:.1%} confidence "
           f"(a leak needs {LEAK_CONFIDENCE:.0%} and {human_bytes(needed)})")
    return LeakVerdict("no-leak", label, trend, why)


def _x_of(t: Timeline, times_ms: np.ndarray, unit: str) -> np.ndarray:
    """The x of events at epoch-ms `times_ms`: iterations completed by then (from the samples), or seconds."""
    if unit != "iteration":
        return (np.asarray(times_ms, float) - t.t0) / 1000.0
    marks = np.array([[s["t"], s.get("iterations") or 0] for s in t.samples], dtype=float)
    if not marks.size:
        return np.full(len(times_ms), np.nan)
    return np.floor(np.interp(np.asarray(times_ms, float), marks[:, 0], marks[:, 1]))


def envelope(t: Timeline, what: str, unit: str, size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The lower envelope of what the job holds, per window: for "offheap" the least libnd4j + JavaCPP
    bytes held over each ENVELOPE_SAMPLES samples (exact counters, every interval), for "heap" the least
    heap left by each ENVELOPE_GCS young collections. Garbage only adds to what is held, so this bounds
    what is kept from above at every window; with x at the window's lowest point. On an iteration axis,
    only while the job trains (see `_training_end`). `size`: samples (or young collections) a window."""
    if what == "offheap":
        rows = [(s["t"], _held(s)) for s in t.samples
                if s.get("nd4j_live") is not None or s.get("javacpp_total") is not None]
        size = size or ENVELOPE_SAMPLES
    else:
        rows = [(g["t"], g["heap_after"]) for g in t.gc_events
                if g.get("heap_after") is not None and g.get("kind") not in ("full", "cycle")]
        size = size or ENVELOPE_GCS
    if unit == "iteration":
        end = _training_end(t)
        rows = [r for r in rows if r[0] <= end]
    if len(rows) < size:
        return np.array([]), np.array([])
    data = np.array(rows, dtype=float)
    n = len(data) // size
    windows = data[len(data) - n * size:].reshape(n, size, 2)   # whole windows, ending at the last row
    low = windows[:, :, 1].argmin(axis=1)
    times = windows[np.arange(n), low, 0]
    return _x_of(t, times, unit), windows[np.arange(n), low, 1]


def _later_half(t: Timeline, what: str, unit: str, middle: float, ex: np.ndarray,
                ey: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The envelope's windows past `middle`, 3 or more where the samples allow: a job that sped up late
    in its run (a loaded machine freeing up) leaves fewer whole windows there than the rise needs to be
    judged, so the windows are halved until 3 fit, down to 2 samples (or young collections) a window."""
    size = ENVELOPE_SAMPLES if what == "offheap" else ENVELOPE_GCS
    late = ex >= middle
    while late.sum() < 3 and size > 2:
        size = max(2, size // 2)
        ex, ey = envelope(t, what, unit, size)
        late = ex >= middle
    return ex[late], ey[late]


def _held(record: dict) -> float:
    """Off-heap bytes a sample or live point shows held: libnd4j buffers, JavaCPP bytes, ND4J workspaces."""
    return float((record.get("nd4j_live") or 0) + (record.get("javacpp_total") or 0) + (record.get("ws_bytes") or 0))


def kept_memory(points: list[dict], what: str) -> np.ndarray:
    """What a live point says is kept, in the envelope's measure (off-heap held, or heap usage)."""
    if what == "offheap":
        return np.array([_held(p) for p in points], dtype=float)
    return np.array([p["heap_after_gc"] if p.get("heap_after_gc") is not None else np.nan for p in points], dtype=float)


def judge_with_envelope(t: Timeline, what: str, points: list[dict], x: np.ndarray, y: np.ndarray, unit: str,
                        label: str, min_growth: float, min_relative: float = 0.0) -> LeakVerdict:
    """The live points' verdict (`judge`), tempered by the envelope of what is held between them:

    - a rise the points show is a leak only while it goes on: over the later half of the run the
      envelope must still rise at least LEAK_LATE_SHARE of the points' rate; memory that grew and
      then levelled off (caches filling, workspaces learning their size) is no leak;
    - with too few points for a verdict, the envelope can still prove there is none: kept memory is
      at most what is held, so if what is held never rose `needed` bytes over the first point after
      warm-up, across LEAK_MIN_ITERATIONS or more, kept memory did not either."""
    verdict = judge(x, y, unit, label, min_growth, min_relative)
    times = [p["t"] for p, value in zip(points, y) if not np.isnan(value)]
    if verdict.status == "leak" and times and (max(times) - min(times)) / 1000.0 < LEAK_MIN_SECONDS:
        # a rise shorter than that is a cache filling or a workspace learning its size as often as a leak
        return LeakVerdict("not-enough-data", label, None,
                           f"kept memory rose over {(max(times) - min(times)) / 1000.0:.0f} s of training; a leak "
                           f"verdict needs the rise to last {LEAK_MIN_SECONDS} s")
    ex, ey = envelope(t, what, unit)
    if verdict.status == "leak" and ex.size:
        trend = verdict.trend
        needed = max(min_growth, min_relative * max(float(np.nanmin(y)), 0.0))
        # Kept memory is never released, so all of it is in what is held at every later moment. Where the
        # job later held less than a point had counted as kept (by half a leak's growth or more), the
        # points caught memory it releases later; and where, past the middle of the points, it held less
        # than a leak adding `needed` at a steady rate over them would keep by then, there is no such leak.
        ok = ~np.isnan(y)
        px, py = x[ok], y[ok]
        order = np.argsort(px, kind="stable")
        px, most = px[order], np.maximum.accumulate(py[order])
        before = np.searchsorted(px, ex, side="right")          # points at or before each window
        counted = np.where(before > 0, most[np.maximum(before - 1, 0)], -np.inf)   # the most any of them counted
        first_x = float(px[0])
        share = (ex - first_x) / max(trend.last_x - first_x, 1e-9)
        refuted = (counted - ey >= needed / 2) & (share >= 0.5) & (share <= 1) & (ey < needed * share)
        if refuted.any():
            i = int(np.flatnonzero(refuted)[np.argmin(ey[refuted])])
            return LeakVerdict("no-leak", label, trend,
                               f"the live points rose {human_bytes(trend.growth)}, but at {unit} {ex[i]:.0f} the job held "
                               f"{human_bytes(ey[i])} in all (an upper bound of what it keeps), after a point had counted "
                               f"{human_bytes(counted[i])} as kept, and where a leak adding {human_bytes(needed)} over the "
                               f"points at a steady rate would keep {human_bytes(needed * share[i])}: the points caught "
                               f"memory the job releases later")
        end = max(float(np.nanmax(ex)), trend.last_x)
        lx, ly = _later_half(t, what, unit, (first_x + end) / 2, ex, ey)
        late_trend = fit_trend(lx, ly, unit) if lx.size >= 3 else None
        if late_trend is not None and late_trend.slope < LEAK_LATE_SHARE * trend.slope:
            return LeakVerdict("no-leak", label, trend,
                               f"grew {human_bytes(trend.growth)} and then levelled off: over the later half of the run "
                               f"what is held rose {human_bytes(max(late_trend.slope, 0))}/{unit}, under "
                               f"{LEAK_LATE_SHARE:.0%} of the earlier {human_bytes(trend.slope)}/{unit} (a cache "
                               f"filling or a workspace learning its size, not a leak)")
        return verdict
    if verdict.status != "not-enough-data" or not ex.size:
        return verdict
    kept = kept_memory(points, what)
    ok = ~np.isnan(kept)
    if not ok.any():
        return verdict
    first = int(np.argmax(ok))
    x0, k0 = float(x[first]), float(kept[first])
    after = ex > x0
    if not after.any() or float(np.nanmax(ex[after])) - x0 < (LEAK_MIN_ITERATIONS if unit == "iteration" else LEAK_MIN_SECONDS):
        return verdict
    rose = float(np.nanmax(ey[after])) - k0
    needed = max(min_growth, min_relative * max(k0, 0.0))
    if rose < needed:
        span = float(np.nanmax(ex[after])) - x0
        return LeakVerdict("no-leak", label, None,
                           f"what is held (an upper bound of what is kept) rose at most {human_bytes(max(rose, 0))} "
                           f"over {span:.0f} {plural(unit)} after the live point at {unit} {x0:.0f}; a leak needs {human_bytes(needed)}")
    return verdict


def leak_verdicts(t: Timeline) -> list[LeakVerdict]:
    """Heap and off-heap verdicts over the usable live points (see `_usable`): the bookkeeping of
    arrays that just died (ND4J's reference objects and ids, JavaCPP's deallocators) inflates the heap
    by an amount that depends on how much garbage came before, so points taken before the
    deallocators caught up could fake a trend."""
    heap_points, hx, hunit = live_axis(t, "heap")
    points, x, unit = live_axis(t, "offheap")

    def col(name: str, pts: list[dict] | None = None) -> np.ndarray:
        return np.array([float(p[name]) if p.get(name) is not None else np.nan for p in (points if pts is None else pts)],
                        dtype=float)

    # the heap less ND4J's and JavaCPP's deallocation bookkeeping (from the histogram's classes): it
    # churns with every array made, and how much a histogram catches depends on how many just died;
    # kept arrays show in the off-heap verdict, the job's own objects stay in this one
    heap = col("heap_live", heap_points) - np.nan_to_num(col("heap_bookkeeping", heap_points))
    out = [judge_with_envelope(t, "heap", heap_points, hx, heap, hunit, "live heap", LEAK_MIN_GROWTH_HEAP,
                               LEAK_MIN_RELATIVE_HEAP)]
    nd4j, javacpp = col("nd4j_live"), col("javacpp_total")
    if (~np.isnan(nd4j)).any():
        kept = np.where(np.isnan(javacpp), 0, javacpp) + nd4j + np.nan_to_num(col("ws_bytes"))
        verdict = judge_with_envelope(t, "offheap", points, x, kept, unit,
                                      "off-heap arrays kept (libnd4j buffers + JavaCPP Pointers + workspaces)",
                                      LEAK_MIN_GROWTH)
    else:
        # no allocation counters (the agent's hooks are off): JavaCPP's own count only
        verdict = judge_with_envelope(t, "offheap", points, x, javacpp, unit, "JavaCPP Pointers kept (totalBytes)",
                                      LEAK_MIN_GROWTH)
    out.append(verdict)
    return out
