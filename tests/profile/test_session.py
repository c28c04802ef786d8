"""The in-process JPype session: the agent's sampler started through JPype, no -javaagent."""

from __future__ import annotations

import time

import pytest

from pyd4j.profile import session

pytestmark = pytest.mark.jvm


def test_session_samples_this_process(jvm, tmp_path):
    from org.nd4j.linalg.api.buffer import DataType
    from org.nd4j.linalg.factory import Nd4j

    with session(tmp_path / "s", interval_ms=50) as run:
        kept = [Nd4j.create(DataType.FLOAT, 1 << 20) for _ in range(8)]  # 32 MiB off-heap
        # Wait for samples, not for time: a loaded machine samples late (generous deadline for a hang).
        lines = run.run_dir / "timeline.jsonl"
        deadline = time.monotonic() + 120
        while lines.read_text().count('"type":"sample"') + lines.read_text().count('"type": "sample"') < 5 \
                and time.monotonic() < deadline:
            time.sleep(0.05)
    t = run.timeline
    assert len(t.samples) >= 5 and t.end is not None and t.end["reason"] == "stopped"
    assert t.start["pid"] == jvm.pid
    assert t.peak("javacpp_physical") > 32 << 20  # JavaCPP saw this process's RSS
    assert t.limits()["heap_max"] == 2 << 30  # the session JVM's -Xmx2g
    del kept


def test_session_refuses_a_directory_with_files(tmp_path):
    from pyd4j.profile.launch import RunDirError

    used = tmp_path / "earlier"
    used.mkdir()
    (used / "timeline.jsonl").write_text("my earlier run\n")
    with pytest.raises(RunDirError, match="not empty"):
        with session(used):
            pass
    assert (used / "timeline.jsonl").read_text() == "my earlier run\n"  # untouched
