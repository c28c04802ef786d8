"""A run as a self-contained HTML page (plots embedded as PNG data, also written next to it),
plus a Chrome-trace / Perfetto JSON. Pure functions of a run's timelines (one lane per JVM), its
findings and, for `pyd4j tune`'s runs, the tune document (`tune.json` next to the runs).

Plots say what they show: sizes in the unit that fits them (KiB for small workspaces), limits
drawn where they fall and named where they are off the axis, legends outside the data, "heap
after GC" marked as not being the live heap unless it was measured after full collections.

Everything the job supplied (its name, arguments, error messages) is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import json
import shlex
import textwrap
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pyd4j.output import human_bytes
from pyd4j.profile.diagnose import Finding, diagnose, gc_share, leak_verdicts
from pyd4j.profile.jvms import role_text, short_name
from pyd4j.schemas import PROFILE_SCHEMA
from pyd4j.profile.signals import stopped_as_asked
from pyd4j.profile.startup import startup_error_in
from pyd4j.profile.timeline import Timeline
from pyd4j.profile.timesplit import describe as describe_split, time_split
from pyd4j.profile.tune_doc import find_tune_doc

# A limit further above the data than this factor is named, not drawn: drawing it would squash the data.
LIMIT_IN_VIEW = 3.0
TITLE_WIDTH = 120   # characters per line of a plot's title note
_UNITS = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B"))
_COLORS = {"heap": "#4C72B0", "meta": "#8172B2", "native": "#DD8452", "rss": "black", "heap_used": "#1f3b73",
           "javacpp": "#C44E52", "iters": "#2a9d8f", "before": "#9a9a9a", "after": "#C44E52"}


def _plt():
    import matplotlib  # noqa: PLC0415  (heavy; only when a report is written)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def byte_unit(largest: float) -> tuple[float, str]:
    """The binary unit that shows `largest` bytes as a number between 1 and 1024."""
    for size, name in _UNITS:
        if largest >= size:
            return float(size), name
    return 1.0, "B"


def _finite_max(*arrays: np.ndarray | Sequence[float]) -> float:
    values = [np.asarray(a, dtype=float) for a in arrays if len(a)]
    values = [v[np.isfinite(v)] for v in values]
    return max((float(v.max()) for v in values if v.size), default=0.0)


def _figure(plt, height: float, rows: int = 1, sharex: bool = False, width: float = 10.0):
    fig, axes = plt.subplots(rows, 1, figsize=(width, height), layout="constrained", sharex=sharex, squeeze=False)
    return fig, [a[0] for a in axes]


def _save(plt, fig, path: Path) -> Path:
    # "tight": labels placed in the right margin (limits) and long titles stay inside the picture
    fig.savefig(path, dpi=110, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    return path


def draw_limits(ax, limits: list[tuple[str, float, str]], data_top: float, scale: float, unit: str) -> str:
    """Horizontal lines for the limits within LIMIT_IN_VIEW of the data, labelled in the right
    margin without overlapping (equal limits share one label); returns a note naming the limits
    above that, with their distance, for the title, so no limit is silently missing."""
    top_data = max(data_top, 1)
    shown = [(n, v, c) for n, v, c in limits if v and v <= top_data * LIMIT_IN_VIEW]
    off = [(n, v, c) for n, v, c in limits if v and v > top_data * LIMIT_IN_VIEW]
    top = max([top_data, *(v for _, v, _ in shown)]) * 1.12 / scale
    ax.set_ylim(0, top)
    groups: list[list] = []
    for name, value, color in sorted(shown, key=lambda x: x[1]):
        if groups and abs(value - groups[-1][1]) <= 0.01 * value:
            groups[-1][0] += f" = {name}"
        else:
            groups.append([name, value, color])
    fig = ax.get_figure()
    axes_px = max(ax.get_position().height * fig.get_figheight() * fig.dpi * 0.85, 1.0)  # layout shrinks it a little
    gap = top * (8 * fig.dpi / 72 * 1.35) / axes_px  # one 8-point label and a little, in data units
    placed: list[float] = []
    for name, value, color in groups:
        y = value / scale
        ax.axhline(y, color=color, ls="--", lw=1)
        label_y = max([y, *(p + gap for p in placed)])
        placed.append(label_y)
        ax.annotate(f"{name} {human_bytes(value)}", xy=(1.0, y), xycoords=("axes fraction", "data"),
                    xytext=(1.03, label_y), textcoords=("axes fraction", "data"), fontsize=8, color=color,
                    va="center", ha="left", annotation_clip=False,
                    arrowprops={"arrowstyle": "-", "color": color, "lw": 0.6, "shrinkA": 0, "shrinkB": 2}
                    if label_y != y else None)
    if not off:
        return ""
    note = "↑ off the axis: " + ", ".join(f"{n} {human_bytes(v)} ({v / top_data:.0f}× the data's top)" for n, v, _ in off)
    return "\n".join(textwrap.wrap(note, TITLE_WIDTH))


def _set_title(ax, title: str, note: str) -> None:
    ax.set_title(f"{title}\n{note}" if note else title, fontsize=10)


def _limits_of(t: Timeline) -> list[tuple[str, float, str]]:
    limits = t.limits()
    return [(label, limits.get(key), color) for key, label, color in (
        ("heap_max", "-Xmx", _COLORS["heap_used"]), ("javacpp_max", "JavaCPP maxbytes", _COLORS["javacpp"]),
        ("javacpp_max_physical", "JavaCPP maxphysicalbytes", "black"), ("cgroup", "container limit", "red"))
        if limits.get(key)]


def _title(t: Timeline, what: str) -> str:
    pid = t.start.get("pid")
    return f"{what} — {short_name(t.name, 48)}" + (f" (pid {pid})" if pid is not None else "")


def plot_memory(t: Timeline, path: Path) -> Path:
    """Stacked memory timeline (heap resident, metaspace/code, native) with the limits drawn."""
    plt = _plt()
    fig, (ax,) = _figure(plt, 4.8)
    x = t.times()
    heap = np.nan_to_num(t.heap_resident())
    nonheap = np.nan_to_num(t.series("nonheap_committed"))
    native = np.clip(np.nan_to_num(t.native()), 0, None)
    rss = t.series("rss")
    javacpp = t.series("javacpp_total")
    data_top = _finite_max(rss, heap + nonheap + native, t.series("heap_used"), javacpp)
    scale, unit = byte_unit(max(data_top, 1))
    if len(x):
        ax.stackplot(x, heap / scale, nonheap / scale, native / scale,
                     labels=["Java heap (resident)", "metaspace + code cache", "native (ND4J, JavaCPP, malloc)"],
                     colors=[_COLORS["heap"], _COLORS["meta"], _COLORS["native"]], alpha=0.75)
        ax.plot(x, t.series("heap_used") / scale, color=_COLORS["heap_used"], lw=1, label="heap used")
        ax.plot(x, rss / scale, color=_COLORS["rss"], lw=1.2, label="RSS")
        if np.nanmax(javacpp, initial=0) > 0:
            ax.plot(x, javacpp / scale, color=_COLORS["javacpp"], lw=1, ls="-.", label="JavaCPP totalBytes")
    else:
        ax.text(0.5, 0.5, "no samples", transform=ax.transAxes, ha="center")
    note = draw_limits(ax, _limits_of(t), data_top, scale, unit)
    ax.set_xlabel("seconds since JVM start")
    ax.set_ylabel(unit)
    _set_title(ax, _title(t, "Memory"), note)
    fig.legend(loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    return _save(plt, fig, path)


def _iteration_of(t: Timeline, when_ms: Sequence[float]) -> np.ndarray:
    """The training iteration reached at each time (from the samples' iteration counter)."""
    if not t.samples:
        return np.full(len(when_ms), np.nan)
    st = np.array([s["t"] for s in t.samples], dtype=float)
    it = np.nan_to_num(t.series("iterations"))
    return np.interp(np.asarray(when_ms, dtype=float), st, it)


def live_heap_points(t: Timeline) -> tuple[list[dict], str]:
    """Points (t, heap_after) of the live heap, and how it was measured: the agent's live points
    (heap after a full collection, once ND4J's deallocators were done) when it took any, else the
    heap after the job's own full (major) collections. After a young collection the heap still
    holds the old generation's garbage: never the live heap."""
    points = [p for p in t.live_points if p.get("heap_live") is not None]
    if points:
        # every point, as measured (the peak in the summary is the largest of these)
        return ([{"t": p["t"], "heap_after": p["heap_live"]} for p in sorted(points, key=lambda p: p["t"])],
                "live heap (objects after a full GC, as GC.class_histogram counts them)")
    full = [g for g in t.gc_events if g.get("heap_after") is not None and "major" in (g.get("action") or "")]
    if full:
        return full, "heap after full GC (live heap)"
    return [], ""


def plot_gc(t: Timeline, path: Path) -> Path:
    """GC pauses (one bar per collection) and the heap after each GC: after young GCs it is not
    the live heap (old-generation garbage stays until a full GC), after full GCs it is."""
    plt = _plt()
    from matplotlib.patches import Patch  # noqa: PLC0415

    fig, (ax,) = _figure(plt, 3.6)
    handles = []
    if t.gc_events:
        xs = np.array([(g["t"] - t.t0) / 1000.0 for g in t.gc_events])
        major = np.array(["major" in (g.get("action") or "") for g in t.gc_events])
        ax.bar(xs, [g.get("duration_ms", 0) for g in t.gc_events], width=max(t.duration_s() / 400, 0.01),
               color=np.where(major, "#C44E52", "#4C72B0"))
        handles.append(Patch(color="#4C72B0", label="young GC pause"))
        if major.any():
            handles.append(Patch(color="#C44E52", label="full / major GC pause"))
        twin = ax.twinx()
        after = np.array([g.get("heap_after") or np.nan for g in t.gc_events], dtype=float)
        scale, unit = byte_unit(max(_finite_max(after), 1))
        handles += twin.plot(xs[~major], after[~major] / scale, ".", ms=3, color="#999",
                             label="heap after young GC (holds old-gen garbage: not the live heap)")
        live, label = live_heap_points(t)
        if live:
            handles += twin.plot([(g["t"] - t.t0) / 1000.0 for g in live], [g["heap_after"] / scale for g in live],
                                 "D-", ms=4, lw=1, color="#2a9d8f", label=label)
        twin.set_ylim(0, _finite_max(after) / scale * 1.15 or 1)
        twin.set_ylabel(f"heap after GC ({unit})")
    else:
        ax.text(0.5, 0.5, "no garbage collection during the run", transform=ax.transAxes, ha="center")
    overall, worst = gc_share(t)
    ax.set_title(_title(t, f"GC pauses: {len(t.gc_events)}, {overall:.1%} of the run in GC, worst 5 s window {worst:.1%}"),
                 fontsize=10)
    ax.set_xlabel("seconds since JVM start")
    ax.set_ylabel("pause (ms)")
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8, frameon=False, markerscale=2)
    return _save(plt, fig, path)


