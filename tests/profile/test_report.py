"""Reports from real runs: files exist, HTML escapes what the job supplied, the trace is valid."""

from __future__ import annotations

import json
import shutil

import pytest

from pyd4j.profile.perfetto import perfetto_trace
from pyd4j.profile.report import write_report
from pyd4j.profile.timeline import Timeline

pytestmark = [pytest.mark.jvm, pytest.mark.slow]


def test_report_files_and_trace(leak_run, tmp_path):
    paths = write_report(leak_run.run_dir, tmp_path)
    for key in ("html", "memory_png", "gc_png", "trace"):
        assert paths[key].exists() and paths[key].stat().st_size > 0
    assert paths["memory_png"].read_bytes()[:4] == b"\x89PNG"
    trace = json.loads(paths["trace"].read_text())
    names = {e["name"] for e in trace["traceEvents"]}
    assert "memory MiB" in names and any(n.startswith("iteration ") for n in names)
    page = paths["html"].read_text()
    assert "Memory leak" in page and "data:image/png;base64," in page


def test_html_escapes_job_name_and_arguments(healthy_run, tmp_path):
    run_dir = tmp_path / "evil"
    shutil.copytree(healthy_run.run_dir, run_dir)
    meta = json.loads((run_dir / "run.json").read_text())
    meta["command"] = ["java", "-cp", "x.jar", "<script>alert(1)</script>", "--name=\"a&b\""]
    (run_dir / "run.json").write_text(json.dumps(meta))
    (lane,) = run_dir.glob("jvm-*.jsonl")
    lines = lane.read_text().splitlines()
    start = json.loads(lines[0])
    start["command"] = "<img src=x onerror=alert(2)> arg"
    lines[0] = json.dumps(start)
    lane.write_text("\n".join(lines) + "\n{\"type\":\"sample\",\"t\":")  # torn last line
    page = write_report(run_dir)["html"].read_text()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page and "pyd4j profile: &lt;img</title>" in page
    assert "a&amp;b" in page
    assert Timeline.load(run_dir).torn_lines == 1


def test_perfetto_counters_match_samples(healthy_run):
    t = healthy_run.timeline
    trace = perfetto_trace(t)
    counters = [e for e in trace["traceEvents"] if e.get("name") == "memory MiB"]
    assert len(counters) == len(t.samples)
    assert max(c["args"]["rss"] for c in counters) == pytest.approx(t.peak("rss") / (1 << 20), abs=0.01)
