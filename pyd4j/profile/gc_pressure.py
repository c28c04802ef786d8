"""GC pressure: the share of wall time a job spent in garbage collection, overall and in its worst
window, less the full collections made only to measure its live set; a warning with -Xmx when high."""

from __future__ import annotations

import numpy as np

from pyd4j.output import human_bytes
from pyd4j.profile.finding import Finding, grow_limit
from pyd4j.profile.timeline import Timeline
from pyd4j.units import jvm_size

GC_SHARE_WARN = 0.10
MEASURING_GC_CAUSES = ("Diagnostic Command", "Heap Inspection Initiated GC")
GC_WINDOW_S = 5.0
GC_WINDOW_WARN = 0.30


def gc_share(t: Timeline) -> tuple[float, float]:
    """(overall GC time share, worst share over a GC_WINDOW_S window)."""
    if len(t.samples) < 2:
        return 0.0, 0.0
    times = t.times()
    _, millis = t.gc_totals()
    # full collections made to measure the live set (the agent's inspections, jcmd's) are not the job's pressure
    # (when the collector's counters include each: the collection's end)
    measuring = [(g["t"] + (g.get("duration_ms") or 0), g.get("duration_ms") or 0) for g in t.gc_events
                 if g.get("cause") in MEASURING_GC_CAUSES]
    if measuring:
        at = (np.array([m[0] for m in measuring], dtype=float) - t.t0) / 1000.0
        spent = np.cumsum([m[1] for m in measuring], dtype=float)
        idx = np.searchsorted(at, times, side="right")
        millis = millis - np.where(idx > 0, spent[np.maximum(idx - 1, 0)], 0.0)
    wall = times[-1] - times[0]
    overall = (millis[-1] - millis[0]) / 1000.0 / wall if wall > 0 else 0.0
    worst = 0.0
    j = 0
    for i in range(len(times)):
        while times[i] - times[j] > GC_WINDOW_S:
            j += 1
        span = times[i] - times[j]
        if span >= GC_WINDOW_S * 0.8:
            worst = max(worst, (millis[i] - millis[j]) / 1000.0 / span)
    return float(overall), float(worst)


def gc_pressure(t: Timeline) -> list[Finding]:
    """A warning when GC took GC_SHARE_WARN of the run, or GC_WINDOW_WARN of its worst window."""
    overall, worst = gc_share(t)
    if overall < GC_SHARE_WARN and worst < GC_WINDOW_WARN:
        return []
    peaks, limits = t.peaks(), t.limits()
    live = peaks["heap_live"] or peaks["heap_used"]
    new = grow_limit(max(live or 0, 1) * 3, 1.0)
    return [Finding(
        "gc-pressure", "warning", f"GC pressure: {overall:.0%} of the run spent in GC",
        [f"GC time share {overall:.1%} overall, {worst:.1%} in the worst {GC_WINDOW_S:.0f} s window",
         f"live heap after GC up to {human_bytes(live)} of -Xmx {human_bytes(limits['heap_max'])}"],
        "give the heap room: about 3x the live heap; reuse DataSets/INDArrays instead of creating them per iteration",
        [f"-Xmx{jvm_size(max(new, limits['heap_max'] or 0))}"] if (limits["heap_max"] or 0) < new else [],
        {"gc_share": overall, "gc_share_worst_window": worst},
    )]
