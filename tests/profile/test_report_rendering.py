"""How the report draws and says things, checked on the rendered figures and pages (no JVM:
timelines written here by hand): limits off the axis named, labels and legends not over each
other or the data, sizes in units that fit, long class names kept short, live heap only from
full GCs, one lane per JVM, partial runs marked; and the terminal side: the live view's title,
tables outside a terminal not cut."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.text import Text

from pyd4j.profile import perfetto, plots, report
from pyd4j.profile.live import LiveView
from pyd4j.profile.timeline import Timeline

MIB = 1 << 20
LONG_MAIN = "org.example.company.division.team.project.training.pipelines.experimental.VeryLongNamedTrainingJobMain"


def write_lane(run_dir: Path, pid: int, n: int = 40, *, command: str = "com.acme.Train --data /x", ws_kib: float = 0,
               gcs: list[dict] | None = None, heap_max: int = 256 * MIB, ancestors=(1,), rss0: int = 100 * MIB,
               start_ms: int = 1_000_000, iterations: bool = True) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [{"type": "start", "t": start_ms, "pid": pid, "ancestors": list(ancestors), "jvm_start": start_ms,
              "command": command, "jvm_args": [f"-Xmx{heap_max >> 20}m"], "heap_max": heap_max, "max_direct": heap_max}]
    for i in range(n):
        s = {"type": "sample", "t": start_ms + 500 + 100 * i, "heap_used": (20 + i % 7) * MIB, "heap_committed": 64 * MIB,
             "heap_max": heap_max, "nonheap_used": 30 * MIB, "nonheap_committed": 32 * MIB, "rss": rss0 + i * MIB,
             "heap_rss": 40 * MIB, "threads": 12, "iterations": i if iterations else 0, "gc": {"G1 Young Generation": [i // 10, i]},
             "javacpp_total": 50_000, "javacpp_physical": rss0 + i * MIB, "javacpp_max": heap_max,
             "javacpp_max_physical": 16 << 30}
        if ws_kib:
            s["ws"] = [{"id": "WS_LAYER_WORKING_MEM", "thread": "1", "size": int(ws_kib * 1024), "spilled": 0, "pinned": 0,
                        "max_cycle": 0, "last_cycle": 0}]
        lines.append(s)
    lines += gcs or []
    lines.append({"type": "end", "t": start_ms + 500 + 100 * n, "reason": "exit", "samples": n,
                  "iterations": n - 1 if iterations else 0})
    path = run_dir / f"jvm-{pid}.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def write_meta(run_dir: Path, **extra) -> None:
    meta = {"command": ["java", "-cp", "x.jar", "com.acme.Train"], "returncode": 0, "interrupted": False,
            "stopped_by": None, "cgroup_limit_bytes": None, **extra}
    (run_dir / "run.json").write_text(json.dumps(meta))


def _boxes_overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_limits_close_together_get_separate_labels_and_far_ones_are_named_off_the_axis():
    plt = plots._plt()
    fig, ax = plt.subplots(figsize=(8, 3), layout="constrained")
    ax.plot([0, 1], [0, 150])
    note = plots.draw_limits(ax, [("-Xmx", 256 * MIB, "b"), ("JavaCPP maxbytes", 256 * MIB, "r"),
                                  ("JavaCPP maxphysicalbytes", 262 * MIB, "k"), ("container limit", 10 << 30, "g")],
                             150 * MIB, MIB, "MiB")
    assert "container limit 10 GiB" in note and "68×" in note           # named, with how far off the axis
    fig.canvas.draw()
    labels = [t for t in ax.texts if "MiB" in t.get_text()]
    assert sorted(t.get_text() for t in labels) == ["-Xmx = JavaCPP maxbytes 256 MiB", "JavaCPP maxphysicalbytes 262 MiB"]
    a, b = (Text.get_window_extent(t) for t in labels)                   # the words, without their connector lines
    assert not _boxes_overlap(a, b)                                      # 256 and 262 MiB: labels pushed apart
    assert ax.get_ylim()[1] > 262                                        # the limits in view are on the axis
    plt.close(fig)


def test_memory_plot_of_a_long_main_class_keeps_its_title_and_legend_inside_and_off_the_data(tmp_path):
    write_lane(tmp_path, 5, command=f"{LONG_MAIN} --epochs 3")
    write_meta(tmp_path, cgroup_limit_bytes=64 << 30)
    t = Timeline.load(tmp_path)
    plt = plots._plt()
    captured = {}
    real_save = plots._save
    plots._save = lambda plt_, fig, path: captured.setdefault("fig", fig) and path  # keep the figure to measure it
    try:
        plots.plot_memory(t, tmp_path / "m.png")
    finally:
        plots._save = real_save
    fig = captured["fig"]
    fig.canvas.draw()
    ax = fig.axes[0]
    figure_box = fig.bbox
    title = ax.title.get_window_extent()
    assert figure_box.x0 <= title.x0 and title.x1 <= figure_box.x1
    assert "VeryLongNamedTrainingJobMain" in ax.title.get_text() and "org.example" not in ax.title.get_text()
    assert "container limit 64 GiB" in ax.title.get_text()               # off the axis, named in the title
    legend = fig.legends[0].get_window_extent()
    assert not _boxes_overlap(legend, ax.get_window_extent())            # the legend is outside the data
    plt.close(fig)


def test_a_limit_label_in_the_right_margin_is_whole_inside_the_saved_picture(tmp_path):
    """Read from the PNG itself: the rightmost pixels in the label's colour (the label is the rightmost
    thing drawn in it; its line and the heap-used curve end at the axes) stop a margin short of the
    picture's right edge, and the label is as wide in the picture as matplotlib laid it out."""
    write_lane(tmp_path, 5, heap_max=150 * MIB)     # -Xmx = JavaCPP maxbytes 150 MiB, labelled right of the axes
    write_meta(tmp_path)
    path = plots.plot_memory(Timeline.load(tmp_path), tmp_path / "m.png")
    pixels = (plots._plt().imread(path)[..., :3] * 255).astype(int)
    colour = np.array([0x1F, 0x3B, 0x73])            # _COLORS["heap_used"]: -Xmx's line and label
    columns = np.nonzero((np.abs(pixels - colour).sum(axis=2) < 60).any(axis=0))[0]
    assert columns.size
    dpi = 110
    margin_px = pixels.shape[1] - 1 - columns.max()
    assert margin_px >= 0.1 * dpi, f"the label ends {margin_px} px from the picture's right edge"
    # the label's width in the picture is the laid-out width of its text: nothing of it was cut
    plt = plots._plt()
    fig, ax = plt.subplots(figsize=(4, 2), dpi=dpi)
    text = ax.text(0, 0, "-Xmx = JavaCPP maxbytes 150 MiB", fontsize=8)
    fig.canvas.draw()
    width_px = text.get_window_extent().width
    plt.close(fig)
    right_of_axes = columns[columns > columns.max() - width_px - 5]
    assert right_of_axes.max() - right_of_axes.min() == pytest.approx(width_px, abs=4)


