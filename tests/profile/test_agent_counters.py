"""The agent's JavaCPP counters under a JavaCPP whose native library comes late: every sample carries
every counter, from the first to the last (before, one failing native call could leave a sample with
totalBytes but no physicalBytes and then stop the JavaCPP counters for the rest of the run)."""

from __future__ import annotations

import os

import pytest

from pyd4j.jvm.classpath import classpath
from pyd4j.profile import profile_job
from tests.profile.conftest import FIXTURES_JAR

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

COUNTERS = ("javacpp_total", "javacpp_physical", "javacpp_max", "javacpp_max_physical")


def test_javacpp_counters_survive_a_missing_native_library(tmp_path):
    if not FIXTURES_JAR.exists():
        pytest.skip(f"{FIXTURES_JAR} not built; run `make setup`")
    cp = os.pathsep.join([str(FIXTURES_JAR), *classpath()[1:]])
    run = profile_job(["java", "-cp", cp, "org.pyd4j.fixtures.JavaCppLateNative", "1500", "1500"], tmp_path / "run",
                      interval_ms=20, timeout_s=240)
    assert run.returncode == 0, (run.run_dir / "stderr.log").read_text()[-2000:]
    with_javacpp = [s for s in run.timeline.samples if any(k in s for k in COUNTERS)]
    assert with_javacpp, "no JavaCPP counters at all"
    # all or none, in every sample
    assert all(all(k in s for k in COUNTERS) for s in with_javacpp)
    before = [s for s in with_javacpp if s.get("javacpp_physical_source") == "statm"]
    after = [s for s in with_javacpp if "javacpp_physical_source" not in s]
    assert len(before) >= 5 and len(after) >= 5  # the counters went on once JavaCPP's library came
    assert max(before, key=lambda s: s["t"])["t"] < min(after, key=lambda s: s["t"])["t"]
    # ... and kept counting: the 8 MiB of Pointers allocated after the library loaded (JavaCPP may free
    # them in its own shutdown hook before the agent's last sample)
    assert max(s["javacpp_total"] for s in after) >= 8 << 20
    # while JavaCPP could not say, RSS from /proc/self/statm (what JavaCPP reads) stood in
    assert all(s["javacpp_physical"] == s["rss"] for s in before)
