"""A profiled run as one self-contained HTML page: banners (stopped, partial, tuned), findings, where
the training time went, a tune's before/after, the JVMs of the run, the plots embedded as PNG data,
the off-heap peak by call site, peaks and limits.

Everything the job supplied (its name, arguments, error messages) is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import shlex
from pathlib import Path
from typing import Any, Sequence

from pyd4j.output import human_bytes
from pyd4j.profile.finding import Finding
from pyd4j.profile.jvms import lane_label, role_text, short_name
from pyd4j.profile.plots import live_heap_points, plot_before_after
from pyd4j.profile.timeline import Timeline
from pyd4j.profile.timesplit import describe as describe_split


def lane_png_key(t: Timeline) -> str:
    """The key (in a report's paths) of a lane's own memory plot."""
    return f"memory_{t.start.get('pid')}_png"


def _split_html(split: dict | None) -> str:
    """Where the training time went (pyd4j.profile.timesplit), as a table."""
    if not split:
        return ""
    rows = [(p, f"{split['ms_per_iteration'][p]:.2f}", f"{split['share'][p]:.0%}") for p in split["share"]]
    return ("<h2>Where the training time went</h2>" + _table(["part", "ms per iteration", "share"], rows)
            + f"<p>{html.escape(describe_split(split))}</p>")


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


def tune_section(doc: dict, side: str, out: Path) -> tuple[str, str, Path | None]:
    """(banner, before/after section, before/after plot) for one of tune's runs."""
    from pyd4j.memory.estimate import assignments  # noqa: PLC0415 - the estimate's module loads only for a tune

    e = html.escape
    # as a shell line has them: the environment, then the flags
    flags = " ".join(assignments(doc.get("recommended_environment") or {}) + list(doc.get("recommended") or []))
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


def page(t: Timeline, lanes: Sequence[Timeline], doc: dict, findings: list[Finding], paths: dict[str, Path],
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
    other = "".join(f"<h2>Memory — {e(lane_label(lane))}</h2>{_img(paths[key])}"
                    for lane in lanes if (key := lane_png_key(lane)) in paths)
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