def test_workspaces_of_kibibytes_are_shown_in_kib_with_the_legend_beside(tmp_path):
    write_lane(tmp_path, 5, ws_kib=48)
    write_meta(tmp_path)
    t = Timeline.load(tmp_path)
    captured = {}
    real_save = plots._save
    plots._save = lambda plt_, fig, path: captured.setdefault("fig", fig) and path
    try:
        plots.plot_workspaces(t, tmp_path / "ws.png")
    finally:
        plots._save = real_save
    fig = captured["fig"]
    ax = fig.axes[0]
    assert ax.get_ylabel() == "KiB"
    assert np.nanmax(ax.lines[0].get_ydata()) == pytest.approx(48)
    fig.canvas.draw()
    assert not _boxes_overlap(fig.legends[0].get_window_extent(), ax.get_window_extent())
    plots._plt().close(fig)


@pytest.mark.parametrize("largest, unit", [(512, "B"), (40 * 1024, "KiB"), (300 * MIB, "MiB"), (3 << 30, "GiB")])
def test_byte_unit_fits_the_largest_value(largest, unit):
    assert plots.byte_unit(largest)[1] == unit


def test_heap_after_full_gc_is_the_live_heap_and_young_gc_readings_are_not(tmp_path):
    gcs = [{"type": "gc", "t": 1_000_600 + 300 * i, "action": "end of minor GC", "heap_after": (30 + i) * MIB,
            "duration_ms": 3} for i in range(8)]
    gcs += [{"type": "gc", "t": 1_002_000, "action": "end of major GC", "heap_after": 12 * MIB, "duration_ms": 40}]
    write_lane(tmp_path, 5, gcs=gcs)
    write_meta(tmp_path)
    t = Timeline.load(tmp_path)
    live, label = plots.live_heap_points(t)
    assert [g["heap_after"] for g in live] == [12 * MIB] and "full GC" in label and "live" in label
    page = report.write_report(tmp_path)["html"].read_text()
    assert "it is not the live heap" in page and "heap after full collections, the live heap" in page


