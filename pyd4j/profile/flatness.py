"""What a run that did not train to its end says about the rest of the job's memory.

A run that completed showed everything the job uses: its peaks size the flags. A run ended at its
measurement window or at `--timeout` showed a part: its peaks size the flags for the whole job only
when the memory is shown flat: both leak verdicts decided "no leak" (pyd4j.profile.diagnose, on memory
left after full collections); the off-heap memory kept not rising steadily either, by less than a leak
verdict needs (`slow_rise`: a slow leak, which would outgrow the flags of a long job); and no measure
that sizes a flag (libnd4j + JavaCPP bytes held, the live heap, metaspace and code cache, native memory)
still rising over the last third of the training it measured. Otherwise the run says what it could not
rule out, and no limit is recommended below what the run ran with.

Even a flat window cannot see a leak too slow to show in it: `leak_resolution` says how slow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pyd4j.output import human_bytes
from pyd4j.profile.leak_verdicts import (LEAK_CONFIDENCE, LEAK_LATE_SHARE, LEAK_MIN_GROWTH, envelope, fit_trend,
                                         kept_memory, leak_verdicts, live_axis)
from pyd4j.profile.signals import stopped_as_asked
from pyd4j.profile.timeline import Timeline

MIB = 1 << 20
# The training measured is cut into PLATEAU_CHUNKS slices of equal time; a measure is flat when its level
# over the last PLATEAU_LATE of them is at most PLATEAU_SHARE (or PLATEAU_SLACK, whichever is larger)
# above its level over the ones before, and its drift over the later half of the slices (Theil-Sen), over
# the whole training measured, is within the same allowance: a steady creep is not a plateau. Levels per
# slice: the peak of exact counters, the median of native memory (RSS less the heap's resident pages, where
# the agent read them: in between, the heap's share is interpolated).
PLATEAU_CHUNKS = 8
PLATEAU_LATE = 2
PLATEAU_SHARE = 0.10
PLATEAU_SLACK = 16 * MIB
PLATEAU_MIN_CHUNK_S = 3.0    # each slice must be at least this long to compare


@dataclass(frozen=True)
class Plateau:
    """Whether the measures that size flags stopped rising: `rising` names each that did not, with by how much."""

    flat: bool
    rising: list[str] = field(default_factory=list)
    reason: str = ""
    drift: float | None = None     # native memory's slope over the later half of the training measured, bytes an hour


def first_iteration_ms(t: Timeline) -> float | None:
    """Epoch ms of the first sample or iteration line that shows an iteration done."""
    stamps = [s["t"] for s in t.samples if (s.get("iterations") or 0) >= 1] + [e["t"] for e in t.iter_events]
    return min(stamps) if stamps else None


def trained_seconds(t: Timeline) -> float:
    """Seconds from the first iteration to the last line the timeline holds (0 before any iteration)."""
    first = first_iteration_ms(t)
    if first is None or not t.samples:
        return 0.0
    last = max(t.samples[-1]["t"], t.iter_events[-1]["t"] if t.iter_events else 0)
    return max(0.0, (last - first) / 1000.0)


def plateau(t: Timeline, allowance: float = 1.0) -> Plateau:
    """Whether each measure that sizes a flag stopped rising over the training measured (see the constants):
    libnd4j + JavaCPP bytes held, the live heap, metaspace and code cache, native memory. `drift` is native
    memory's robust slope over the slices (bytes an hour), said even when it is within the allowance.
    `allowance` scales the rise and drift allowed (an auto window ends on a clearer plateau than the
    sizing check asks for: see pyd4j.profile.window.WINDOW_ALLOWANCE)."""
    first = first_iteration_ms(t)
    if first is None or not t.samples:
        return Plateau(False, [], "no training iteration was measured")
    end = t.samples[-1]["t"]
    if (end - first) / 1000.0 < PLATEAU_CHUNKS * PLATEAU_MIN_CHUNK_S:
        return Plateau(False, [], f"{(end - first) / 1000.0:.0f} s of training: too short to tell a plateau")
    edges = np.linspace(first, end, PLATEAU_CHUNKS + 1)
    times = np.array([s["t"] for s in t.samples], dtype=float)
    held = np.array([float((s.get("nd4j_live") or 0) + (s.get("javacpp_total") or 0)) for s in t.samples])
    live = [(p["t"], float(p["heap_live"])) for p in t.live_points if p.get("heap_live") is not None]
    measures = [("off-heap held (libnd4j + JavaCPP)", times, held, np.nanmax),
                ("metaspace and code cache", times, t.series("nonheap_used"), np.nanmax),
                ("native memory", times, t.native_at_reads(), np.nanmedian),
                ("live heap", np.array([p[0] for p in live], dtype=float), np.array([p[1] for p in live], dtype=float), np.nanmax)]
    rising, drift = [], None
    hours = (end - first) / 3.6e6
    for name, x, y, level in measures:
        levels = _levels(x, y, edges, level)
        early, late = levels[:-PLATEAU_LATE], levels[-PLATEAU_LATE:]
        early, late = early[~np.isnan(early)], late[~np.isnan(late)]
        slope = _drift(edges[PLATEAU_CHUNKS // 2:], levels[PLATEAU_CHUNKS // 2:])
        if name == "native memory":
            drift = slope
        if not early.size or not late.size:
            continue
        allowed = allowance * max(PLATEAU_SLACK, PLATEAU_SHARE * max(float(early.max()), 0.0))
        rise = float(late.max() - early.max())
        if rise > allowed:
            rising.append(f"{name} +{human_bytes(rise)}")
        elif slope is not None and slope * hours > allowed:
            rising.append(f"{name} drifting {human_bytes(slope)} an hour")
    if rising:
        return Plateau(False, rising, "still rising over the last third of the training measured: " + ", ".join(rising),
                       drift)
    return Plateau(True, [], "no measure rose over the last third of the training measured", drift)


def _levels(x: np.ndarray, y: np.ndarray, edges: np.ndarray, level) -> np.ndarray:
    """The level of `y` in each slice between `edges` (NaN in a slice without a value)."""
    out = np.full(len(edges) - 1, np.nan)
    for i in range(len(edges) - 1):
        inside = (x >= edges[i]) & (x <= edges[i + 1]) & ~np.isnan(y)
        if inside.any():
            out[i] = float(level(y[inside]))
    return out


def _drift(edges: np.ndarray, levels: np.ndarray) -> float | None:
    """Bytes an hour: the Theil-Sen slope of the levels of the slices between `edges` (None with fewer than 3)."""
    from scipy import stats  # noqa: PLC0415

    mids = (edges[:-1] + edges[1:]) / 2.0
    ok = ~np.isnan(levels)
    if ok.sum() < 3:
        return None
    return float(stats.theilslopes(levels[ok], mids[ok] / 3.6e6)[0])


@dataclass(frozen=True)
class Scope:
    """For what the run's peaks size flags: the whole job, or only what the run measured (and why)."""

    whole_job: bool
    ended: str                         # completed | window | timeout | a signal's name | failed
    why: str
    leak_resolution: str | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"whole_job": self.whole_job, "ended": self.ended, "why": self.why,
                "leak_resolution": self.leak_resolution, "notes": list(self.notes)}