def plot_iterations(t: Timeline, path: Path) -> Path | None:
    """Memory against training iterations: leaks are per iteration, so is this view. One point per
    sample (RSS, native, heap used) and per full GC (live heap)."""
    iters = t.series("iterations")
    if not t.samples or np.nanmax(iters, initial=0) < 2:
        return None
    plt = _plt()
    fig, (ax,) = _figure(plt, 4.0)
    ok = iters >= 1
    rss, native, heap_used = t.series("rss"), t.native(), t.series("heap_used")
    live, live_label = live_heap_points(t)
    live_x = _iteration_of(t, [g["t"] for g in live])
    live_y = np.array([g["heap_after"] for g in live], dtype=float)
    scale, unit = byte_unit(max(_finite_max(rss[ok], native[ok], heap_used[ok], live_y), 1))
    ax.plot(iters[ok], rss[ok] / scale, ".", ms=4, color=_COLORS["rss"], label="RSS")
    ax.plot(iters[ok], native[ok] / scale, ".", ms=4, color=_COLORS["native"], label="native (outside the JVM's areas)")
    ax.plot(iters[ok], heap_used[ok] / scale, ".", ms=3, color=_COLORS["heap"], alpha=0.6, label="heap used (with garbage)")
    javacpp = t.series("javacpp_total")
    if np.nanmax(javacpp, initial=0) > 0:
        ax.plot(iters[ok], javacpp[ok] / scale, ".", ms=3, color=_COLORS["javacpp"], label="JavaCPP totalBytes")
    if live:
        ax.plot(live_x, live_y / scale, "D-", ms=4, lw=1, color="#2a9d8f", label=live_label)
    held = np.array([(p.get("nd4j_live") or 0) + (p.get("javacpp_total") or 0) + (p.get("ws_bytes") or 0)
                     for p in sorted(t.live_points, key=lambda p: p["t"])], dtype=float)
    if held.size and np.nanmax(held) > 0:
        held_x = _iteration_of(t, [p["t"] for p in sorted(t.live_points, key=lambda p: p["t"])])
        ax.plot(held_x, held / scale, "s-", ms=4, lw=1, color=_COLORS["javacpp"],
                label="off-heap kept after full GCs (libnd4j + JavaCPP + workspaces)")
    # the plot says what the findings say: the leak verdicts, whatever they are
    for i, v in enumerate(leak_verdicts(t)):
        said = {"leak": "LEAK", "no-leak": "no leak", "not-enough-data": "not enough data"}[v.status]
        text = f"{v.label.split(' (')[0]}: {said}" + (f" ({v.reason})" if v.status != "leak" and v.reason else "")
        ax.text(0.01, 0.97 - 0.09 * i, "\n".join(textwrap.wrap(text, 110)), transform=ax.transAxes, fontsize=7.5,
                color="#C44E52" if v.status == "leak" else "#444444", va="top",
                bbox={"fc": "white", "ec": "none", "alpha": 0.8})
    ax.set_ylim(0, None)
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # iterations are whole numbers
    ax.set_xlabel("training iteration")
    ax.set_ylabel(unit)
    ax.set_title(_title(t, "Memory per iteration"))
    fig.legend(loc="outside lower center", ncols=3, fontsize=8, frameon=False, markerscale=2)
    return _save(plt, fig, path)


