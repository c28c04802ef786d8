"""The plots of a profiled run: memory over time and per iteration, GC pauses, ND4J workspaces, one
lane per JVM, and a tune's first run against its tuned run. Pure functions of timelines to PNG files.

Plots say what they show: sizes in the unit that fits them (KiB for small workspaces), limits
drawn where they fall and named where they are off the axis, legends outside the data, "heap
after GC" marked as not being the live heap unless it was measured after full collections.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Sequence

import numpy as np

from pyd4j.output import human_bytes
from pyd4j.profile.gc_pressure import gc_share
from pyd4j.profile.jvms import role_text, run_origin_ms, short_name
from pyd4j.profile.leak_verdicts import leak_verdicts
from pyd4j.profile.timeline import Timeline


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
