"""A profiled run's report: report.html with its plots (also written as PNG files next to it), a
Chrome-trace / Perfetto JSON, and the run in one JSON document (`summary`, what `--json` prints).
Pure functions of a run's timelines (one lane per JVM), its findings and, for `pyd4j tune`'s runs,
the tune document (`tune.json` next to the runs): the plots are `pyd4j.profile.plots`, the trace
`pyd4j.profile.perfetto`, the page `pyd4j.profile.report_page`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from pyd4j.output import human_bytes
from pyd4j.profile.diagnose import diagnose
from pyd4j.profile.finding import Finding
from pyd4j.profile.gc_pressure import gc_share
from pyd4j.profile.jvms import primary_lane
from pyd4j.profile.perfetto import perfetto_trace
from pyd4j.profile.plots import plot_gc, plot_iterations, plot_lanes, plot_memory, plot_workspaces
from pyd4j.profile.report_page import lane_png_key, page, tune_section
from pyd4j.profile.signals import stopped_as_asked
from pyd4j.profile.startup import startup_error_in
from pyd4j.profile.timeline import Timeline
from pyd4j.profile.timesplit import time_split
from pyd4j.profile.tune_doc import find_tune_doc
from pyd4j.schemas import PROFILE_SCHEMA


def write_report(run_dir: str | Path, out_dir: str | Path | None = None, lanes: Sequence[Timeline] | None = None,
                 tune: dict | None = None) -> dict[str, Path]:
    """Write report.html, memory.png, gc.png, iterations.png, workspaces.png, jvms.png (one lane per
    JVM), before_after.png (tune's runs) and trace.json; return their paths."""
    run_dir = Path(run_dir)
    lanes = list(lanes) if lanes is not None else Timeline.load_lanes(run_dir)
    t = primary_lane(lanes)
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
        paths[lane_png_key(lane)] = plot_memory(lane, out / f"memory-{lane.start.get('pid')}.png")
    trace = out / "trace.json"
    trace.write_text(json.dumps(perfetto_trace(lanes)))
    paths["trace"] = trace
    doc = summary(lanes, findings)
    tuned = (tune, "after") if tune is not None else find_tune_doc(t.run_dir)
    banner_tune, section_tune = "", ""
    if tuned is not None:
        banner_tune, section_tune, plot = tune_section(tuned[0], tuned[1], out)
        if plot is not None:
            paths["before_after_png"] = plot
    is_tuned = tuned is not None and tuned[1] == "after"
    html_page = page(t, lanes, doc, findings, paths, banner_tune, section_tune, trace.name, is_tuned)
    report = out / "report.html"
    report.write_text(html_page, encoding="utf-8")
    paths["html"] = report
    return paths


def _write_error_message(e: dict) -> str:
    who = f"pid {e['pid']}" if e.get("pid") is not None else e.get("file", "?")
    lost = f"{e['lost_lines']} lines ({human_bytes(e['lost_bytes'])})" if e.get("lost_lines") is not None else "its later samples"
    tail = f"; the kept part ends {e['lost_s']:.1f} s before the run ended" if e.get("lost_s") else ""
    return f"the timeline of {who} could not be written ({e.get('error')}): {lost} were lost, the part before is kept{tail}"


def summary(lanes: Timeline | Sequence[Timeline], findings: list[Finding] | None = None) -> dict:
    """The run in one JSON-able document (what `--json` prints): the job's (primary JVM's)
    figures, plus every JVM of the run under "jvms"."""
    lanes = [lanes] if isinstance(lanes, Timeline) else list(lanes)
    t = primary_lane(lanes)
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