def sizing_scope(t: Timeline) -> Scope:
    """Whether the run's peaks are the whole job's: a completed run's are; a run stopped at its window
    or at --timeout's are when its memory is flat (see the module); no other run's are."""
    stopped_by = t.meta.get("stopped_by")
    if t.exit_code == 0 and not t.meta.get("interrupted"):
        return Scope(True, "completed", "the run trained to its end: its peaks are the job's")
    if not stopped_as_asked(stopped_by):
        how = stopped_by or "failed"
        return Scope(False, how, f"the run ended ({how}, exit {t.exit_code}) before showing what the rest of the job needs")
    seconds = trained_seconds(t)
    where = f"the {'window' if stopped_by == 'window' else '--timeout'} ({t.iterations()} iterations, {seconds:.0f} s of training)"
    notes = []
    if not t.epoch_events and t.iterations():
        notes.append(f"{where} ended before the job's first epoch end: memory the job uses only at epoch ends "
                     f"(evaluation, checkpoints) is not in these figures")
    resolution = leak_resolution(t, seconds)
    verdicts = leak_verdicts(t)
    leaks = [v for v in verdicts if v.status == "leak"]
    unknown = [v for v in verdicts if v.status == "not-enough-data"]
    if leaks:
        return Scope(False, stopped_by, f"{where} shows a leak ({'; '.join(v.label for v in leaks)}): no limit holds "
                                         f"the whole job", resolution, tuple(notes))
    if unknown:
        return Scope(False, stopped_by, f"{where} measured too little to rule a leak out ("
                                         + "; ".join(f"{v.label}: {v.reason}" for v in unknown) + ")", resolution, tuple(notes))
    rise = slow_rise(t)
    if rise:
        return Scope(False, stopped_by, f"{where}: no leak verdict, but {rise}", resolution, tuple(notes))
    flat = plateau(t)
    if flat.drift is not None and flat.drift > 0:
        notes.append(f"native memory outside the heap and ND4J's arrays drifted about {human_bytes(flat.drift)} an hour "
                     f"over {where} (glibc's allocator, threads, JIT): a drift that went on at that rate would pass the "
                     f"flags' headroom in a long job; --verify-full (or a longer --window) shows whether it levels off")
    if not flat.flat:
        return Scope(False, stopped_by, f"{where}: no leak found, but memory is not shown flat ({flat.reason})",
                     resolution, tuple(notes))
    return Scope(True, stopped_by, f"{where}: no leak (both verdicts) and {flat.reason}: sized for the whole job",
                 resolution, tuple(notes))