def plot_workspaces(t: Timeline, path: Path) -> Path | None:
    """Size (solid) and spilled bytes (dotted) per ND4J workspace, in the unit that fits them."""
    series = t.workspace_series()
    if not series:
        return None
    plt = _plt()
    fig, (ax,) = _figure(plt, 3.8)
    x = t.times()
    scale, unit = byte_unit(max(_finite_max(*(c["size"] for c in series.values()), *(c["spilled"] for c in series.values())), 1))
    for key, cols in sorted(series.items()):
        line, = ax.plot(x, cols["size"] / scale, lw=1.2, label=key)
        if np.nanmax(cols["spilled"], initial=0) > 0:
            ax.plot(x, cols["spilled"] / scale, lw=1, ls=":", color=line.get_color(), label=f"{key} spilled")
    ax.set_ylim(0, None)
    ax.set_xlabel("seconds since JVM start")
    ax.set_ylabel(unit)
    ax.set_title(_title(t, "ND4J workspaces (size; dotted: spilled)"))
    fig.legend(loc="outside right upper", fontsize=7, frameon=False)
    return _save(plt, fig, path)


def run_origin_ms(lanes: Sequence[Timeline]) -> float:
    """The common time origin of a run's lanes: the first JVM's start."""
    starts = [t.t0 for t in lanes if t.samples or t.start]
    return min(starts) if starts else 0.0


