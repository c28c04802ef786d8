"""No measurements is never success: a run the agent could not sample is an error for `profile`,
and `tune` refuses to recommend flags from it (and runs nothing more)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pyd4j.profile.diagnose import diagnose
from pyd4j.profile.timeline import Timeline
from tests.profile.conftest import fixture_command

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

_CLI = "import sys; from pyd4j.cli import main; main(sys.argv[1:], prog_name='pyd4j')"
# An agent argument the agent refuses: it does not start, and the job runs unprofiled (and fine).
UNSAMPLED = "-Dpyd4j.agent=live=-1"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _CLI, *args], capture_output=True, text=True, timeout=600)


def test_profile_with_zero_samples_is_an_error(tmp_path):
    p = cli("profile", "--json", "--no-report", "--out", str(tmp_path / "p"), "--",
            *fixture_command("healthy", 5, "-Xmx128m", UNSAMPLED))
    assert p.returncode == 1, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["exit_code"] == 0  # the job itself was fine
    assert [f["kind"] for f in doc["findings"]] == ["no-data"]
    assert "[pyd4j agent]" in (tmp_path / "p" / "stderr.log").read_text()  # why: the agent said it did not start
    t = Timeline.load(tmp_path / "p")
    assert not t.samples and diagnose(t)[0].severity == "error"


def test_tune_refuses_to_recommend_from_no_measurements(tmp_path):
    p = cli("tune", "--json", "--out", str(tmp_path / "t"), "--", *fixture_command("healthy", 5, "-Xmx128m", UNSAMPLED))
    assert p.returncode == 1, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["ok"] is False and "no measurements" in doc["error"] and "recommended" not in doc
    assert not (tmp_path / "t" / "after").exists()


def test_tune_speed_on_a_job_that_cannot_start_says_what_the_job_said(tmp_path):
    """A main class that does not exist: nothing to measure (exit 1), and the error carries the
    JVM's own words, not only its exit code."""
    p = cli("tune", "--speed", "--json", "--out", str(tmp_path / "s"), "--", "java", "-cp", str(tmp_path), "NoSuchTrainer")
    assert p.returncode == 1, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["speed"]["verdict"] == "nothing to measure" and doc["speed"]["changes"] == []
    assert "NoSuchTrainer" in doc["error"] and "ClassNotFoundException" in doc["error"]
    assert "Picked up" not in doc["error"]