def test_the_agents_live_points_are_the_live_heap_as_measured_over_the_jobs_full_gcs(tmp_path):
    gcs = [{"type": "gc", "t": 1_002_000, "action": "end of major GC", "heap_after": 40 * MIB, "duration_ms": 40}]
    path = write_lane(tmp_path, 5, gcs=gcs)
    live = [{"type": "live", "t": 1_001_000 + 1000 * i, "trigger": "inspection", "iterations": 10 * i,
             "heap_live": (9 + i) * MIB, "heap_drained": i > 0} for i in range(3)]
    with path.open("a") as f:
        f.write("".join(json.dumps(x) + "\n" for x in live))
    write_meta(tmp_path)
    points, label = plots.live_heap_points(Timeline.load(tmp_path))
    # every live point as measured (a histogram after a full GC counts what jcmd counts), not the job's own
    # full GC's collector usage
    assert [p["heap_after"] for p in points] == [9 * MIB, 10 * MIB, 11 * MIB] and "class_histogram" in label
    assert Timeline.load(tmp_path).live_heap_peak() == 11 * MIB


def test_the_off_heap_peak_is_broken_down_by_call_site_in_summary_and_page(tmp_path):
    path = write_lane(tmp_path, 5)
    site = {"kind": "nd4j", "via": "org.nd4j.linalg.factory.Nd4j.rand", "stack": []}
    snaps = [{"type": "sites", "t": 1_001_000, "reason": "peak", "iterations": 5, "mean_bytes": 262144, "site_count": 3,
              "sites": [{**site, "site": "com.acme.Train.main(Train.java:42)", "user": True, "live_bytes": 30 * MIB},
                        {**site, "site": "org.nd4j.Lib.f(Lib.java:7)", "user": False, "live_bytes": 10 * MIB},
                        {**site, "site": "com.acme.Train.gone(Train.java:50)", "user": True, "live_bytes": 0}]},
             {"type": "sites", "t": 1_002_000, "reason": "peak", "iterations": 15, "mean_bytes": 262144, "site_count": 3,
              "sites": [{**site, "site": "com.acme.Train.main(Train.java:42)", "user": True, "live_bytes": 60 * MIB},
                        {**site, "site": "org.nd4j.Lib.f(Lib.java:7)", "user": False, "live_bytes": 20 * MIB}]},
             {"type": "sites", "t": 1_003_000, "reason": "end", "iterations": 25, "mean_bytes": 262144, "site_count": 3,
              "sites": [{**site, "site": "com.acme.Train.end(Train.java:60)", "user": True, "live_bytes": 99 * MIB}]}]
    with path.open("a") as f:
        f.write("".join(json.dumps(x) + "\n" for x in snaps))
    write_meta(tmp_path)
    peak = report.summary(Timeline.load(tmp_path))["peak_sites"]
    # the last (highest) peak snapshot; sites holding nothing left out; shares of the sampled total
    assert peak["iterations"] == 15 and peak["sampled_bytes"] == 80 * MIB and peak["in_use"] == 50_000
    assert [(x["site"], x["share"]) for x in peak["sites"]] == [("com.acme.Train.main(Train.java:42)", 0.75),
                                                                ("org.nd4j.Lib.f(Lib.java:7)", 0.25)]
    page = report.write_report(tmp_path)["html"].read_text()
    assert "Where the off-heap peak was allocated" in page and "Train.java:42" in page and "(library)" in page
    assert "Train.java:60" not in page


