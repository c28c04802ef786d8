"""A run as a self-contained HTML page (plots embedded as PNG data, also written next to it),
plus a Chrome-trace / Perfetto JSON. Pure functions of a Timeline and its findings.

Everything the job supplied (its name, arguments, error messages) is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import numpy as np

from pyd4j.output import human_bytes
from pyd4j.profile.diagnose import Finding, diagnose, gc_share
from pyd4j.profile.timeline import Timeline

MIB = float(1 << 20)


def _plt():
    import matplotlib  # noqa: PLC0415  (heavy; only when a report is written)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def plot_memory(t: Timeline, path: Path) -> Path:
    """Stacked memory timeline (heap resident, metaspace/code, native) with the limits drawn."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    x = t.times()
    heap = np.nan_to_num(t.heap_resident()) / MIB
    nonheap = np.nan_to_num(t.series("nonheap_committed")) / MIB
    native = np.clip(np.nan_to_num(t.native()), 0, None) / MIB
    ax.stackplot(x, heap, nonheap, native, labels=["Java heap (resident)", "metaspace + code cache", "native (ND4J, JavaCPP, malloc)"],
                 colors=["#4C72B0", "#8172B2", "#DD8452"], alpha=0.8)
    ax.plot(x, np.nan_to_num(t.series("heap_used")) / MIB, color="#1f3b73", lw=1, label="heap used")
    ax.plot(x, np.nan_to_num(t.series("rss")) / MIB, color="black", lw=1.2, label="RSS")
    if np.nanmax(t.series("javacpp_total"), initial=0) > 0:
        ax.plot(x, np.nan_to_num(t.series("javacpp_total")) / MIB, color="#C44E52", lw=1, ls="--", label="JavaCPP totalBytes")
    limits = t.limits()
    for key, label, color in (("heap_max", "-Xmx", "#1f3b73"), ("javacpp_max", "JavaCPP maxbytes", "#C44E52"),
                              ("javacpp_max_physical", "JavaCPP maxphysicalbytes", "black"), ("cgroup", "container limit", "red")):
        value = limits.get(key)
        if value:
            ax.axhline(value / MIB, color=color, ls=":", lw=1)
            ax.annotate(f"{label} {human_bytes(value)}", (x[-1] if len(x) else 0, value / MIB), fontsize=7,
                        ha="right", va="bottom", color=color)
    top = max(np.nanmax(np.nan_to_num(t.series("rss")) / MIB, initial=1) * 1.6, 1)
    ax.set_ylim(0, top)
    ax.set_xlabel("seconds since JVM start")
    ax.set_ylabel("MiB")
    ax.set_title("Memory")
    ax.legend(loc="upper left", fontsize=7, ncol=2)
    _iteration_axis(ax, t)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _iteration_axis(ax, t: Timeline) -> None:
    iters = t.series("iterations")
    if np.nanmax(iters, initial=0) > 0:
        twin = ax.twinx()
        twin.plot(t.times(), iters, color="green", lw=0.8, alpha=0.6)
        twin.set_ylabel("iterations", color="green")


