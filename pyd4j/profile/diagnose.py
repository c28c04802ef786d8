"""What went wrong in a profiled run, with the evidence and the fix.

- OOM kinds told apart: Java heap, JavaCPP maxbytes, JavaCPP maxphysicalbytes, NIO direct
  buffers, metaspace, and a kill from outside (exit 137 / SIGKILL: the container's or the
  kernel's OOM killer), using the error the agent caught, the job's stderr and its exit code.
- Leaks: off-heap (RSS outside the heap, JavaCPP totalBytes) or live heap (heap after GC)
  growing across iterations: a least-squares slope with its R², over the run after warm-up,
  never a single sample.
- GC pressure: share of wall time spent in GC, overall and in the worst window.
- Workspace spills: an ND4J workspace that keeps spilling needs a larger initial size.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import numpy as np

from pyd4j.jvm.errors import (
    DirectBufferOutOfMemoryError,
    JavaCppOutOfMemoryError,
    JavaOutOfMemoryError,
    MetaspaceOutOfMemoryError,
    python_class_for,
)
from pyd4j.output import human_bytes
from pyd4j.profile.startup import startup_error_in
from pyd4j.profile.timeline import Timeline
from pyd4j.units import jvm_size

MIB = 1 << 20
# Leak thresholds: growth over the analysed window must be both large and steady.
LEAK_MIN_GROWTH = 16 * MIB
LEAK_MIN_R2 = 0.8
LEAK_MIN_POINTS = 8
WARMUP_FRACTION = 0.25
GC_SHARE_WARN = 0.10
GC_WINDOW_S = 5.0
GC_WINDOW_WARN = 0.30
SPILL_MIN_SAMPLES = 3
SPILL_MIN_SHARE = 0.2

_OOM_LINE = re.compile(r"(?:java\.lang\.)?OutOfMemoryError:?\s*(.*)")


@dataclass
class Finding:
    """One diagnosis: what, how sure, the numbers behind it, and the fix (flags when there are)."""

    kind: str            # oom-heap, oom-javacpp-maxbytes, oom-javacpp-maxphysicalbytes, oom-direct,
    #                      oom-metaspace, killed, leak-offheap, leak-heap, gc-pressure, workspace-spill,
    #                      crash, near-limit
    severity: str        # error | warning | info
    title: str
    evidence: list[str]
    fix: str
    flags: list[str] = field(default_factory=list)
    numbers: dict[str, float | int | None] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def diagnose(timeline: Timeline) -> list[Finding]:
    """All findings for a run, most serious first."""
    findings = [*_oom(timeline), *_leaks(timeline), *_gc_pressure(timeline), *_spills(timeline), *_near_limits(timeline)]
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: order.get(f.severity, 3))


# -- out of memory ---------------------------------------------------------------------------

def _error_texts(timeline: Timeline) -> list[str]:
    """OutOfMemoryError messages (with their causes) from the agent and from the job's stderr."""
    texts = []
    for e in timeline.errors:
        if "OutOfMemoryError" in (e.get("class") or "") or "OutOfMemoryError" in (e.get("cause") or ""):
            texts.append(f"{e.get('message') or ''} {e.get('cause') or ''}".strip())
    stderr = timeline.run_dir / "stderr.log"
    if stderr.exists():
        lines = stderr.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if "OutOfMemoryError" in line and not line.lstrip().startswith("at "):
                match = _OOM_LINE.search(line)
                text = match.group(1) if match else line
                causes = [lines[j] for j in range(i + 1, min(i + 60, len(lines))) if lines[j].startswith("Caused by:")]
                texts.append(" ".join([text, *causes]))
    return texts


def _stderr_tail(timeline: Timeline, lines: int = 3) -> list[str]:
    """The job's last few stderr lines (stack frames left out): why a job that never reached ND4J died."""
    stderr = timeline.run_dir / "stderr.log"
    if not stderr.exists():
        return []
    text = [ln.strip() for ln in stderr.read_text(errors="replace").splitlines()]
    return [ln for ln in text if ln and not ln.startswith("at ")][-lines:]


def _last(timeline: Timeline, name: str) -> float | None:
    values = timeline.series(name) if timeline.samples else np.array([])
    values = values[~np.isnan(values)]
    return float(values[-1]) if values.size else None


