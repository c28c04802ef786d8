"""The Maven-built LeNet example under the agent: the timeline's peaks agree with what the job
itself read from JavaCPP (every 5 ms on its own thread) within 5 %."""

from __future__ import annotations

import json
import os

import pytest

from pyd4j.jvm import classpath, examples_jar
from pyd4j.profile import diagnose, profile_job

pytestmark = [pytest.mark.jvm, pytest.mark.slow]


def test_peaks_agree_with_the_jobs_own_javacpp_log(tmp_path):
    # The job reads JavaCPP's counters every 5 ms itself; the agent samples at the same rate here
    # so both see the same short peaks.
    cp = os.pathsep.join([examples_jar(), *classpath()[1:]])
    run = profile_job(["java", "-Xmx512m", "-cp", cp, "org.pyd4j.examples.TrainLeNetSynthetic", "8", "16", "2"],
                      tmp_path / "lenet", interval_ms=5, timeout_s=300)
    assert run.returncode == 0, (run.run_dir / "stderr.log").read_text()[-2000:]
    line = next(x for x in (run.run_dir / "stdout.log").read_text().splitlines() if x.startswith("JOB_PEAKS "))
    job = json.loads(line.split(" ", 1)[1])
    t = run.timeline
    assert t.peak("javacpp_physical") == pytest.approx(job["physical_bytes"], rel=0.05)
    # totalBytes is only tens of KiB here (ND4J M2.1 does not count its arrays in it), so one
    # short-lived Pointer between two samples moves it by >5%: allow one page-sized miss.
    assert t.peak("javacpp_total") == pytest.approx(job["total_bytes"], rel=0.05, abs=8192)
    assert t.iterations() == job["iterations"] == 8
    assert len(t.epoch_events) == 2
    assert any(w["id"].startswith("WS_") for s in t.samples for w in s.get("ws", ()))  # DL4J's workspaces seen
    assert not [f.kind for f in diagnose(t) if f.kind.startswith(("leak", "oom"))]
