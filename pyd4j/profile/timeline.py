"""A profiled run on disk, read back into arrays: one JSON-lines timeline per JVM
(`jvm-<pid>.jsonl`; the job and any JVM it starts, see pyd4j.profile.jvms) plus `run.json` (how
the job was started and how it ended). In-process sessions and runs of earlier versions have a
single `timeline.jsonl`.

The JSON lines are appended as they stream, so a run that crashed or was interrupted reads back
as far as it got; a torn last line is skipped.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pydantic import ValidationError

from pyd4j.schemas import PLAN_RECORDS, RunMeta, TimelineStart, check_version
from pyd4j.profile.jvms import LANE_PATTERN, JvmIdentity, identify, lane_files, main_class

TIMELINE = "timeline.jsonl"
RUN_META = "run.json"

MAX_VALUE = 2**63 - 1
"""The agent writes Java longs (bytes, counts, milliseconds): a larger number is not a measurement."""

# Events that are placed in time: a line of one of these kinds without a finite "t" is skipped.
_TIMED = ("sample", "gc", "iter", "epoch", "end")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _event(line: str, skipped: dict[str, int]) -> tuple[dict[str, Any] | None, str]:
    """One timeline line as an event with only sound values, or (None, why it is skipped)."""
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):
        return None, "torn or not JSON"  # the job died mid-write: keep everything before
    if not isinstance(event, dict):
        return None, "not a JSON object"
    kind = event.get("type")
    if not isinstance(kind, str):
        return None, "no event type"
    if kind in _TIMED and not _number(event.get("t")):
        return None, f"{kind} without a time"
    if kind in _TIMED and abs(event["t"]) > MAX_VALUE:
        return None, "time out of range"
    if kind == "iter" and not (_number(event.get("n")) and 0 <= event["n"] <= MAX_VALUE):
        return None, "iter without a count"
    if kind == "epoch" and not (_number(event.get("epoch")) and 0 <= event["epoch"] <= MAX_VALUE):
        return None, "epoch without its number"
    if kind == "start":   # who the JVM is (pid, start time, arguments): its version is checked by the caller
        # only the types of what it holds are checked: its own "t" is never read (t0 is jvm_start), so a
        # start line without one (older runs, hand-written lanes) still says who the JVM is
        try:
            TimelineStart.model_validate({"t": 0, **{k: v for k, v in event.items() if k != "schema"}})
        except ValidationError:
            return None, "start record of wrong types"
    if kind in PLAN_RECORDS:   # the agent's plan and network records: read as dicts of known types later
        try:
            PLAN_RECORDS[kind].model_validate(event)
        except ValidationError:
            return None, f"{kind} record of wrong types"
    dropped = 0
    for key in [k for k, v in event.items() if v is None]:  # null is "not measured", as an absent key is
        del event[key]
    for key, value in list(event.items()):
        if isinstance(value, (float, int)) and not isinstance(value, bool) and \
                not (math.isfinite(value) and abs(value) <= MAX_VALUE):  # past what the agent's Java longs hold
            del event[key]
            dropped += 1
        elif key in SERIES and not (_number(value) and value >= 0):  # bytes and counts are never negative
            del event[key]
            dropped += 1
    if kind == "sample":
        gc = event.get("gc")
        if gc is not None:
            sound = {k: v for k, v in gc.items() if isinstance(v, list) and len(v) == 2 and all(map(_number, v))} \
                if isinstance(gc, dict) else {}
            dropped += (len(gc) if isinstance(gc, dict) else 1) - len(sound)
            event["gc"] = sound
        ws = event.get("ws")
        if ws is not None:
            sound = [w for w in ws if isinstance(w, dict) and "id" in w and "thread" in w
                     and all(_number(v) for k, v in w.items() if k not in ("id", "thread", "site") and v is not None)] \
                if isinstance(ws, list) else []
            dropped += (len(ws) if isinstance(ws, list) else 1) - len(sound)
            event["ws"] = sound
    if dropped:
        skipped["values not finite numbers"] = skipped.get("values not finite numbers", 0) + dropped  # or out of range
    return event, ""


# Per-sample numeric series the report and the diagnosis use (agent field names).
SERIES = (
    "heap_used", "heap_committed", "heap_max", "nonheap_used", "nonheap_committed", "old_used",
    "direct_used", "mapped_used", "rss", "threads", "iterations",
    "javacpp_total", "javacpp_count", "javacpp_physical", "javacpp_max", "javacpp_max_physical",
    # the agent's allocation counters: libnd4j buffers (not counted by JavaCPP) and JavaCPP Pointers
    "nd4j_live", "nd4j_live_count", "nd4j_peak", "nd4j_allocated", "live_points",
    "javacpp_allocated", "javacpp_peak", "javacpp_largest",
)


def _read_meta(run_dir: Path) -> dict[str, Any] | None:
    """The run's run.json ({} when there is none), or None when it cannot be read as an object."""
    from pyd4j.inputs import InputError, read_json  # noqa: PLC0415

    path = run_dir / RUN_META
    if not path.exists():
        return {}
    try:
        meta = read_json(path, "run description")
        RunMeta.model_validate(meta)
    except (InputError, ValidationError):
        return None
    return meta