def _grow(peak: float | None, factor: float = 1.5, floor: int = 64 * MIB) -> int:
    """A limit with headroom over a measured peak, rounded up to whole MiB."""
    value = max(int((peak or 0) * factor), floor)
    return -(-value // MIB) * MIB


def _oom(t: Timeline) -> list[Finding]:
    texts = _error_texts(t)
    limits = t.limits()
    peaks = t.peaks()
    out: list[Finding] = []
    seen: set[str] = set()
    for text in texts:
        cls = python_class_for(["java.lang.OutOfMemoryError"], text)
        if cls is JavaCppOutOfMemoryError:
            prop = JavaCppOutOfMemoryError(text).limit_property
            physical = prop.endswith("maxphysicalbytes")
            kind = "oom-javacpp-maxphysicalbytes" if physical else "oom-javacpp-maxbytes"
            if kind in seen:
                continue
            seen.add(kind)
            limit = limits["javacpp_max_physical" if physical else "javacpp_max"]
            used = peaks["javacpp_physical" if physical else "javacpp_total"]
            new = _grow(max(used or 0, limit or 0), 2.0)
            out.append(Finding(
                kind, "error",
                f"JavaCPP refused an off-heap allocation: {'maxPhysicalBytes' if physical else 'maxBytes'} reached",
                [f"error: {text[:300]}",
                 f"JavaCPP {'physicalBytes (process RSS)' if physical else 'totalBytes'} peaked at {human_bytes(used)} "
                 f"against the limit {human_bytes(limit)}"],
                f"raise -D{prop} (it bounds {'the whole process RSS JavaCPP sees' if physical else 'memory JavaCPP Pointers allocate'}; "
                f"-Xmx and -XX:MaxDirectMemorySize do not); if it keeps growing per iteration, look at the leak finding first",
                [f"-D{prop}={new}"], {"limit": limit, "peak": used},
            ))
        elif cls is DirectBufferOutOfMemoryError:
            if "oom-direct" in seen:
                continue
            seen.add("oom-direct")
            new = _grow(max(peaks["direct_used"] or 0, limits["max_direct"] or 0), 2.0)
            out.append(Finding(
                "oom-direct", "error", "NIO direct buffer memory exhausted",
                [f"error: {text[:300]}", f"direct buffers peaked at {human_bytes(peaks['direct_used'])} of {human_bytes(limits['max_direct'])}"],
                "raise -XX:MaxDirectMemorySize (NIO direct buffers only; ND4J arrays are bounded by JavaCPP's limits)",
                [f"-XX:MaxDirectMemorySize={jvm_size(new)}"], {"limit": limits["max_direct"], "peak": peaks["direct_used"]},
            ))
        elif cls is MetaspaceOutOfMemoryError:
            if "oom-metaspace" in seen:
                continue
            seen.add("oom-metaspace")
            out.append(Finding("oom-metaspace", "error", "Metaspace exhausted", [f"error: {text[:300]}"],
                               MetaspaceOutOfMemoryError.fix, ["-XX:MaxMetaspaceSize=512m"]))
        elif cls is JavaOutOfMemoryError:
            if "oom-heap" in seen:
                continue
            seen.add("oom-heap")
            live = peaks["heap_live"] or peaks["heap_used"]
            new = _grow(max(live or 0, limits["heap_max"] or 0), 2.0)
            out.append(Finding(
                "oom-heap", "error", "Java heap exhausted",
                [f"error: {text[:300]}",
                 f"heap used peaked at {human_bytes(peaks['heap_used'])} of -Xmx {human_bytes(limits['heap_max'])}; "
                 f"live heap after GC reached {human_bytes(peaks['heap_live'])}"],
                "raise -Xmx (ND4J array data is off-heap and does not need heap; the heap holds Java objects, "
                "INDArray wrappers and DataSets); if the live heap grows per iteration, look at the leak finding first",
                [f"-Xmx{jvm_size(new)}"], {"limit": limits["heap_max"], "peak": peaks["heap_used"]},
            ))
    code = t.exit_code
    if not out and code is not None and (code in (137, -9)) and not t.meta.get("interrupted"):
        rss = peaks["rss"]
        cgroup = limits["cgroup"]
        evidence = [f"exit code {code}: the process got SIGKILL, with no Java error; "
                    f"the kernel or container OOM killer does this when the process exceeds its memory limit",
                    f"RSS peaked at {human_bytes(rss)} (last sample {human_bytes(_last(t, 'rss'))})"]
        if cgroup:
            evidence.append(f"container memory limit {human_bytes(cgroup)}")
        budget = f"under {human_bytes(cgroup)}" if cgroup else "under the container's memory limit"
        out.append(Finding(
            "killed", "error", "Killed from outside (exit 137, SIGKILL): container or kernel OOM killer",
            evidence,
            f"set -Xmx plus -Dorg.bytedeco.javacpp.maxphysicalbytes so that heap + off-heap stay {budget}, "
            f"so the JVM fails with a Java error (or lives) instead of being killed; or raise the container limit",
            [], {"rss_peak": rss, "cgroup_limit": cgroup},
        ))
    elif not out and code not in (None, 0) and not t.meta.get("interrupted"):
        launcher = startup_error_in(t.run_dir)
        if launcher is not None:  # the JVM refused to start the job: a wrong class, jar or option
            out.append(Finding("crash", "error", f"The job did not start: {launcher.what} (exit code {code})",
                               [launcher.line], launcher.fix))
            return out
        msgs = [f"{e.get('class')}: {e.get('message')}" for e in t.errors] or _stderr_tail(t)
        out.append(Finding("crash", "error", f"The job exited with code {code}", msgs or ["see stderr.log in the run directory"],
                           "read the job's stderr.log; no memory limit was reported as the cause"))
    return out


# -- leaks -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Trend:
    slope: float          # bytes per x unit
    r2: float
    growth: float         # fitted growth over the window, bytes
    n: int
    x_unit: str           # "iteration" or "s"


def fit_trend(x: np.ndarray, y: np.ndarray, x_unit: str) -> Trend | None:
    """Least-squares line through (x, y) after dropping the warm-up; None with too few points."""
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    if x.size < LEAK_MIN_POINTS or np.ptp(x) == 0:
        return None
    cut = x.min() + WARMUP_FRACTION * np.ptp(x)
    keep = x >= cut
    x, y = x[keep], y[keep]
    if x.size < LEAK_MIN_POINTS or np.ptp(x) == 0:
        return None
    slope, intercept = np.polyfit(x, y, 1)
    fitted = slope * x + intercept
    ss_res = float(np.sum((y - fitted) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
    return Trend(float(slope), r2, float(slope * np.ptp(x)), int(x.size), x_unit)


def _x_axis(t: Timeline) -> tuple[np.ndarray, str]:
    iters = t.series("iterations")
    if np.nanmax(iters, initial=0) >= LEAK_MIN_POINTS:
        x = iters.copy()
        x[x < 1] = np.nan
        return x, "iteration"
    return t.times(), "s"


def _leaks(t: Timeline) -> list[Finding]:
    if len(t.samples) < LEAK_MIN_POINTS:
        return []
    x, unit = _x_axis(t)
    out = []
    candidates = []
    javacpp_total = t.series("javacpp_total")
    if np.nanmax(javacpp_total, initial=0) > LEAK_MIN_GROWTH:
        candidates.append(("JavaCPP totalBytes", javacpp_total, "leak-offheap"))
    candidates.append(("off-heap native memory (RSS outside heap, metaspace, code cache)", t.native(), "leak-offheap"))
    seen = set()
    for label, y, kind in candidates:
        trend = fit_trend(x, y, unit)
        if trend and kind not in seen and _is_leak(trend):
            seen.add(kind)
            out.append(_leak_finding(t, kind, label, trend))
    heap_trend = _heap_trend(t, x, unit)
    if heap_trend and _is_leak(heap_trend):
        out.append(_leak_finding(t, "leak-heap", "live heap (heap after GC)", heap_trend))
    return out


def _heap_trend(t: Timeline, x: np.ndarray, unit: str) -> Trend | None:
    """Live heap: heap after each GC, placed at that GC's iteration (or time)."""
    if len(t.gc_events) < LEAK_MIN_POINTS:
        return None
    sample_t = np.array([s["t"] for s in t.samples], dtype=float)
    gx, gy = [], []
    for g in t.gc_events:
        if g.get("heap_after") is None:
            continue
        i = int(np.clip(np.searchsorted(sample_t, g["t"]), 0, len(sample_t) - 1))
        gx.append(x[i])
        gy.append(g["heap_after"])
    return fit_trend(np.array(gx, dtype=float), np.array(gy, dtype=float), unit)


def _is_leak(trend: Trend) -> bool:
    return trend.slope > 0 and trend.r2 >= LEAK_MIN_R2 and trend.growth >= LEAK_MIN_GROWTH


def _leak_finding(t: Timeline, kind: str, label: str, trend: Trend) -> Finding:
    limits = t.limits()
    per = f"{human_bytes(trend.slope)}/{trend.x_unit}"
    evidence = [f"{label} grows {per} (least squares over {trend.n} samples after warm-up, R² = {trend.r2:.3f}); "
                f"+{human_bytes(trend.growth)} over the window"]
    limit_name, limit = ("javacpp maxphysicalbytes", limits["javacpp_max_physical"]) if kind == "leak-offheap" else ("-Xmx", limits["heap_max"])
    current = _last(t, "rss" if kind == "leak-offheap" else "heap_used")
    if limit and current and trend.slope > 0:
        left = (limit - current) / trend.slope
        evidence.append(f"at this rate {limit_name} ({human_bytes(limit)}) is reached in about {left:,.0f} more {trend.x_unit}s")
    fix = ("something keeps a reference to ND4J arrays (or JavaCPP Pointers) every iteration: a growing list, a cache, "
           "arrays detached from a workspace (detach()/leverage), or outputs kept from fit/output. Close or drop them, "
           "or run the loop in a workspace; raising limits only delays the OOM"
           if kind == "leak-offheap" else
           "Java objects accumulate every iteration (a growing collection, listeners, DataSets kept). "
           "Drop the references; raising -Xmx only delays the OOM")
    return Finding(kind, "error", f"Memory leak: {label} grows every {trend.x_unit}", evidence, fix, [],
                   {"slope_bytes_per_unit": trend.slope, "r2": trend.r2, "growth_bytes": trend.growth, "points": trend.n})


# -- GC pressure -----------------------------------------------------------------------------

def gc_share(t: Timeline) -> tuple[float, float]:
    """(overall GC time share, worst share over a GC_WINDOW_S window)."""
    if len(t.samples) < 2:
        return 0.0, 0.0
    times = t.times()
    _, millis = t.gc_totals()
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


def _gc_pressure(t: Timeline) -> list[Finding]:
    overall, worst = gc_share(t)
    if overall < GC_SHARE_WARN and worst < GC_WINDOW_WARN:
        return []
    peaks, limits = t.peaks(), t.limits()
    live = peaks["heap_live"] or peaks["heap_used"]
    new = _grow(max(live or 0, 1) * 3, 1.0)
    return [Finding(
        "gc-pressure", "warning", f"GC pressure: {overall:.0%} of the run spent in GC",
        [f"GC time share {overall:.1%} overall, {worst:.1%} in the worst {GC_WINDOW_S:.0f} s window",
         f"live heap after GC up to {human_bytes(live)} of -Xmx {human_bytes(limits['heap_max'])}"],
        "give the heap room: about 3x the live heap; reuse DataSets/INDArrays instead of creating them per iteration",
        [f"-Xmx{jvm_size(max(new, limits['heap_max'] or 0))}"] if (limits["heap_max"] or 0) < new else [],
        {"gc_share": overall, "gc_share_worst_window": worst},
    )]


# -- workspaces ------------------------------------------------------------------------------

def _spills(t: Timeline) -> list[Finding]:
    out = []
    for key, cols in t.workspace_series().items():
        spilled = np.nan_to_num(cols["spilled"]) + np.nan_to_num(cols["pinned"])
        present = ~np.isnan(cols["size"])
        n_present = int(present.sum())
        n_spill = int((spilled[present] > 0).sum())
        if n_present == 0 or n_spill < SPILL_MIN_SAMPLES or n_spill / n_present < SPILL_MIN_SHARE:
            continue
        need = np.nanmax(cols["max_cycle"] + np.nan_to_num(cols["spilled"]), initial=0)
        size = np.nanmax(cols["size"], initial=0)
        suggested = _grow(max(need, size) * 1.3, 1.0, floor=MIB)
        name = key.split("@")[0]
        out.append(Finding(
            "workspace-spill", "warning", f"Workspace {name} keeps spilling",
            [f"{key}: spilled or pinned memory in {n_spill} of {n_present} samples "
             f"(up to {human_bytes(float(np.nanmax(spilled)))}); size {human_bytes(size)}, largest cycle {human_bytes(need)}"],
            f"give {name} a larger initial size: WorkspaceConfiguration.builder().initialSize({suggested}L)"
            f".policyLearning(LearningPolicy.NONE) (spilled allocations are plain off-heap allocations made every cycle)",
            [], {"spill_samples": n_spill, "samples": n_present, "suggested_initial_size": suggested},
        ))
    return out


def _near_limits(t: Timeline) -> list[Finding]:
    if t.exit_code not in (0, None):
        return []
    peaks, limits = t.peaks(), t.limits()
    out = []
    for label, peak, limit, flag in (
        ("heap", peaks["heap_used"], limits["heap_max"], "-Xmx"),
        ("JavaCPP physicalBytes", peaks["javacpp_physical"], limits["javacpp_max_physical"], "-Dorg.bytedeco.javacpp.maxphysicalbytes"),
        ("JavaCPP totalBytes", peaks["javacpp_total"], limits["javacpp_max"], "-Dorg.bytedeco.javacpp.maxbytes"),
    ):
        if peak and limit and peak > 0.9 * limit:
            out.append(Finding("near-limit", "warning", f"{label} came within 10% of its limit",
                               [f"{label} peaked at {human_bytes(peak)} of {human_bytes(limit)}"],
                               f"raise {flag} before a larger batch or dataset tips it over", [],
                               {"peak": peak, "limit": limit}))
    return out
