"""Leak findings: a leak verdict (`pyd4j.profile.leak_verdicts`) turned into what the user reads: the
rate, the limit it runs into and when, the call site (or workspaces, or classes) holding the memory,
and the fix; or, with too few live points, that a verdict needs more."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pyd4j.output import human_bytes
from pyd4j.profile.finding import Finding
from pyd4j.profile.leak_verdicts import (
    LEAK_MIN_POINTS,
    LEAK_MIN_SECONDS,
    LeakVerdict,
    Trend,
    fit_trend,
    leak_verdicts,
    live_axis,
    plural,
)
from pyd4j.profile.timeline import Timeline


def leak_findings(t: Timeline) -> list[Finding]:
    """A finding per leak verdict that says leak; with none, what the undecided verdicts still need."""
    verdicts = leak_verdicts(t)
    out = [_leak_finding(t, v) for v in verdicts if v.status == "leak"]
    unknown = [v for v in verdicts if v.status == "not-enough-data"]
    if unknown and not out:
        out.append(Finding(
            "not-enough-data", "info", "Not enough data to judge memory leaks",
            [f"{v.label}: {v.reason}" for v in unknown],
            "leaks are judged on memory left after full collections, over iterations; the agent measures it "
            "as often as a verdict needs (about 6 points in the first minute of training; in a JVM that does not "
            f"train, such as a Spark driver, points over {LEAK_MIN_SECONDS} s after its first, so it must live about half "
            "a minute): let the job train longer, and check that the agent's live points were not switched off "
            "(-Dpyd4j.agent=live=0); "
            "no leak is reported without that evidence",
            [], {"live_points": len(t.live_points), "iterations": t.iterations()},
        ))
    return out


def _iteration_rate(t: Timeline) -> float | None:
    """Iterations per second over the last third of the run (the rate a leak keeps going at)."""
    marks = [(s["t"], s["iterations"]) for s in t.samples if s.get("iterations")]
    if len(marks) < 2:
        return None
    cut = marks[0][0] + (marks[-1][0] - marks[0][0]) * 2 / 3
    recent = [m for m in marks if m[0] >= cut] or marks
    (t0, n0), (t1, n1) = (recent[0], recent[-1]) if len(recent) >= 2 else (marks[0], marks[-1])
    return (n1 - n0) / ((t1 - t0) / 1000.0) if t1 > t0 and n1 > n0 else None


@dataclass(frozen=True)
class _Limit:
    name: str
    limit: float | None
    level: float | None      # where the leaking quantity stands against the limit now
    slope: float             # how fast that quantity moves toward it, per x unit
    what: str


def _limit_for(t: Timeline, verdict: LeakVerdict, kind: str) -> _Limit:
    """The limit a leak runs into, the quantity that limit compares, its level and slope."""
    limits = t.limits()
    points, x, unit = live_axis(t, "offheap")

    def trend_of(name: str) -> Trend | None:
        y = np.array([float(p[name]) if p.get(name) is not None else np.nan for p in points], dtype=float)
        return fit_trend(x, y, unit)

    if kind == "leak-heap":
        # -Xmx bounds what the collector counts (whole regions for large arrays), not the objects' bytes
        used = trend_of("heap_after_gc")
        if used is not None and used.n >= LEAK_MIN_POINTS - 1 and used.slope > 0:
            return _Limit("-Xmx", limits["heap_max"], used.last_y, used.slope, "heap in use after full collections")
        return _Limit("-Xmx", limits["heap_max"], verdict.trend.last_y, verdict.trend.slope, "live heap")
    nd4j, javacpp = trend_of("nd4j_live"), trend_of("javacpp_total")
    if javacpp is not None and javacpp.slope > (nd4j.slope if nd4j else 0):
        return _Limit("JavaCPP maxbytes", limits["javacpp_max"], javacpp.last_y, javacpp.slope,
                      "JavaCPP totalBytes after full collections")
    candidates = [("maxphysicalbytes (JavaCPP checks RSS against it at its next Pointer allocation)",
                   limits["javacpp_max_physical"]), ("the container memory limit", limits["cgroup"])]
    name, limit = min(((n, v) for n, v in candidates if v), key=lambda c: c[1], default=("", None))
    rss = trend_of("rss")
    return _Limit(name, limit, rss.last_y if rss else None, verdict.trend.slope, "process RSS")


def leak_sites(t: Timeline, kind: str) -> list[dict]:
    """Sites holding the kept memory at the last live point (or at the end), largest first. A snapshot in
    which nothing is held is passed over: the end snapshot is taken while the JVM shuts down, and the job's
    arrays may already be freed by then (a leak kept in the job's own list was, at random)."""
    snapshots = [s for s in t.site_snapshots if s.get("reason") in ("live", "end")
                 and any(x.get("live_bytes", 0) > 0 for x in s.get("sites", ()))]
    if not snapshots:
        return []
    last = max(snapshots, key=lambda s: s["t"])
    sites = [s for s in last.get("sites", ()) if s.get("live_bytes", 0) > 0]
    return sorted(sites, key=lambda s: -s["live_bytes"])


def _leak_finding(t: Timeline, verdict: LeakVerdict) -> Finding:
    trend = verdict.trend
    kind = "leak-heap" if verdict.label == "live heap" else "leak-offheap"
    per = f"{human_bytes(trend.slope)}/{trend.x_unit}"
    evidence = [f"{verdict.label} grows {per} over {trend.n} points after full collections "
                f"(+{human_bytes(trend.growth)} over {trend.span:.0f} {plural(trend.x_unit)}; "
                f"Kendall tau p = {trend.p_value:.2g}, confidence {trend.confidence:.1%})"]
    numbers: dict[str, float | int | None] = {
        "slope_bytes_per_unit": trend.slope, "confidence": trend.confidence, "p_value": trend.p_value,
        "growth_bytes": trend.growth, "points": trend.n}
    lim = _limit_for(t, verdict, kind)
    limit_name, limit, level, level_what = lim.name, lim.limit, lim.level, lim.what
    if limit and level is not None and lim.slope > 0:
        left = max(0.0, (limit - level) / lim.slope)
        numbers.update(limit_bytes=limit, units_to_limit=left)
        when = f"about {left:,.0f} more {plural(trend.x_unit)}"
        if trend.x_unit == "iteration":
            numbers["limit_at_iteration"] = trend.last_x + left
            rate = _iteration_rate(t)
            if rate:
                numbers["seconds_to_limit"] = left / rate
                when += f" (~{left / rate:,.0f} s at {rate:.2f} iterations/s), around iteration {trend.last_x + left:,.0f}"
        else:
            numbers["seconds_to_limit"] = left
        evidence.append(f"{level_what} is {human_bytes(level)} of {limit_name} {human_bytes(limit)}: "
                        f"at this rate it is reached in {when}")
    workspaces = _growing_workspaces(t, verdict) if kind == "leak-offheap" else None
    sites = leak_sites(t, kind) if kind == "leak-offheap" and workspaces is None else []
    if workspaces is not None:
        count, held, first_count, site = workspaces
        evidence.append(f"ND4J workspaces hold {human_bytes(held)} in {count} workspaces (from {first_count} at the "
                        f"first point): workspaces opened and never destroyed"
                        + (f", created at {site}" if site else ""))
        if site:
            sites = [{"site": site, "user": True, "live_bytes": held}]
    user_sites = [s for s in sites if s.get("user")] or sites
    if user_sites:
        top = user_sites[0]
        numbers["site"] = top["site"]
    if user_sites and workspaces is None:
        evidence.append(f"allocated at {top['site']}" + (f" (via {top['via']})" if top.get("via") else "")
                        + f": {human_bytes(top['live_bytes'])} still held, estimated from sampled allocations")
        for s in user_sites[1:3]:
            evidence.append(f"also held: {human_bytes(s['live_bytes'])} from {s['site']}")
    if kind == "leak-heap":
        classes = _growing_classes(t)
        if classes:
            evidence.append("growing classes: " + ", ".join(f"{c} +{human_bytes(b)}" for c, b in classes))
    fix = ("the job keeps references to ND4J arrays (or JavaCPP Pointers) every iteration: a growing list, a cache, "
           "arrays detached from a workspace (detach()/leverage), or outputs kept from fit/output. Close or drop them "
           "at the line named above, or run the loop in a workspace; raising limits only delays the OOM"
           if kind == "leak-offheap" else
           "Java objects accumulate every iteration (a growing collection, listeners, DataSets kept). "
           "Drop the references; raising -Xmx only delays the OOM")
    if workspaces is not None:
        fix = ("the job opens ND4J workspaces and never destroys them (a new workspace id per batch, or "
               "createNewWorkspace without destroyWorkspace): reuse one id per loop, or call "
               "Nd4j.getWorkspaceManager().destroyWorkspace(ws) when done; raising limits only delays the OOM")
    where = f" at {user_sites[0]['site']}" if user_sites else ""
    return Finding(kind, "error", f"Memory leak: {verdict.label} grows every {trend.x_unit}{where}", evidence, fix, [],
                   numbers)


def _growing_workspaces(t: Timeline, verdict: LeakVerdict) -> tuple[int, int, int, str | None] | None:
    """When most of an off-heap leak is ND4J workspaces (their memory is neither a libnd4j buffer nor a
    JavaCPP Pointer, so no allocation site holds it): (workspaces now, bytes they hold, workspaces at the
    first point, the user's line that created most of them); else None."""
    points = [p for p in sorted(t.live_points, key=lambda p: p["t"]) if p.get("ws_bytes") is not None]
    if len(points) < 2 or verdict.trend is None:
        return None
    grown = points[-1]["ws_bytes"] - points[0]["ws_bytes"]
    if grown < 0.5 * verdict.trend.growth:
        return None
    last = next((s for s in reversed(t.samples) if s.get("ws")), None)
    first = next((s for s in t.samples if s["t"] >= points[0]["t"] and s.get("ws")), None)
    if last is None:
        return None
    by_site: dict[str, int] = {}
    for w in last["ws"]:
        if w.get("site"):
            by_site[w["site"]] = by_site.get(w["site"], 0) + int(w.get("size") or 0)
    site = max(by_site, key=by_site.get) if by_site else None
    def count(sample: dict | None) -> int:
        return int(sample.get("ws_count") or len(sample["ws"])) if sample else 0

    held = int(last.get("ws_bytes") or sum(w.get("size") or 0 for w in last["ws"]))
    return count(last), held, count(first), site


def _growing_classes(t: Timeline, top: int = 3) -> list[tuple[str, int]]:
    """Classes whose live bytes grew most between the first and last heap inspection."""
    inspected = [p for p in sorted(t.live_points, key=lambda p: p["t"]) if p.get("classes")]
    if len(inspected) < 2:
        return []
    first = {c["name"]: c["bytes"] for c in inspected[0]["classes"]}
    last = {c["name"]: c["bytes"] for c in inspected[-1]["classes"]}
    grown = sorted(((name, b - first.get(name, 0)) for name, b in last.items()), key=lambda g: -g[1])
    return [(name, int(g)) for name, g in grown[:top] if g > 0]