def share_meta(lanes: list["Timeline"], meta: dict[str, Any]) -> None:
    """Give every lane the run's run.json; the run's exit status is the job's (its primary JVM's),
    not every JVM's, so the other lanes of a multi-JVM run get none."""
    for t in lanes:
        primary = t.jvm is None or t.jvm.primary or len(lanes) == 1
        t.meta = dict(meta) if primary else {**meta, "returncode": None}


class Events:
    """A timeline file's events as they are read, line by line (whole, or as it grows: a run's
    measurement window is judged on the timeline while the job runs)."""

    _KINDS = {"sample": "samples", "gc": "gcs", "iter": "iters", "epoch": "epochs", "error": "errors", "live": "lives",
              "sites": "sites", "note": "notes", "split": "splits", "network": "networks", "plan": "networks",
              "plan_stats": "networks"}

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lists: dict[str, list[dict[str, Any]]] = {k: [] for k in set(self._KINDS.values())}
        self.start: dict[str, Any] = {}
        self.end: dict[str, Any] | None = None
        self.window: dict[str, Any] | None = None
        self.skipped: dict[str, int] = {}

    def feed(self, line: str) -> None:
        line = line.strip()
        if not line:
            return
        event, why = _event(line, self.skipped)
        if event is None:
            self.skipped[why] = self.skipped.get(why, 0) + 1
            return
        kind = event.get("type")
        if kind in self._KINDS:
            self.lists[self._KINDS[kind]].append(event)
        elif kind == "start" and not self.start:
            # the version is checked; the values, as every line's, leniently (a torn run reads back)
            check_version("timeline", event, f"timeline {self.path}", "profile the job again with this pyd4j")
            self.start = event
        elif kind == "end":
            self.end = event
        elif kind == "window":
            self.window = event

    def timeline(self) -> "Timeline":
        """The events so far as a Timeline (the lists are shared, not copied)."""
        meta = _read_meta(self.path.parent)
        skipped = dict(self.skipped)
        if meta is None:
            meta = {}
            skipped["unreadable run.json"] = 1
        torn = sum(n for why, n in skipped.items() if why != "values not finite numbers" and why != "unreadable run.json")
        x = self.lists
        return Timeline(self.path.parent, self.start, x["samples"], x["gcs"], x["iters"], x["epochs"], x["errors"],
                        self.end, meta, torn_lines=torn, skipped=skipped, network_events=x["networks"], path=self.path,
                        live_points=x["lives"], site_snapshots=x["sites"], notes=x["notes"], split_events=x["splits"],
                        window=self.window)