def plot_gc(t: Timeline, path: Path) -> Path:
    """GC pauses (one bar per collection) and live heap after each GC."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 3))
    if t.gc_events:
        xs = [(g["t"] - t.t0) / 1000.0 for g in t.gc_events]
        ax.bar(xs, [g.get("duration_ms", 0) for g in t.gc_events], width=max(t.duration_s() / 400, 0.01),
               color=["#C44E52" if "major" in (g.get("action") or "") else "#4C72B0" for g in t.gc_events])
        twin = ax.twinx()
        twin.plot(xs, [g.get("heap_after", 0) / MIB for g in t.gc_events], "o-", ms=2, lw=0.8, color="gray")
        twin.set_ylabel("heap after GC (MiB)")
    overall, worst = gc_share(t)
    ax.set_title(f"GC pauses ({len(t.gc_events)}; {overall:.1%} of the run in GC, worst 5 s window {worst:.1%})")
    ax.set_xlabel("seconds since JVM start")
    ax.set_ylabel("pause (ms)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_workspaces(t: Timeline, path: Path) -> Path | None:
    """Size (solid) and spilled bytes (dotted) per ND4J workspace."""
    series = t.workspace_series()
    if not series:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 3.5))
    x = t.times()
    for i, (key, cols) in enumerate(sorted(series.items())):
        line, = ax.plot(x, cols["size"] / MIB, lw=1.2, label=key)
        if np.nanmax(cols["spilled"], initial=0) > 0:
            ax.plot(x, cols["spilled"] / MIB, lw=1, ls=":", color=line.get_color(), label=f"{key} spilled")
    ax.set_xlabel("seconds since JVM start")
    ax.set_ylabel("MiB")
    ax.set_title("ND4J workspaces")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def perfetto_trace(t: Timeline) -> dict:
    """Chrome trace format (chrome://tracing, ui.perfetto.dev): counters, GC slices, iterations."""
    pid = t.start.get("pid", 1)
    events: list[dict] = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": t.name}}]
    us = lambda ms: (ms - t.t0) * 1000.0  # noqa: E731
    heap_res = t.heap_resident()
    native = t.native()
    for i, s in enumerate(t.samples):
        ts = us(s["t"])
        events.append({"ph": "C", "pid": pid, "name": "memory MiB", "ts": ts, "args": {
            "heap used": round(s.get("heap_used", 0) / MIB, 2),
            "heap resident": round(float(np.nan_to_num(heap_res[i])) / MIB, 2),
            "native": round(float(np.nan_to_num(native[i])) / MIB, 2),
            "rss": round(s.get("rss", 0) / MIB, 2),
        }})
        if s.get("javacpp_total") is not None:
            events.append({"ph": "C", "pid": pid, "name": "JavaCPP MiB", "ts": ts, "args": {
                "totalBytes": round(s["javacpp_total"] / MIB, 2), "physicalBytes": round(s["javacpp_physical"] / MIB, 2)}})
        events.append({"ph": "C", "pid": pid, "name": "threads", "ts": ts, "args": {"threads": s.get("threads", 0)}})
        if s.get("ws"):
            events.append({"ph": "C", "pid": pid, "name": "workspaces MiB", "ts": ts,
                           "args": {f"{w['id']}@{w['thread']}": round(w["size"] / MIB, 2) for w in s["ws"]}})
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
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def summary(t: Timeline, findings: list[Finding] | None = None) -> dict:
    """The run in one JSON-able document (what `--json` prints)."""
    findings = diagnose(t) if findings is None else findings
    overall, worst = gc_share(t)
    return {
        "run_dir": str(t.run_dir), "job": t.name, "command": t.meta.get("command", []),
        "exit_code": t.exit_code, "interrupted": t.meta.get("interrupted", False),
        "duration_s": round(t.duration_s(), 3), "samples": len(t.samples), "torn_lines": t.torn_lines,
        "iterations": t.iterations(), "iterations_per_s": t.iterations_per_second(),
        "peaks": t.peaks(), "limits": t.limits(), "gc_share": overall, "gc_share_worst_window": worst,
        "gc_events": len(t.gc_events), "findings": [f.to_dict() for f in findings],
    }


def _img(path: Path | None) -> str:
    if path is None:
        return ""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def write_report(run_dir: str | Path, out_dir: str | Path | None = None) -> dict[str, Path]:
    """Write report.html, memory.png, gc.png, workspaces.png, trace.json; return their paths."""
    t = Timeline.load(run_dir)
    out = Path(out_dir) if out_dir else t.run_dir
    out.mkdir(parents=True, exist_ok=True)
    findings = diagnose(t)
    paths: dict[str, Path] = {"memory_png": plot_memory(t, out / "memory.png"), "gc_png": plot_gc(t, out / "gc.png")}
    ws = plot_workspaces(t, out / "workspaces.png")
    if ws:
        paths["workspaces_png"] = ws
    trace = out / "trace.json"
    trace.write_text(json.dumps(perfetto_trace(t)))
    paths["trace"] = trace
    doc = summary(t, findings)
    e = html.escape
    rows = "".join(f"<tr><td>{e(k)}</td><td>{e(human_bytes(v) if k != 'threads' else str(v))}</td></tr>" for k, v in doc["peaks"].items())
    lims = "".join(f"<tr><td>{e(k)}</td><td>{e(human_bytes(v))}</td></tr>" for k, v in doc["limits"].items())
    items = []
    for f in findings:
        evidence = "".join(f"<li>{e(x)}</li>" for x in f.evidence)
        flags = f"<pre>{e(' '.join(f.flags))}</pre>" if f.flags else ""
        items.append(f'<div class="finding {e(f.severity)}"><h3>{e(f.title)}</h3><ul>{evidence}</ul>'
                     f"<p><b>Fix:</b> {e(f.fix)}</p>{flags}</div>")
    findings_html = "".join(items) or "<p>No problems found: no OOM, no leak, no GC pressure, no workspace spills.</p>"
    speed = doc["iterations_per_s"]
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>pyd4j profile: {e(t.name)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}} img{{max-width:100%}}
table{{border-collapse:collapse}} td{{border:1px solid #ccc;padding:2px 8px}}
.finding{{border-left:6px solid #999;padding:4px 12px;margin:8px 0;background:#f7f7f7}}
.error{{border-color:#c44e52}} .warning{{border-color:#dd8452}} pre{{white-space:pre-wrap;background:#eee;padding:6px}}</style>
</head><body>
<h1>pyd4j profile: {e(t.name)}</h1>
<p><b>Command:</b></p><pre>{e(' '.join(doc['command']))}</pre>
<p>Exit code {e(str(doc['exit_code']))}{' (interrupted)' if doc['interrupted'] else ''};
{doc['duration_s']:.1f} s; {doc['samples']} samples; {doc['iterations']} iterations
{f'({speed:.2f} iterations/s)' if speed else ''}; {doc['gc_events']} GCs, {doc['gc_share']:.1%} of the run in GC.</p>
<h2>Findings</h2>{findings_html}
<h2>Memory</h2>{_img(paths['memory_png'])}
<h2>GC</h2>{_img(paths['gc_png'])}
{'<h2>Workspaces</h2>' + _img(ws) if ws else ''}
<h2>Peaks</h2><table>{rows}</table>
<h2>Limits</h2><table>{lims}</table>
<p>Trace for ui.perfetto.dev / chrome://tracing: <code>{e(trace.name)}</code></p>
</body></html>
"""
    report = out / "report.html"
    report.write_text(page, encoding="utf-8")
    paths["html"] = report
    return paths
