"""A run's timelines as a Chrome trace (chrome://tracing, ui.perfetto.dev): one process per JVM with
its memory counters, GC slices, iterations, epochs and errors, on the run's common time axis."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pyd4j.profile.jvms import lane_label, run_origin_ms
from pyd4j.profile.timeline import Timeline


def perfetto_trace(lanes: Timeline | Sequence[Timeline]) -> dict:
    """Chrome trace format (chrome://tracing, ui.perfetto.dev): one process per JVM with its
    counters, GC slices and iterations, on a common time axis."""
    lanes = [lanes] if isinstance(lanes, Timeline) else list(lanes)
    origin = run_origin_ms(lanes)
    events: list[dict] = []
    for order, t in enumerate(lanes):
        events += _trace_lane(t, origin, order)
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _trace_lane(t: Timeline, origin: float, order: int) -> list[dict]:
    pid = t.start.get("pid", order + 1)
    events: list[dict] = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": lane_label(t)}},
                          {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": order}}]
    us = lambda ms: (ms - origin) * 1000.0  # noqa: E731
    mib = float(1 << 20)
    heap_res = t.heap_resident()
    native = t.native()
    for i, s in enumerate(t.samples):
        ts = us(s["t"])
        events.append({"ph": "C", "pid": pid, "name": "memory MiB", "ts": ts, "args": {
            "heap used": round(s.get("heap_used", 0) / mib, 2),
            "heap resident": round(float(np.nan_to_num(heap_res[i])) / mib, 2),
            "native": round(float(np.nan_to_num(native[i])) / mib, 2),
            "rss": round(s.get("rss", 0) / mib, 2),
        }})
        if s.get("javacpp_total") is not None:
            events.append({"ph": "C", "pid": pid, "name": "JavaCPP MiB", "ts": ts, "args": {
                "totalBytes": round(s["javacpp_total"] / mib, 2),
                "physicalBytes": round((s.get("javacpp_physical") or 0) / mib, 2)}})
        events.append({"ph": "C", "pid": pid, "name": "threads", "ts": ts, "args": {"threads": s.get("threads", 0)}})
        if s.get("ws"):
            events.append({"ph": "C", "pid": pid, "name": "workspaces MiB", "ts": ts,
                           "args": {f"{w['id']}@{w['thread']}": round(w["size"] / mib, 3) for w in s["ws"]}})
    for g in t.gc_events:
        events.append({"ph": "X", "pid": pid, "tid": "GC", "name": g.get("name", "GC"), "ts": us(g["t"]),
                       "dur": g.get("duration_ms", 0) * 1000.0, "args": {"cause": g.get("cause"), "action": g.get("action"),
                                                                          "heap_before": g.get("heap_before"), "heap_after": g.get("heap_after")}})
    previous = None
    for e in t.iter_events:
        if previous is not None:
            events.append({"ph": "X", "pid": pid, "tid": "training", "name": f"iteration {e['n']}", "ts": us(previous),
                           "dur": (e["t"] - previous) * 1000.0, "args": {"epoch": e.get("epoch"), "score": e.get("score")}})
        previous = e["t"]
    for e in t.epoch_events:
        events.append({"ph": "i", "pid": pid, "tid": "training", "name": f"epoch {e['epoch']} end", "ts": us(e["t"]), "s": "p"})
    for e in t.errors:
        events.append({"ph": "i", "pid": pid, "tid": "training", "name": f"{e.get('class')}: {e.get('message')}", "ts": us(e["t"]), "s": "g"})
    return events