def test_memory_per_iteration_plots_against_iterations(tmp_path):
    write_lane(tmp_path, 5, n=30)
    write_meta(tmp_path)
    paths = report.write_report(tmp_path)
    assert paths["iterations_png"].read_bytes()[:4] == b"\x89PNG"
    write_lane(tmp_path / "no-iterations", 6, iterations=False)
    write_meta(tmp_path / "no-iterations")
    assert "iterations_png" not in report.write_report(tmp_path / "no-iterations")


def test_each_jvm_is_its_own_lane_in_the_page_the_plot_and_the_trace(tmp_path):
    maven = "org.codehaus.plexus.classworlds.launcher.Launcher -q exec:exec"
    write_lane(tmp_path, 100, command=maven, ancestors=(1,), iterations=False, rss0=60 * MIB)
    for lane in (tmp_path / "jvm-100.jsonl",):  # a launcher: no JavaCPP, no iterations
        lines = [json.loads(x) for x in lane.read_text().splitlines()]
        for x in lines:
            x.pop("javacpp_total", None)
        lane.write_text("".join(json.dumps(x) + "\n" for x in lines))
    write_lane(tmp_path, 120, command=f"{LONG_MAIN} a b", ancestors=(110, 100, 1), start_ms=1_001_000)
    write_lane(tmp_path, 121, command="com.acme.Worker", ancestors=(100, 1), start_ms=1_001_500)
    write_meta(tmp_path)
    paths = report.write_report(tmp_path)
    page = paths["html"].read_text()
    assert "JVMs of the run (3)" in page and "launcher (maven)" in page and "job (main)" in page
    assert paths["jvms_png"].exists() and "memory_121_png" in paths      # the other job JVM has its own plot
    assert "<h1>pyd4j profile: VeryLongNamedTrainingJobMain</h1>" in page and f'class="full">{LONG_MAIN}' in page
    trace = perfetto.perfetto_trace(Timeline.load_lanes(tmp_path))
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert sorted(names) == [100, 120, 121] and "maven" in names[100]
    first = min(e["ts"] for e in trace["traceEvents"] if e.get("ph") == "C")
    assert first >= 0                                                     # one time axis for every JVM


def test_a_stopped_run_is_marked_partial_everywhere(tmp_path):
    write_lane(tmp_path, 5)
    write_meta(tmp_path, returncode=143, interrupted=True, stopped_by="SIGTERM",
               write_errors=[{"pid": 5, "file": "jvm-5.jsonl", "error": "No space left on device", "lost_lines": 7,
                              "lost_bytes": 4096, "lost_s": 2.5}])
    doc = report.summary(Timeline.load_lanes(tmp_path))
    assert doc["partial"] and doc["stopped_by"] == "SIGTERM"
    assert "No space left on device" in doc["write_errors"][0]["message"] and "7 lines" in doc["write_errors"][0]["message"]
    page = report.write_report(tmp_path)["html"].read_text()
    assert "Partial run" in page and "SIGTERM" in page and "Timeline incomplete" in page


def test_live_view_title_is_the_main_class_and_each_jvm_has_a_column():
    from rich.console import Console

    console = Console(record=True, width=200, file=open("/dev/null", "w"))  # noqa: SIM115
    view = LiveView("com.acme.Train", console=console)
    with view:
        view.jvm({"pid": 7, "command": f"{LONG_MAIN} --data /very/long/path/to/data -cp a.jar:b.jar"})
        view.jvm({"pid": 8, "command": "org.codehaus.plexus.classworlds.launcher.Launcher -q exec:exec"})
        view.update({"pid": 7, "iterations": 3, "javacpp_total": 1, "heap_used": MIB, "heap_max": 4 * MIB})
        view.update({"pid": 8, "heap_used": MIB, "heap_max": 4 * MIB})
    text = console.export_text()
    title = next(line for line in text.splitlines() if "profiling" in line)
    assert "VeryLongNamedTrainingJobMain" in title and "--data" not in title and "a.jar" not in title
    assert "(2 JVMs)" in title and "pid 7" in text and "pid 8" in text and "(maven)" in text


def test_tables_outside_a_terminal_show_every_flag_in_full():
    flags = " ".join(f"-Dorg.bytedeco.javacpp.maxphysicalbytes={n}" for n in range(1000, 1006))
    code = f"from pyd4j.output import print_table; print_table('t', ['flags'], [({flags!r},)])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "COLUMNS": ""}).stdout
    assert flags in out                                                  # on one line, not cut at 80 columns