def plot_lanes(lanes: Sequence[Timeline], path: Path) -> Path | None:
    """One lane per JVM on a common time axis (seconds since the first JVM started): RSS, heap
    used and native memory, each lane with its own -Xmx."""
    if len(lanes) < 2:
        return None
    plt = _plt()
    fig, axes = _figure(plt, 1.0 + 1.7 * len(lanes), rows=len(lanes), sharex=True)
    origin = run_origin_ms(lanes)
    for ax, t in zip(axes, lanes):
        x = t.times(origin)
        rss, heap_used, native = t.series("rss"), t.series("heap_used"), np.clip(t.native(), 0, None)
        top = _finite_max(rss, heap_used, native)
        scale, unit = byte_unit(max(top, 1))
        ax.plot(x, rss / scale, color=_COLORS["rss"], lw=1.1, label="RSS")
        ax.plot(x, heap_used / scale, color=_COLORS["heap"], lw=1, label="heap used")
        ax.plot(x, native / scale, color=_COLORS["native"], lw=1, label="native")
        heap_max = t.limits().get("heap_max")
        note = draw_limits(ax, [("-Xmx", heap_max, _COLORS["heap_used"])] if heap_max else [], top, scale, unit)
        ax.set_ylabel(unit)
        jvm = t.jvm
        role = "job" if jvm is None else role_text(jvm.to_dict()).replace("(main)", "(the job's main JVM)")
        parent = f", started by pid {jvm.parent_jvm}" if jvm is not None and jvm.parent_jvm else ""
        name = f"{short_name(t.name)} · pid {t.start.get('pid')}"
        ax.set_title(f"{name} — {role}{parent}" + (f"   {note}" if note else ""), fontsize=9, loc="left")
    axes[-1].set_xlabel("seconds since the first JVM of the run started")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    return _save(plt, fig, path)


def _lane_png_key(t: Timeline) -> str:
    return f"memory_{t.start.get('pid')}_png"


def _lane_label(t: Timeline) -> str:
    return t.jvm.label if t.jvm is not None else short_name(t.name)