def slow_rise(t: Timeline) -> str | None:
    """A steady rise of the off-heap memory kept after full collections, too small in this run for a leak
    verdict (under LEAK_MIN_GROWTH): rising with the iterations at LEAK_CONFIDENCE over the live points,
    and over their later half still at LEAK_LATE_SHARE of that rate or more (not levelling off). A rise that
    goes on passes any limit in a job long enough, so the run's peaks are not the whole job's."""
    points, x, unit = live_axis(t, "offheap")
    y = kept_memory(points, "offheap")
    trend = fit_trend(x, y, unit)
    if trend is None or trend.confidence < LEAK_CONFIDENCE or trend.slope <= 0:
        return None
    # levelled off: over the later half, the points (or, with fewer than 3 there, the envelope of what is
    # held, an upper bound of what is kept) rise at under LEAK_LATE_SHARE of the rate
    mid = (float(np.nanmin(x)) + float(np.nanmax(x))) / 2
    late_x, late_y = x[x >= mid], y[x >= mid]
    if late_x.size < 3:
        ex, ey = envelope(t, "offheap", unit)
        late_x, late_y = ex[ex >= mid], ey[ex >= mid]
    late = fit_trend(late_x, late_y, unit) if late_x.size >= 3 else None
    if late is not None and late.slope < LEAK_LATE_SHARE * trend.slope:
        return None
    per = "an iteration" if unit == "iteration" else "a second"
    return (f"the off-heap memory it kept rose {human_bytes(trend.growth)} over {trend.span:.0f} {unit}s of its "
            f"{trend.n} live points at {trend.confidence:.1%} confidence ({human_bytes(trend.slope)} {per}, still "
            f"rising over the later half): under the {human_bytes(LEAK_MIN_GROWTH)} a leak verdict needs in a run "
            f"this short, but a rise that goes on passes any limit in a long job")


def leak_resolution(t: Timeline, seconds: float) -> str | None:
    """How slow a leak this run could not see: a leak verdict needs LEAK_MIN_GROWTH of kept memory over
    the points, so a slower one shows only in a longer run."""
    if seconds <= 0:
        return None
    per_hour = LEAK_MIN_GROWTH * 3600.0 / seconds
    return (f"a leak slower than {human_bytes(LEAK_MIN_GROWTH)} over these {seconds:.0f} s of training (about "
            f"{human_bytes(per_hour)} an hour at this speed) does not show in a run this long")
