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
from tests.profile.conftest import FIXTURES_JAR, speed_job_command

pytestmark = [pytest.mark.jvm, pytest.mark.slow]


# What an A/B of a change that runs says of its speed; "broken" (a run of the change failed) is not one of them.
# "futile": undecided after the least runs with an estimate not above 1, so more runs could not make it worth keeping
# (pyd4j.profile.ab.futile; tune_speed stops for futility by default): MKL not faster on this machine, say.
SPEED_VERDICTS = ("faster", "slower", "same", "futile", "undecided")


def _job() -> list[str]:
    return speed_job_command("mlp", "3", "system-gc=1")


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
    assert trial["verdict"] in SPEED_VERDICTS
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


def test_tune_speed_tries_the_nd4j_build_for_this_cpu_and_checks_it_loaded(tmp_path, monkeypatch):
    """A job whose class path holds only the generic nd4j-native build (the plain dependency): tune
    --speed tries the build for this CPU through the agent (native_jar=), the job's class path
    unchanged, and every run says which library ND4J really loaded."""
    from pyd4j.memory.machine import best_nd4j_classifier
    from pyd4j.profile.nd4j_build import without_builds

    best = best_nd4j_classifier()
    if best == "linux-x86_64":
        pytest.skip("this CPU runs only the generic nd4j-native build: there is no other build to try")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    generic_only = without_builds(classpath()[1:], keep="linux-x86_64")
    job = ["java", "-cp", os.pathsep.join([str(FIXTURES_JAR), *generic_only]), "org.pyd4j.fixtures.SpeedJob", "mlp", "3"]
    doc = tune_speed(job, tmp_path / "tune", max_runs=4, only={"nd4j_build"})
    assert "/linux-x86_64/" in doc["probe"]["nd4j"]["native_library"], doc["probe"]["nd4j"]
    s = doc["speed"]
    (trial,) = s["tried"]
    assert (trial["setting"], trial["after"]) == ("nd4j_build", best), s["tried"]
    assert trial["verdict"] in SPEED_VERDICTS, trial   # never "broken": the build loaded
    for r in s["run_log"]:
        from pyd4j.profile.timeline import Timeline

        loaded = Timeline.load(r["run_dir"]).nd4j_settings()
        assert f"/{best if r['side'] == 'after' else 'linux-x86_64'}/" in loaded["native_library"], (r, loaded)
        # the job's own class path was not touched: the build came from the agent
        command = json.loads((Path(r["run_dir"]) / "run.json").read_text())["command"]
        assert f"-{best}.jar" not in command[command.index("-cp") + 1]
    if trial["verdict"] == "faster":
        assert s["paste"]["maven"] and f"<classifier>{best}</classifier>" in s["paste"]["maven"][0]
    else:
        assert doc["exit_code"] == 3 and s["changes"] == []


def test_tune_speed_tries_mkl_for_nd4js_blas_and_checks_it_was_called(tmp_path, monkeypatch):
    """The same job runs OpenBLAS (ND4J's default); tune --speed tries MKL in its place (JavaCPP's
    org.bytedeco.openblas.load=mkl_rt, MKL's jar added by the agent) and every run says which BLAS
    ND4J's calls went to."""
    from pyd4j.profile.nd4j_build import find_mkl, javacpp_version
    from pyd4j.profile.timeline import Timeline

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    job = _job()[:-1]   # no System.gc() after each iteration: the BLAS is the only thing changed
    doc = tune_speed(job, tmp_path / "tune", max_runs=4, only={"blas"})
    nd4j = doc["probe"]["nd4j"]
    assert nd4j["blas"] == "openblas" and "libopenblas_nolapack" in nd4j["blas_library"], nd4j
    jar = find_mkl(javacpp_version(nd4j["blas_library"]))
    assert jar is not None, f"MKL's redist jar is not in the local Maven repository: run `make setup`; {doc['probe']}"
    s = doc["speed"]
    (trial,) = s["tried"]
    assert trial["setting"] == "blas" and trial["after"].startswith("MKL"), s["tried"]
    assert trial["verdict"] in SPEED_VERDICTS, trial   # never "broken": MKL was called
    for r in s["run_log"]:
        loaded = Timeline.load(r["run_dir"]).nd4j_settings()
        assert loaded["blas"] == ("mkl" if r["side"] == "after" else "openblas"), (r, loaded)
        command = json.loads((Path(r["run_dir"]) / "run.json").read_text())["command"]
        assert ("-Dorg.bytedeco.openblas.load=mkl_rt" in command) == (r["side"] == "after")
    if trial["verdict"] == "faster":
        assert s["paste"]["jvm_options"] == ["-Dorg.bytedeco.openblas.load=mkl_rt"]
        assert "<classifier>linux-x86_64-redist</classifier>" in s["paste"]["maven"][0]