def plot_before_after(before: Timeline, after: Timeline, path: Path) -> Path:
    """The first run and the tuned run on the same axes: memory (RSS, heap used, -Xmx of each)
    and training progress over time."""
    plt = _plt()
    fig, (mem, prog) = _figure(plt, 6.4, rows=2, sharex=True)
    top = _finite_max(before.series("rss"), after.series("rss"), before.series("heap_used"), after.series("heap_used"))
    scale, unit = byte_unit(max(top, 1))
    limits = []
    for t, side, color, style in ((before, "before", _COLORS["before"], "--"), (after, "after (tuned)", _COLORS["after"], "-")):
        x = t.times()
        mem.plot(x, t.series("rss") / scale, color=color, ls=style, lw=1.3, label=f"RSS {side}")
        mem.plot(x, t.series("heap_used") / scale, color=color, ls=style, lw=0.8, alpha=0.7, label=f"heap used {side}")
        if t.limits().get("heap_max"):
            limits.append((f"-Xmx {side.split()[0]}", t.limits()["heap_max"], color))
        prog.plot(x, np.nan_to_num(t.series("iterations")), color=color, ls=style, lw=1.3)
    note = draw_limits(mem, limits, top, scale, unit)
    mem.set_ylabel(unit)
    _set_title(mem, "Before / after: memory", note)
    prog.set_ylabel("iterations done")
    prog.set_xlabel("seconds since JVM start")
    prog.set_title("Before / after: training progress (dashed grey: before, solid red: after)", fontsize=10)
    prog.set_ylim(0, None)
    fig.legend(loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    return _save(plt, fig, path)


# -- trace and summary ------------------------------------------------------------------------------

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
    events: list[dict] = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": _lane_label(t)}},
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


def _primary(lanes: Sequence[Timeline]) -> Timeline:
    return next((t for t in lanes if t.jvm is not None and t.jvm.primary), lanes[0])


def _write_error_message(e: dict) -> str:
    who = f"pid {e['pid']}" if e.get("pid") is not None else e.get("file", "?")
    lost = f"{e['lost_lines']} lines ({human_bytes(e['lost_bytes'])})" if e.get("lost_lines") is not None else "its later samples"
    tail = f"; the kept part ends {e['lost_s']:.1f} s before the run ended" if e.get("lost_s") else ""
    return f"the timeline of {who} could not be written ({e.get('error')}): {lost} were lost, the part before is kept{tail}"


def _split_html(split: dict | None) -> str:
    """Where the training time went (pyd4j.profile.timesplit), as a table."""
    if not split:
        return ""
    rows = [(p, f"{split['ms_per_iteration'][p]:.2f}", f"{split['share'][p]:.0%}") for p in split["share"]]
    return ("<h2>Where the training time went</h2>" + _table(["part", "ms per iteration", "share"], rows)
            + f"<p>{html.escape(describe_split(split))}</p>")


def summary(lanes: Timeline | Sequence[Timeline], findings: list[Finding] | None = None) -> dict:
    """The run in one JSON-able document (what `--json` prints): the job's (primary JVM's)
    figures, plus every JVM of the run under "jvms"."""
    lanes = [lanes] if isinstance(lanes, Timeline) else list(lanes)
    t = _primary(lanes)
    findings = diagnose(t) if findings is None else findings
    overall, worst = gc_share(t)
    stopped_by = t.meta.get("stopped_by") or ("interrupted" if t.meta.get("interrupted") else None)
    spark = _spark_executors(lanes, t)
    jvms = []
    for lane in lanes:
        row = lane.jvm.to_dict() if lane.jvm is not None else {"pid": lane.start.get("pid"), "main_class": lane.name}
        row.update(rss_peak=lane.peak("rss"), heap_used_peak=lane.peak("heap_used"), heap_max=lane.limits().get("heap_max"),
                   duration_s=round(lane.duration_s(), 3), ended_cleanly=lane.end is not None)
        if lane is not t and row.get("role") == "job":
            row["findings"] = [f.kind for f in diagnose(lane)]
        jvms.append(row)
    write_errors = [{**e, "message": _write_error_message(e)} for e in t.meta.get("write_errors") or []]
    doc = {
        "schema": PROFILE_SCHEMA, "run_dir": str(t.run_dir), "job": t.name, "command": t.meta.get("command", []),
        "launcher": t.meta.get("launcher"), "exit_code": t.exit_code, "interrupted": t.meta.get("interrupted", False),
        "stopped_by": stopped_by, "partial": stopped_by is not None or bool(write_errors),
        "stopped_as_asked": stopped_as_asked(stopped_by), "window": t.meta.get("window"),
        "duration_s": round(t.duration_s(), 3), "samples": len(t.samples), "torn_lines": t.torn_lines,
        "iterations": t.iterations(), "iterations_per_s": t.iterations_per_second(),
        "peaks": t.peaks(), "limits": t.limits(), "gc_share": overall, "gc_share_worst_window": worst,
        "gc_events": len(t.gc_events), "findings": [f.to_dict() for f in findings],
        "jvms": jvms, "write_errors": write_errors, "peak_sites": t.peak_sites(),
        "time_split": time_split(t),
    }
    if spark is not None:
        doc["spark_executors"] = spark
    launcher = startup_error_in(t.run_dir)
    if launcher is not None and t.exit_code not in (None, 0):
        doc["startup_error"] = f"{launcher.what}: {launcher.line}"
    return doc


def _spark_executors(lanes: list[Timeline], t: Timeline) -> list[dict] | None:
    """How each Spark executor of the run ended (None when the run is no Spark application); each
    executor lane gets its own exit status, so its findings speak of that executor."""
    from pyd4j.profile.spark_executors import mark_exit_codes, outcomes  # noqa: PLC0415

    if not any(lane.jvm is not None and lane.jvm.spark for lane in lanes):
        return None
    found = outcomes(t.run_dir, lanes)
    mark_exit_codes(lanes, found)
    return [o.to_dict() for o in found]


# -- the page -----------------------------------------------------------------------------------

def _img(path: Path | None) -> str:
    if path is None:
        return ""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


_CSS = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
img{max-width:100%} h1{font-size:1.6em;overflow-wrap:anywhere} .full{color:#666;font-size:.9em;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;vertical-align:top}
td{white-space:nowrap} td.wrap{white-space:normal;overflow-wrap:anywhere} th{background:#f2f2f2}
table.wide{width:100%}
details summary{cursor:pointer;color:#555} .w{white-space:nowrap}
.finding{border-left:6px solid #999;padding:4px 12px;margin:8px 0;background:#f7f7f7}
.error{border-color:#c44e52} .warning{border-color:#dd8452}
.banner{padding:8px 12px;margin:10px 0;border-radius:4px} .partial{background:#fdecea;border:1px solid #c44e52}
.tuned{background:#e8f4f2;border:1px solid #2a9d8f} .note{background:#fff8e1;border:1px solid #dd8452}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#eee;padding:6px}"""


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], wrap: Sequence[int] = ()) -> str:
    """An HTML table; cells stay on one line except in the `wrap` columns (flags, command lines),
    which share what is left of the page's width."""
    e = html.escape
    head = "".join(f"<th>{e(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td class=wrap>{_words(str(c))}</td>" if i in wrap else f"<td>{e(str(c))}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table{' class=wide' if wrap else ''}><tr>{head}</tr>{body}</table>"


def _words(text: str) -> str:
    """Escaped text that wraps between words only, never inside a flag at its '-' (long words,
    such as class paths, may still break)."""
    return " ".join(f'<span class="w">{html.escape(w)}</span>' if len(w) < 80 else html.escape(w) for w in text.split(" "))


def short_command(argv: Sequence[str], keep: int = 2) -> str:
    """A command line for reading: class paths of more than `keep` entries shown as their first
    entries and a count (the full command is one click away in the report)."""
    words = []
    for word in argv:
        parts = word.split()
        shown = []
        for part in parts:
            entries = part.split(":")
            if len(entries) > keep + 1 and len(part) > 120:
                part = ":".join(entries[:keep]) + f":…(+{len(entries) - keep} more)"
            shown.append(part)
        words.append(" ".join(shown))
    return " ".join(_display_word(w) for w in words)


def _display_word(word: str) -> str:
    """A word as a person would type it: plain, or in double quotes when it holds spaces or single quotes."""
    if word and not any(c in word for c in " \t'\"$`\\|&;<>()*?[]{}"):
        return word
    if not any(c in word for c in '"$`\\'):
        return f'"{word}"'
    return shlex.quote(word)


def _tune_section(doc: dict, side: str, out: Path) -> tuple[str, str, Path | None]:
    """(banner, before/after section, before/after plot) for one of tune's runs."""
    e = html.escape
    flags = " ".join(doc.get("recommended") or [])
    partial = doc.get("partial")
    if side == "after":
        banner = (f'<div class="banner tuned"><b>Tuned run.</b> This is the second run of <code>pyd4j tune</code>, with the '
                  f'recommended flags: <code>{_words(flags)}</code>. The first run is in <code>{e(str(doc["before"]["run_dir"]))}</code>.'
                  f"{' <b>The tune was stopped before it finished.</b>' if partial else ''}</div>")
    else:
        banner = ('<div class="banner note"><b>First run of a tune.</b> '
                  + (f'The tuned run (flags <code>{_words(flags)}</code>) is in <code>{e(str(doc["after"]["run_dir"]))}</code>.'
                     if doc.get("after") else "There was no tuned run (stopped, or --no-verify).") + "</div>")
    if not doc.get("after"):
        return banner, "", None
    b, a = doc["before"], doc["after"]

    def speed(s):
        return f"{s['iterations_per_s']:.2f}" if s.get("iterations_per_s") else "-"

    rows = [
        ("exit code", b.get("exit_code"), a.get("exit_code")),
        ("memory flags", " ".join(b.get("jvm_memory_flags") or []) or "(JVM defaults)", " ".join(a.get("jvm_memory_flags") or []) or flags),
        ("-Xmx", human_bytes(b["limits"].get("heap_max")), human_bytes(a["limits"].get("heap_max"))),
        ("JavaCPP maxbytes", human_bytes(b["limits"].get("javacpp_max")), human_bytes(a["limits"].get("javacpp_max"))),
        ("JavaCPP maxphysicalbytes", human_bytes(b["limits"].get("javacpp_max_physical")), human_bytes(a["limits"].get("javacpp_max_physical"))),
        ("peak heap used", human_bytes(b["peaks"].get("heap_used")), human_bytes(a["peaks"].get("heap_used"))),
        ("peak native", human_bytes(b["peaks"].get("native")), human_bytes(a["peaks"].get("native"))),
        ("peak RSS", human_bytes(b["peaks"].get("rss")), human_bytes(a["peaks"].get("rss"))),
        ("iterations", b.get("iterations"), a.get("iterations")),
        ("iterations/s", speed(b), speed(a)),
        ("findings", ", ".join(b.get("findings") or []) or "none", ", ".join(a.get("findings") or []) or "none"),
    ]
    verdict = ""
    if "verified" in doc:
        scope = f", for {doc['verified_for']}" if doc.get("verified_for") not in (None, "the whole job") else ""
        verdict = (f"<p><b>Verified{e(scope)}:</b> the tuned run finished cleanly with these flags.</p>" if doc["verified"]
                   else "<p><b>NOT verified:</b> the tuned run still shows problems (see its findings).</p>")
    plot = None
    try:
        plot = plot_before_after(Timeline.load(b["run_dir"]), Timeline.load(a["run_dir"]), out / "before_after.png")
    except (FileNotFoundError, KeyError):
        pass
    notes = "".join(f"<li>{e(n)}</li>" for n in doc.get("notes") or [])
    per_executor = ""
    if b.get("spark"):
        from pyd4j.profile.spark_tuning import before_after_rows  # noqa: PLC0415

        headers, executor_rows = before_after_rows(doc)
        per_executor = ("<h3>Per executor</h3><p>The worst executor's measured peaks size every executor's "
                        f"settings (worst: {e(str((doc.get('spark') or {}).get('worst_executor')))}).</p>"
                        + _table(headers, executor_rows))
    section = (f"<h2>Before / after</h2>{verdict}{_table(['', 'before', 'after (tuned)'], rows, wrap=(1, 2))}"
               + per_executor + (f"<ul>{notes}</ul>" if notes else "") + _img(plot))
    return banner, section, plot


def write_report(run_dir: str | Path, out_dir: str | Path | None = None, lanes: Sequence[Timeline] | None = None,
                 tune: dict | None = None) -> dict[str, Path]:
    """Write report.html, memory.png, gc.png, iterations.png, workspaces.png, jvms.png (one lane per
    JVM), before_after.png (tune's runs) and trace.json; return their paths."""
    run_dir = Path(run_dir)
    lanes = list(lanes) if lanes is not None else Timeline.load_lanes(run_dir)
    t = _primary(lanes)
    out = Path(out_dir) if out_dir else t.run_dir
    out.mkdir(parents=True, exist_ok=True)
    findings = diagnose(t)
    paths: dict[str, Path] = {"memory_png": plot_memory(t, out / "memory.png"), "gc_png": plot_gc(t, out / "gc.png")}
    optional = {"iterations_png": plot_iterations(t, out / "iterations.png"),
                "workspaces_png": plot_workspaces(t, out / "workspaces.png"),
                "jvms_png": plot_lanes(lanes, out / "jvms.png")}
    paths.update({k: v for k, v in optional.items() if v is not None})
    others = [lane for lane in lanes if lane is not t and lane.jvm is not None and lane.jvm.role == "job" and lane.samples]
    for lane in others:
        paths[_lane_png_key(lane)] = plot_memory(lane, out / f"memory-{lane.start.get('pid')}.png")
    trace = out / "trace.json"
    trace.write_text(json.dumps(perfetto_trace(lanes)))
    paths["trace"] = trace
    doc = summary(lanes, findings)
    tuned = (tune, "after") if tune is not None else find_tune_doc(t.run_dir)
    banner_tune, section_tune = "", ""
    if tuned is not None:
        banner_tune, section_tune, plot = _tune_section(tuned[0], tuned[1], out)
        if plot is not None:
            paths["before_after_png"] = plot
    is_tuned = tuned is not None and tuned[1] == "after"
    page = _page(t, lanes, doc, findings, paths, banner_tune, section_tune, trace.name, is_tuned)
    report = out / "report.html"
    report.write_text(page, encoding="utf-8")
    paths["html"] = report
    return paths


_PEAK_WORDS = {
    "heap_used": "Java heap in use, garbage included",
    "heap_live": "heap right after a GC (after young GCs it still holds old-generation garbage; see the GC section)",
    "heap_committed": "heap the JVM reserved from the OS",
    "nonheap_used": "metaspace and code cache",
    "direct_used": "NIO direct buffers (bounded by -XX:MaxDirectMemorySize)",
    "mapped_used": "memory-mapped files",
    "javacpp_total": "JavaCPP totalBytes (bounded by maxbytes; ND4J M2.1 CPU arrays are not in it)",
    "javacpp_physical": "JavaCPP physicalBytes: the process's RSS as JavaCPP reads it (bounded by maxphysicalbytes)",
    "rss": "resident memory of the whole JVM process",
    "native": "RSS outside the heap, metaspace and code cache: ND4J arrays, JavaCPP, malloc",
    "threads": "live threads",
}
_LIMIT_WORDS = {
    "heap_max": "-Xmx", "max_direct": "-XX:MaxDirectMemorySize (defaults to -Xmx)",
    "javacpp_max": "-Dorg.bytedeco.javacpp.maxbytes", "javacpp_max_physical": "-Dorg.bytedeco.javacpp.maxphysicalbytes",
    "cgroup": "the container's memory limit",
}


def _peak_sites_html(peak: dict | None) -> str:
    """The off-heap peak broken down by the call sites that allocated what was held then."""
    if not peak or not peak["sites"]:
        return ""
    rows = [(x["site"] + ("" if x["user"] else " (library)"), x["kind"], x["via"] or "-", human_bytes(x["live_bytes"]),
             f"{x['share']:.0%}" if x["share"] is not None else "-") for x in peak["sites"]]
    at = f" at iteration {peak['iterations']}" if peak.get("iterations") else ""
    in_use = f"; off-heap in use then: {human_bytes(peak['in_use'])}" if peak.get("in_use") else ""
    return (f"<h2>Where the off-heap peak was allocated</h2><p>Call sites holding libnd4j and JavaCPP memory at the "
            f"highest off-heap point{at}{in_use}. Bytes per site are estimates from allocations sampled by bytes "
            f"({peak['site_count']} sites seen); the share is of the sampled total.</p>"
            + _table(["call site", "allocator", "through", "held at the peak", "share"], rows, wrap=(0, 2)))


def _page(t: Timeline, lanes: Sequence[Timeline], doc: dict, findings: list[Finding], paths: dict[str, Path],
          banner_tune: str, section_tune: str, trace_name: str, is_tuned: bool) -> str:
    e = html.escape
    banners = [banner_tune] if banner_tune else []
    if doc["stopped_as_asked"]:
        what = "its measurement window" if doc["stopped_by"] == "window" else "the --timeout"
        banners.append(f'<div class="banner partial"><b>Stopped as asked:</b> the run ended at {what} after '
                       f'{doc["iterations"]} iterations ({doc["duration_s"]:.1f} s), as it was asked to: not a failure. '
                       f"The job and everything it started were ended; what follows is what it measured.</div>")
    elif doc["stopped_by"]:
        banners.append(f'<div class="banner partial"><b>Partial run:</b> stopped by {e(doc["stopped_by"])} after {doc["duration_s"]:.1f} s; '
                       f"the job and everything it started were ended. What follows is what was measured until then.</div>")
    for w in doc["write_errors"]:
        banners.append(f'<div class="banner partial"><b>Timeline incomplete:</b> {e(w["message"])}</div>')
    if doc.get("startup_error"):
        banners.append(f'<div class="banner partial"><b>The job did not start:</b> {e(doc["startup_error"])}</div>')
    items = []
    for f in findings:
        evidence = "".join(f"<li>{e(x)}</li>" for x in f.evidence)
        flags = f"<pre>{e(' '.join(f.flags))}</pre>" if f.flags else ""
        items.append(f'<div class="finding {e(f.severity)}"><h3>{e(f.title)}</h3><ul>{evidence}</ul>'
                     f"<p><b>Fix:</b> {e(f.fix)}</p>{flags}</div>")
    findings_html = "".join(items) or "<p>No problems found: no OOM, no leak, no GC pressure, no workspace spills.</p>"
    speed = doc["iterations_per_s"]
    peaks = _table(["measure", "peak", "what it is"], [(k, human_bytes(v) if k != "threads" else v, _PEAK_WORDS.get(k, ""))
                                                     for k, v in doc["peaks"].items()], wrap=(2,))
    limits = _table(["limit", "value", "what it is"], [(k, human_bytes(v), _LIMIT_WORDS.get(k, "")) for k, v in doc["limits"].items()],
                    wrap=(2,))
    jvm_rows = [(j.get("pid"), role_text(j), j.get("main_class"),
                 j.get("parent_jvm") or "-", j.get("samples", "-"), j.get("iterations", "-"), human_bytes(j.get("rss_peak")),
                 human_bytes(j.get("heap_max"))) for j in doc["jvms"]]
    commands = "".join(f"<li>pid {e(str(j.get('pid')))}: <code>{e(short_command(str(j.get('command', '')).split(' ')))}</code></li>"
                       for j in doc["jvms"])
    jvms = (f"<h2>JVMs of the run ({len(lanes)})</h2>"
            + _table(["pid", "role", "main class", "parent JVM", "samples", "iterations", "peak RSS", "-Xmx"], jvm_rows, wrap=(2,))
            + f"<details><summary>their command lines</summary><ul>{commands}</ul></details>"
            + _img(paths.get("jvms_png"))) if len(lanes) > 1 else ""
    if doc.get("spark_executors"):
        jvms += ("<h2>Spark executors</h2><p>How each executor ended: its exit code and the reason Spark gave in the "
                 "driver's log, and an OutOfMemoryError its agent or a failed task reported.</p>"
                 + _table(["executor", "pid", "exit code", "ended", "diagnosis"],
                          [(x["executor_id"], x["pid"] or "-", "-" if x["exit_code"] is None else x["exit_code"], x["kind"],
                            x["diagnosis"]) for x in doc["spark_executors"]], wrap=(4,)))
    sites = _peak_sites_html(doc.get("peak_sites"))
    other = "".join(f"<h2>Memory — {e(_lane_label(lane))}</h2>{_img(paths[key])}"
                    for lane in lanes if (key := _lane_png_key(lane)) in paths)
    gc_note = ("<p>Grey dots: heap right after young collections, which still holds old-generation garbage: it is not "
               "the live heap. " + ("Green diamonds: heap after full collections, the live heap." if live_heap_points(t)[0]
                                     else "No full collection happened, so the live heap was not measured in this run.") + "</p>")
    title = e(short_name(t.name, 60))
    tuned_tag = " (tuned run)" if is_tuned else ""
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>pyd4j profile: {title}{tuned_tag}</title>
<style>{_CSS}</style>
</head><body>
<h1>pyd4j profile: {title}{tuned_tag}</h1>
<p class="full">{e(t.name)}</p>
{''.join(banners)}
<p><b>Command:</b></p><pre>{e(short_command(doc['command']))}</pre>
<details><summary>the full command</summary><pre>{e(shlex.join(doc['command']))}</pre></details>
<p>Exit code {e(str(doc['exit_code']))}{' (' + e(doc['stopped_by']) + ')' if doc['stopped_by'] else ''};
{doc['duration_s']:.1f} s; {doc['samples']} samples; {doc['iterations']} iterations{f' ({speed:.2f} iterations/s)' if speed else ''};
{doc['gc_events']} GCs, {doc['gc_share']:.1%} of the run in GC.</p>
<h2>Findings</h2>{findings_html}{_split_html(doc.get("time_split"))}
{section_tune}
{jvms}
<h2>Memory</h2>{_img(paths['memory_png'])}
{'<h2>Memory per iteration</h2>' + _img(paths['iterations_png']) if 'iterations_png' in paths else ''}
<h2>GC</h2>{_img(paths['gc_png'])}{gc_note}
{'<h2>Workspaces</h2>' + _img(paths['workspaces_png']) if 'workspaces_png' in paths else ''}
{sites}
{other}
<h2>Peaks</h2>{peaks}
<h2>Limits</h2>{limits}
<p>Trace for ui.perfetto.dev / chrome://tracing (one process per JVM): <code>{e(trace_name)}</code></p>
</body></html>
"""
