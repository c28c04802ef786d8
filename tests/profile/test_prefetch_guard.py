"""The agent's guard against DL4J's prefetch hang, on a real DL4J job (tests/fixtures/java SpeedJob):
an iterator whose asyncSupported() is true is wrapped by fit() in DL4J's prefetcher; its third next()
throws on the prefetch thread once fit() waits for that batch. DL4J's prefetcher then never wakes the
training thread, and the job hangs; under the agent it fails, with the iterator's error diagnosed."""

from __future__ import annotations

import json

import pytest

from pyd4j.profile.diagnose import diagnose
from pyd4j.profile.launch import profile_job
from pyd4j.profile.timeline import Timeline
from tests.profile.conftest import compat_command, speed_job_command


@pytest.mark.jvm
@pytest.mark.slow
def test_a_dead_prefetch_thread_fails_the_job_instead_of_hanging_it(tmp_path):
    # the third next() throws once fit() waits for that batch (the fixture waits for that, not for a time)
    job = speed_job_command("mlp", "0", "slow-data=20", "async=true", "data-fails=3", "epochs=1")
    run = profile_job(job, tmp_path / "run", env_changes={"OMP_NUM_THREADS": "1"}, timeout_s=300)
    assert run.stopped_by != "timeout"
    assert not run.ok and run.returncode not in (0, None)
    notes = run.timeline.notes
    died = next(n["prefetch_died"] for n in notes if "prefetch_died" in n)
    assert died["thread"] == "ADSI prefetch thread"
    assert "corrupt record in batch 3" in died["cause"] and "SlowIterator.next" in died["frames"]
    assert any("prefetch_interrupted" in n for n in notes)
    # the JVM's own report of the uncaught exception is kept
    assert 'Exception in thread "ADSI prefetch thread"' in (tmp_path / "run" / "stderr.log").read_text()
    finding = diagnose(run.timeline)[0]   # the cause comes before the exit code it led to
    assert finding.kind == "prefetch-died"
    assert finding.severity == "error" and "corrupt record in batch 3" in finding.title
    assert "interrupted" in " ".join(finding.evidence)


@pytest.mark.jvm
@pytest.mark.slow
def test_the_guard_on_the_older_release(tmp_path):
    # DL4J 1.0.0-beta7 (tests/fixtures/java-compat): the same prefetcher, the same hang, the same guard
    job = compat_command()
    job[-2:] = ["0", "0", "", "broken-iterator"]   # seconds 0, no minimum, no stop file, the broken iterator
    run = profile_job(job, tmp_path / "beta7", env_changes={"OMP_NUM_THREADS": "1"}, timeout_s=300)
    assert run.stopped_by != "timeout"
    assert not run.ok and run.returncode not in (0, None)
    died = next(n["prefetch_died"] for n in run.timeline.notes if "prefetch_died" in n)
    assert died["thread"] == "ADSI prefetch thread" and "corrupt record in batch 3" in died["cause"]
    assert any("prefetch_interrupted" in n for n in run.timeline.notes)
    assert any(f.kind == "prefetch-died" for f in diagnose(run.timeline))


def test_prefetch_died_finding_from_hand_made_notes(tmp_path):
    lines = [{"type": "start", "t": 0, "pid": 1}, {"type": "sample", "t": 10},
             {"type": "note", "t": 20, "text": "x", "prefetch_died": {"thread": "AMDSI prefetch thread",
                                                                     "exception": "java.lang.RuntimeException: boom",
                                                                     "cause": "java.io.IOException: disk", "frames": "a.B.next(B.java:1)"}}]
    (tmp_path / "jvm-1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    findings = [f for f in diagnose(Timeline.load(tmp_path)) if f.kind == "prefetch-died"]
    assert len(findings) == 1 and "java.io.IOException: disk" in findings[0].title
    assert "did not find the training thread waiting" in " ".join(findings[0].evidence)
