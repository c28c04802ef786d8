"""A job pyd4j launched never outlives pyd4j, even when pyd4j is killed with SIGKILL (no cleanup
code runs then): the agent watches the pyd4j process and ends the job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tests.profile.conftest import fixture_command

pytestmark = [pytest.mark.jvm]


def _job_pid(run_dir, deadline: float) -> int:
    while time.monotonic() < deadline:
        for timeline in run_dir.glob("jvm-*.jsonl"):
            for line in timeline.read_text().splitlines():
                if '"type":"start"' in line.replace(" ", ""):
                    return int(json.loads(line)["pid"])
        time.sleep(0.2)
    raise AssertionError(f"the job never wrote its start line into {run_dir}")


@pytest.mark.parametrize("transport", ["file", "socket"])
def test_job_ends_when_pyd4j_is_killed(tmp_path, transport):
    run_dir = tmp_path / "run"
    cmd = fixture_command("healthy", 100_000, "-Xmx128m", sleep_ms=50)  # would run for over an hour
    script = textwrap.dedent(f"""
        from pyd4j.profile import profile_job
        profile_job({cmd!r}, {str(run_dir)!r}, transport={transport!r})
    """)
    pyd4j = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        job = _job_pid(run_dir, time.monotonic() + 120)
        assert psutil.pid_exists(job)
        os.kill(pyd4j.pid, signal.SIGKILL)          # no finally/atexit runs in pyd4j now
        pyd4j.wait(timeout=30)
        deadline = time.monotonic() + 30
        while psutil.pid_exists(job) and psutil.Process(job).status() != psutil.STATUS_ZOMBIE \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        alive = psutil.pid_exists(job) and psutil.Process(job).status() != psutil.STATUS_ZOMBIE
        assert not alive, f"job {job} still running after its pyd4j process was killed"
    finally:
        if pyd4j.poll() is None:
            pyd4j.kill()
        for p in psutil.process_iter(["cmdline"]):
            if p.info["cmdline"] and str(run_dir) in " ".join(p.info["cmdline"]):
                p.kill()