@dataclass
class Timeline:
    """Samples as numpy arrays (NaN where a sample lacks a value) plus the discrete events."""

    run_dir: Path
    start: dict[str, Any]
    samples: list[dict[str, Any]]
    gc_events: list[dict[str, Any]]
    iter_events: list[dict[str, Any]]
    epoch_events: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    end: dict[str, Any] | None
    meta: dict[str, Any] = field(default_factory=dict)
    torn_lines: int = 0                  # lines skipped whole (see `skipped` for why)
    skipped: dict[str, int] = field(default_factory=dict)
    network_events: list[dict[str, Any]] = field(default_factory=list)  # "network", "plan", "plan_stats"
    path: Path | None = None
    jvm: "JvmIdentity | None" = field(default=None, repr=False)
    # what the job kept: one point after each full collection (the job's own or the agent's inspection)
    live_points: list[dict[str, Any]] = field(default_factory=list)
    # allocation sites by call site, sampled by bytes: after each live point, at new peaks, at the end
    site_snapshots: list[dict[str, Any]] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)
    # where the training thread's time went, cumulative (the agent's TimeSplit; pyd4j.profile.timesplit)
    split_events: list[dict[str, Any]] = field(default_factory=list)
    # the agent's "window" line: the JVM ended itself at its measurement window (pyd4j.profile.window)
    window: dict[str, Any] | None = None

    @classmethod
    def load(cls, run_dir: str | Path) -> "Timeline":
        """The job's timeline of a run directory written by `pyd4j profile` (its primary JVM when
        the job started several, see `load_lanes`), or one timeline file.

        Lines that cannot be used (torn, not a JSON object, a sample without a time) are skipped,
        and values that are not finite numbers are dropped from their line; `skipped` counts
        both by reason, so a partial timeline reads as far as it is sound."""
        lanes = cls.load_lanes(run_dir)
        return next((t for t in lanes if t.jvm is not None and t.jvm.primary), lanes[0])

    @classmethod
    def load_lanes(cls, run_dir: str | Path) -> list["Timeline"]:
        """Every JVM's timeline in a run directory, each with its identity (`.jvm`), in start order."""
        run_dir = Path(run_dir)
        if run_dir.is_dir():
            paths = lane_files(run_dir) or [run_dir / TIMELINE]
        else:
            paths = [run_dir]
        if run_dir.is_dir() and not paths[0].exists() and (run_dir / RUN_META).exists():
            lanes = [cls(run_dir, {}, [], [], [], [], [], None, _read_meta(run_dir) or {})]  # no JVM ever reported in
        elif not paths[0].exists():
            raise FileNotFoundError(
                f"no timeline at {run_dir}: give the run directory `pyd4j profile` printed "
                f"(it holds {LANE_PATTERN.replace('%p', '<pid>')} or {TIMELINE}, and {RUN_META})"
            )
        else:
            lanes = [cls._load_file(p) for p in paths]
        lanes.sort(key=lambda t: (t.start.get("jvm_start") or float("inf"), t.path.name if t.path else ""))
        for t, identity in zip(lanes, identify(lanes)):
            t.jvm = identity
        share_meta(lanes, lanes[0].meta)
        return lanes

    @classmethod
    def _load_file(cls, path: Path) -> "Timeline":
        from pyd4j.inputs import regular_file  # noqa: PLC0415

        regular_file(path, "timeline")
        events = Events(path)
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                events.feed(line)
        return events.timeline()

    def until(self, t_ms: float) -> "Timeline":
        """The run as it was known at epoch-ms `t_ms` (no end line): what a prediction made then could see."""
        def before(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [e for e in events if e.get("t", 0) <= t_ms]

        meta = dict(self.meta, returncode=None)
        return Timeline(self.run_dir, self.start, before(self.samples), before(self.gc_events), before(self.iter_events),
                        before(self.epoch_events), before(self.errors), None, meta, path=self.path, jvm=self.jvm,
                        live_points=before(self.live_points), site_snapshots=before(self.site_snapshots),
                        notes=before(self.notes), split_events=before(self.split_events))

    # -- arrays -------------------------------------------------------------------------------

    @property
    def t0(self) -> float:
        """Epoch ms the timeline is measured from (JVM start when known)."""
        if self.start.get("jvm_start"):
            return float(self.start["jvm_start"])
        return float(self.samples[0]["t"]) if self.samples else 0.0

    def times(self, origin_ms: float | None = None) -> np.ndarray:
        """Seconds since t0 (or since `origin_ms`, a common origin for all JVMs of a run), one per sample."""
        origin = self.t0 if origin_ms is None else origin_ms
        return (np.array([s["t"] for s in self.samples], dtype=float) - origin) / 1000.0

    def series(self, name: str) -> np.ndarray:
        """One numeric field per sample; NaN where absent."""
        return np.array([float(s[name]) if s.get(name) is not None else np.nan for s in self.samples], dtype=float)

    def heap_resident(self) -> np.ndarray:
        """Resident bytes of the Java heap per sample (the agent reads smaps about once a second;
        interpolated between reads). Falls back to committed heap where never measured."""
        measured = self.series("heap_rss")
        committed = self.series("heap_committed")
        known = ~np.isnan(measured)
        if not known.any():
            return committed
        x = np.arange(len(measured), dtype=float)
        return np.interp(x, x[known], measured[known])

    def native(self) -> np.ndarray:
        """Native memory outside the JVM's own areas: RSS minus resident heap minus metaspace and
        code cache. ND4J arrays live here (ND4J 1.0.0-M2.1 CPU buffers are not in JavaCPP's
        totalBytes, only in RSS)."""
        return self.series("rss") - self.heap_resident() - self.series("nonheap_committed")

    def native_at_reads(self) -> np.ndarray:
        """`native()` at the samples where the agent read the heap's resident pages, NaN between reads: there
        the heap's share is interpolated, and a heap that grew and shrank between reads shows as native memory."""
        return self.series("rss") - self.series("heap_rss") - self.series("nonheap_committed")

    def gc_totals(self) -> tuple[np.ndarray, np.ndarray]:
        """Cumulative GC count and GC time (ms), summed over collectors, one per sample."""
        counts = np.array([sum(v[0] for v in s.get("gc", {}).values()) for s in self.samples], dtype=float)
        millis = np.array([sum(v[1] for v in s.get("gc", {}).values()) for s in self.samples], dtype=float)
        return counts, millis

    def workspace_series(self) -> dict[str, dict[str, np.ndarray]]:
        """Per workspace ('id@thread'): size, spilled, pinned, max_cycle as arrays over samples."""
        keys: dict[str, None] = {}
        for s in self.samples:
            for w in s.get("ws", ()):
                keys[f"{w['id']}@{w['thread']}"] = None
        out: dict[str, dict[str, np.ndarray]] = {}
        for key in keys:
            cols = {f: np.full(len(self.samples), np.nan) for f in ("size", "spilled", "pinned", "max_cycle", "initial")}
            for i, s in enumerate(self.samples):
                for w in s.get("ws", ()):
                    if f"{w['id']}@{w['thread']}" == key:
                        for f in cols:
                            if w.get(f) is not None:
                                cols[f][i] = w[f]
            out[key] = cols
        return out

    # -- summaries ----------------------------------------------------------------------------

    def peak(self, name: str) -> int | None:
        """Largest value of a series, or None if never sampled."""
        return _nanmax(self.series(name) if self.samples else np.array([]))

    def live_heap_peak(self) -> int | None:
        """Largest live heap measured: object bytes left after a full collection, as
        `jcmd GC.class_histogram` counts them, at every live point (the agent's inspections, the job's
        own full collections, and ones another tool such as jcmd caused). ND4J's and JavaCPP's
        bookkeeping of arrays that wait for their deallocator is reachable then, so it is counted, as
        jcmd counts it. None when no full collection happened: heap after young collections is not the
        live set (old-generation garbage stays in it)."""
        values = [p["heap_live"] for p in self.live_points if p.get("heap_live") is not None]
        return max(values) if values else None

    def peak_sites(self, top: int = 10) -> dict[str, Any] | None:
        """Where the off-heap peak was allocated: the agent writes the sites holding live libnd4j and
        JavaCPP memory at each new off-heap high, so the last such snapshot is the breakdown of the
        peak. Bytes per site are sampled estimates (the agent samples allocations by bytes); `in_use`
        is the exact off-heap in use (libnd4j + JavaCPP) at the sample before it. None without one."""
        highs = [s for s in self.site_snapshots if s.get("reason") == "peak" and s.get("t") is not None]
        if not highs:
            return None
        snap = max(highs, key=lambda s: s["t"])
        before = [x for x in self.samples if x["t"] <= snap["t"]]
        in_use = None
        if before:
            last = before[-1]
            parts = [last.get("nd4j_live"), last.get("javacpp_total")]
            in_use = int(sum(v for v in parts if v is not None)) if any(v is not None for v in parts) else None
        sites = sorted((x for x in snap.get("sites", ()) if x.get("live_bytes", 0) > 0), key=lambda x: -x["live_bytes"])
        sampled = sum(x["live_bytes"] for x in sites)
        rows = [{"site": x.get("site"), "kind": x.get("kind"), "via": x.get("via"), "user": bool(x.get("user")),
                 "live_bytes": int(x["live_bytes"]), "share": x["live_bytes"] / sampled if sampled else None}
                for x in sites[:top]]
        return {"t": snap["t"], "iterations": snap.get("iterations"), "in_use": in_use,
                "sampled_bytes": int(sampled), "site_count": snap.get("site_count"), "sites": rows}

    def heap_after_gc_peak(self) -> int | None:
        """Largest heap left after any collection, young ones included: an upper bound of the live
        set, up to all the old-generation garbage not collected yet."""
        after = [g["heap_after"] for g in self.gc_events if g.get("heap_after") is not None]
        return max(after) if after else None

    def last_sample_value(self, name: str) -> float | None:
        """The last sampled value of a field (cumulative counters), or None."""
        for s in reversed(self.samples):
            if s.get(name) is not None:
                return float(s[name])
        return None

    def allocators(self) -> dict[str, dict[str, int | None]]:
        """Which off-heap allocators the job used, from the agent's exact counters: libnd4j array
        buffers (`nd4j`, not counted by JavaCPP's maxbytes) and JavaCPP Pointers (`javacpp`, counted)."""
        def value(name: str) -> int | None:
            v = self.last_sample_value(name)
            return int(v) if v is not None else None

        return {
            "nd4j": {"allocated": value("nd4j_allocated"), "peak": self.peak("nd4j_peak") or self.peak("nd4j_live")},
            "javacpp": {"allocated": value("javacpp_allocated"),
                        "peak": max(filter(None, (self.peak("javacpp_peak"), self.peak("javacpp_total"))), default=None),
                        "largest": value("javacpp_largest")},
        }

    def peaks(self) -> dict[str, int | None]:
        """The peaks a flag generator needs, in bytes."""
        return {
            "heap_used": self.peak("heap_used"),
            "heap_live": self.live_heap_peak(),
            "heap_after_gc": self.heap_after_gc_peak(),
            "heap_committed": self.peak("heap_committed"),
            "nonheap_used": self.peak("nonheap_used"),
            "direct_used": self.peak("direct_used"),
            "mapped_used": self.peak("mapped_used"),
            "javacpp_total": max(filter(None, (self.peak("javacpp_total"), self.peak("javacpp_peak"))), default=None),
            "javacpp_largest": self.peak("javacpp_largest"),
            "nd4j": self.peak("nd4j_peak") or self.peak("nd4j_live"),
            "javacpp_physical": self.peak("javacpp_physical"),
            "rss": self.peak("rss"),
            "native": _nanmax(self.native()),
            "threads": self.peak("threads"),
        }

    def limits(self) -> dict[str, int | None]:
        """The limits the job ran under, as the JVM and JavaCPP reported them."""
        last = {}
        for s in reversed(self.samples):
            if s.get("javacpp_max") is not None:
                last = s
                break
        heap_max = self.start.get("heap_max") or (self.samples[-1].get("heap_max") if self.samples else None)
        return {
            "heap_max": heap_max,
            "max_direct": self.start.get("max_direct") if (self.start.get("max_direct") or -1) >= 0 else None,
            "javacpp_max": last.get("javacpp_max"),
            "javacpp_max_physical": last.get("javacpp_max_physical"),
            "cgroup": self.meta.get("cgroup_limit_bytes"),
        }

    def nd4j_settings(self) -> dict | None:
        """The agent's report at the first fit(): ND4J's settings, the build and BLAS it loaded, the job's
        malloc setting (None: no fit() reported)."""
        return next((n["nd4j"] for n in self.notes if isinstance(n.get("nd4j"), dict)), None)

    def iterations(self) -> int:
        """Training iterations the job completed (0 if it has no DL4J listener hook)."""
        counts = [s.get("iterations", 0) for s in self.samples]
        ends = [self.end.get("iterations", 0)] if self.end else []
        return int(max(counts + ends + [0]))

    def iterations_per_second(self) -> float | None:
        """Training speed from first to last iteration seen (excludes JVM and ND4J start-up)."""
        marks = [(s["t"], s["iterations"]) for s in self.samples if s.get("iterations")]
        if self.iter_events:
            marks += [(e["t"], e["n"]) for e in self.iter_events]
        if len(marks) < 2:
            return None
        marks.sort()
        first = next((m for m in marks if m[1] >= 1), None)
        if first is None:
            return None
        last = marks[-1]
        seconds = (last[0] - first[0]) / 1000.0
        return (last[1] - first[1]) / seconds if seconds > 0 and last[1] > first[1] else None

    def duration_s(self) -> float:
        """Seconds from JVM start to the last line written."""
        stamps = [s["t"] for s in self.samples] + ([self.end["t"]] if self.end else [])
        return (max(stamps) - self.t0) / 1000.0 if stamps else 0.0

    @property
    def exit_code(self) -> int | None:
        return self.meta.get("returncode")

    @property
    def name(self) -> str:
        """The job's main class (or jar) as the JVM reported it; for `mvn exec:java`, the class
        Maven runs, not Maven's own launcher."""
        if self.start.get("command"):
            return main_class(self.start)
        command = " ".join(self.meta.get("command", [])[-1:])
        return (command or "job").split(" ")[0]


def _nanmax(values: np.ndarray) -> int | None:
    """The largest value that is a number, or None when there is none."""
    values = values[~np.isnan(values)]
    return int(values.max()) if values.size else None
