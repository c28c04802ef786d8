"""What a run that did not train to its end says about the rest of the job's memory.

A run that completed showed everything the job uses: its peaks size the flags. A run ended at its
measurement window or at `--timeout` showed a part: its peaks size the flags for the whole job only
when the memory is shown flat: both leak verdicts decided "no leak" (pyd4j.profile.diagnose, on memory
left after full collections) and no measure that sizes a flag (RSS, native memory, libnd4j + JavaCPP
bytes held, the live heap) still rising over the later half of the training it measured. Otherwise
the run says what it could not rule out, and no limit is recommended below what the run ran with.

Even a flat window cannot see a leak too slow to show in it: `leak_resolution` says how slow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pyd4j.output import human_bytes
from pyd4j.profile.diagnose import LEAK_MIN_GROWTH, leak_verdicts
from pyd4j.profile.signals import stopped_as_asked
from pyd4j.profile.timeline import Timeline

MIB = 1 << 20
# A measure is flat when its peak over the later half of the training measured is at most this share
# (or PLATEAU_SLACK, whichever is larger) above its peak before.
PLATEAU_SHARE = 0.03
PLATEAU_SLACK = 8 * MIB
PLATEAU_MIN_HALF_S = 5.0    # each half must be at least this long to compare


@dataclass(frozen=True)
class Plateau:
    """Whether the measures that size flags stopped rising: `rising` names each that did not, with by how much."""

    flat: bool
    rising: list[str] = field(default_factory=list)
    reason: str = ""


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


def plateau(t: Timeline) -> Plateau:
    """Compare each measure's peak over the later half of the training measured with its peak before
    (warm-up and start-up included: a peak reached there and not passed since is a plateau)."""
    first = first_iteration_ms(t)
    if first is None or not t.samples:
        return Plateau(False, [], "no training iteration was measured")
    end = t.samples[-1]["t"]
    mid = first + (end - first) / 2.0
    if (end - mid) / 1000.0 < PLATEAU_MIN_HALF_S:
        return Plateau(False, [], f"{(end - first) / 1000.0:.0f} s of training: too short to tell a plateau")
    times = np.array([s["t"] for s in t.samples], dtype=float)
    held = np.array([float((s.get("nd4j_live") or 0) + (s.get("javacpp_total") or 0)) for s in t.samples])
    measures = {"RSS": t.series("rss"), "native memory": t.native(), "off-heap held (libnd4j + JavaCPP)": held}
    live = [(p["t"], p["heap_live"]) for p in t.live_points if p.get("heap_live") is not None]
    rising = []
    for name, values in measures.items():
        rise = _rise(times, values, mid)
        if rise is not None:
            rising.append(f"{name} +{human_bytes(rise)}")
    if live:
        lt, lv = np.array([p[0] for p in live], dtype=float), np.array([p[1] for p in live], dtype=float)
        rise = _rise(lt, lv, mid) if (lt < mid).any() and (lt >= mid).any() else None
        if rise is not None:
            rising.append(f"live heap +{human_bytes(rise)}")
    if rising:
        return Plateau(False, rising, "still rising over the later half of the training measured: " + ", ".join(rising))
    return Plateau(True, [], "no measure rose over the later half of the training measured")


def _rise(times: np.ndarray, values: np.ndarray, mid: float) -> float | None:
    """How far the later half's peak passed the earlier peak beyond the allowance; None when it did not."""
    early, late = values[(times < mid) & ~np.isnan(values)], values[(times >= mid) & ~np.isnan(values)]
    if not early.size or not late.size:
        return None
    before, after = float(early.max()), float(late.max())
    allowed = max(PLATEAU_SLACK, PLATEAU_SHARE * max(before, 0.0))
    return after - before if after - before > allowed else None


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
    flat = plateau(t)
    if not flat.flat:
        return Scope(False, stopped_by, f"{where}: no leak found, but memory is not shown flat ({flat.reason})",
                     resolution, tuple(notes))
    return Scope(True, stopped_by, f"{where}: no leak (both verdicts) and {flat.reason}: sized for the whole job",
                 resolution, tuple(notes))


def leak_resolution(t: Timeline, seconds: float) -> str | None:
    """How slow a leak this run could not see: a leak verdict needs LEAK_MIN_GROWTH of kept memory over
    the points, so a slower one shows only in a longer run."""
    if seconds <= 0:
        return None
    per_hour = LEAK_MIN_GROWTH * 3600.0 / seconds
    return (f"a leak slower than {human_bytes(LEAK_MIN_GROWTH)} over these {seconds:.0f} s of training (about "
            f"{human_bytes(per_hour)} an hour at this speed) does not show in a run this long")
