"""The live heap past the agent's last histogram: a job whose heap outgrows `live_max_heap` (the
agent then takes no histogram of its own, a second full collection instead) is measured at the full collection `jcmd
GC.class_histogram` causes, and the agent's figure is compared with jcmd's Total.

The corpus job that keeps a 0.8 MB float[] per iteration, under -Xmx1g: G1's regions are then 1 MB
and each array takes a region of its own (a humongous object), so a fifth of every region is space
no object holds, and that space grows with the heap. Subtracting the free space measured at the last
histogram (a fixed figure) left the live heap 20% high at 3 times that heap; the agent now fits the
free space against the usage over its histograms and corrects in proportion."""

from __future__ import annotations

import subprocess
import time

import pytest

from pyd4j.profile.histogram import read_histogram
from pyd4j.profile.timeline import Timeline
from tests.profile.conftest import DEADLINE_S, Stopper, corpus_command

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

LAST_HISTOGRAM_MIB = 192   # live_max_heap: no agent histogram above this heap in use
MEASURE_AT_MIB = 500       # jcmd's histogram once this much heap is in use after a collection


def test_the_live_heap_past_the_last_histogram_is_what_jcmd_measures(tmp_path):
    from pyd4j.profile import profile_job

    run_dir, stop = tmp_path / "run", tmp_path / "stop"
    taken: dict = {}

    def histogram(t: Timeline) -> None:
        asked = time.time() * 1000
        out = subprocess.run(["jcmd", str(t.start["pid"]), "GC.class_histogram"], check=True, capture_output=True,
                             text=True, timeout=120).stdout
        deadline = time.monotonic() + 60
        while not (points := [p for p in Timeline.load(run_dir).live_points
                              if p["t"] >= asked and p["trigger"] == "full-gc"]):
            assert time.monotonic() < deadline, "the agent wrote no live point for jcmd's collection"
            time.sleep(0.5)
        taken.update(total=read_histogram(out)[0], point=min(points, key=lambda p: p["t"]))

    def enough(t: Timeline) -> bool:
        after = [g["heap_after"] for g in t.gc_events if g.get("heap_after")]
        return bool(after) and after[-1] >= MEASURE_AT_MIB << 20

    command = corpus_command("leak-heap", "-Xmx1g", "-XX:+UseG1GC", "-Dcorpus.pauseMs=40",
                             f"-Dpyd4j.agent=live_max_heap={LAST_HISTOGRAM_MIB}", stop=stop)
    run = profile_job(command, run_dir, on_sample=Stopper(run_dir, stop, enough, before_stop=histogram),
                      timeout_s=DEADLINE_S)
    assert run.returncode == 0, (run_dir / "stderr.log").read_text()[-3000:]
    t = run.timeline
    # the agent's own histograms (the inspections that count instances) stopped at live_max_heap, and it said so;
    # its inspections above it take a second full collection instead
    inspections = [p for p in t.live_points if p["trigger"] == "inspection" and "instances" in p]
    # the heap after the collection comes with the JVM's GC notification, which a loaded machine may deliver
    # after the point is written: judged on the points that carry it
    sized = [p["heap_after_gc"] for p in inspections if "heap_after_gc" in p]
    assert len(inspections) >= 2 and sized and max(sized) <= 2 * (LAST_HISTOGRAM_MIB << 20), inspections
    note = next((n for n in t.notes if "live_max_heap" in n.get("text", "")), None)
    assert note is not None, t.notes
    # the agent decides by the heap in use before its collection, garbage included, so a point without a
    # histogram may end under live_max_heap after it; each comes at or after the note of the first one,
    # and its live heap (usage less the fitted free space) is under its usage
    above = [p for p in t.live_points if p["trigger"] == "inspection" and "instances" not in p]
    assert above and all(p["t"] >= note["t"] for p in above), above
    assert any("heap_after_gc" in p for p in above), above
    assert all(p["heap_live"] < p["heap_after_gc"] for p in above if "heap_after_gc" in p), above
    point, total = taken["point"], taken["total"]
    assert point["heap_after_gc"] >= 2 * max(sized)
    print(f"agent {point['heap_live']} B vs jcmd GC.class_histogram {total} B; usage {point['heap_after_gc']} B")
    # the usage itself is a fifth above the objects: the correction is what makes the figure right
    assert point["heap_after_gc"] > 1.1 * total
    assert point["heap_live"] == pytest.approx(total, rel=0.02)
