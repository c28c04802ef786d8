"""pyd4j tune --speed on a real DL4J job with one bad setting (tests/fixtures/java SpeedJob: an MLP whose
training loop calls System.gc() after every iteration). No timed assertion: the verdict's structure,
and, where the A/B decided, that the change kept is the bad setting undone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyd4j.jvm.classpath import classpath
from pyd4j.profile.speed import tune_speed
from tests.profile.conftest import FIXTURES_JAR

pytestmark = [pytest.mark.jvm, pytest.mark.slow]


def _job() -> list[str]:
    if not FIXTURES_JAR.exists():
        pytest.fail(f"{FIXTURES_JAR} not built; run `make setup`")
    cp = os.pathsep.join([str(FIXTURES_JAR), *classpath()[1:]])
    return ["java", "-cp", cp, "org.pyd4j.fixtures.SpeedJob", "mlp", "3", "system-gc=1"]


def test_tune_speed_finds_the_jobs_system_gc_calls(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    doc = tune_speed(_job(), tmp_path / "tune", max_runs=5, only={"explicit_gc"})
    probe = doc["probe"]
    # the agent reported ND4J's settings at the first fit(), as the job and its environment made them
    assert probe["nd4j"]["max_threads"] == 1 and probe["nd4j"]["training_workspace_mode"] == "ENABLED"
    assert probe["nd4j"]["periodic_gc"] is False   # CpuMemoryManager: never on with the CPU backend
    # a full collection after each iteration shows as System.gc() time, and the change that undoes it is tried
    assert probe["explicit_gc_share"] > 0.05
    s = doc["speed"]
    assert [t["setting"] for t in s["tried"]] == ["explicit_gc"], s.get("note")
    trial = s["tried"][0]
    assert trial["verdict"] in ("faster", "slower", "same", "undecided")
    assert len(trial["before_iterations_per_s"]) >= 4 and len(trial["after_iterations_per_s"]) >= 4
    # every run after the first is counted (a stalled run of the job as it is is run once more)
    assert s["extra_runs"] >= len(trial["before_iterations_per_s"]) + len(trial["after_iterations_per_s"])
    if trial["verdict"] == "faster":
        assert doc["exit_code"] == 0 and s["verdict"] == "verified"
        assert [c["setting"] for c in s["changes"]] == ["explicit_gc"]
        assert s["paste"]["jvm_options"] == ["-XX:+DisableExplicitGC"]
        assert s["interval"][0] > 1.0
    else:
        assert doc["exit_code"] == 3 and s["verdict"] == "no verified change" and s["changes"] == []
    # the after runs really ran with the flag (the JVM's own command line, from run.json)
    after_dirs = [r["run_dir"] for r in s["run_log"] if r["side"] == "after"]
    assert after_dirs and all("-XX:+DisableExplicitGC" in json.loads((Path(d) / "run.json").read_text())["command"]
                              for d in after_dirs)


def test_tune_speed_cli_refuses_a_job_that_does_not_train(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pyd4j.cli", "tune", "--speed", "--json", "--out", str(tmp_path / "t"),
                          "--", "java", "-cp", str(FIXTURES_JAR), "org.pyd4j.fixtures.NoSuchClass"],
                         capture_output=True, text=True, timeout=300)
    doc = json.loads(out.stdout)
    assert out.returncode == 1 and doc["exit_code"] == 1 and "did not train" in doc["error"]
