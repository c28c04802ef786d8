"""Where a job's training time went, from its timeline: the agent's split of each iteration on the
training thread (data wait in the iterator's next(), the job's own loop outside fit(), forward,
backward, updater), the GC pauses in the same window (the JVM's own and those asked for with
System.gc(), by the job or by ND4J), and thread use against the cores."""

from __future__ import annotations

from typing import Any

from pyd4j.profile.timeline import Timeline

PARTS = ("data", "outside", "forward", "backward", "updater")


def time_split(t: Timeline) -> dict[str, Any] | None:
    """The split as shares of the time the agent accounted for, plus GC and threads; None when the
    job ran no DL4J training iteration the agent saw."""
    if not t.split_events:
        return None
    last = t.split_events[-1]
    ms = {p: float(last.get(f"{p}_ms", 0.0)) for p in PARTS}
    total = sum(ms.values())
    if total <= 0:
        return None
    # the window the split accounts for: the training thread's time up to the last split line
    end = last["t"]
    start = end - total
    gc = [e for e in t.gc_events if start <= e.get("t", 0) <= end]
    pause = sum(float(e.get("duration_ms", 0)) for e in gc)
    explicit = sum(float(e.get("duration_ms", 0)) for e in gc if e.get("cause") == "System.gc()")
    window = max(end - start, 1.0)
    nd4j = t.nd4j_settings() or {}
    threads = [s.get("threads") for s in t.samples if isinstance(s.get("threads"), (int, float))]
    spread = {q: round(float(last[f"data_{q}_ms"]), 3) for q in ("p50", "p90", "p99") if f"data_{q}_ms" in last}
    return {
        "iterations": int(last.get("iterations", 0)),
        "ms": {p: round(v, 1) for p, v in ms.items()},
        "share": {p: round(v / total, 4) for p, v in ms.items()},
        "ms_per_iteration": {p: round(v / max(1, int(last.get("iterations", 0))), 3) for p, v in ms.items()},
        # the data wait of one iteration over the agent's recent iterations (p50, p90, p99; absent from
        # older agents): an uneven loader's mean hides the batches that stall training
        "data_ms_quantiles": spread,
        "gc": {"window_ms": round(window, 1), "pause_ms": round(pause, 1), "share": round(pause / window, 4),
               "system_gc_ms": round(explicit, 1), "system_gc_share": round(explicit / window, 4), "collections": len(gc)},
        "threads": {"nd4j": nd4j.get("max_threads"), "cores": nd4j.get("cores"),
                    "jvm_max": int(max(threads)) if threads else None},
    }


def describe(split: dict[str, Any]) -> str:
    """One line for humans."""
    share = split["share"]
    parts = ", ".join(f"{p} {share[p]:.0%}" for p in PARTS if share[p] >= 0.005)
    gc = split["gc"]
    th = split["threads"]
    q = split.get("data_ms_quantiles") or {}
    wait = (f"; data wait per iteration p50 {q['p50']:.1f} ms, p90 {q['p90']:.1f} ms, p99 {q['p99']:.1f} ms"
            if {"p50", "p90", "p99"} <= set(q) else "")
    return (f"training time: {parts}{wait}; GC pauses {gc['share']:.0%} of the window (System.gc() {gc['system_gc_share']:.0%}); "
            f"ND4J threads {th['nd4j']} on {th['cores']} cores, JVM threads up to {th['jvm_max']}")
