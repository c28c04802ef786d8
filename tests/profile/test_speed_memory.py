"""`pyd4j tune --speed --memory`: the memory tune, then the speed tune with the memory tune's flags on
every run. The command's glue is checked with fake tunes (they isolate our logic: which flags reach
the speed tune, which exit code wins, one document); that the flags reach a launcher's JVM on every
speed run, and that a speed change's own -Xmx wins over them, with real JVMs."""

from __future__ import annotations

import json
import shlex

import pytest
from click.testing import CliRunner

from pyd4j.cli import main
from pyd4j.malloc import MALLOC_ENV
from pyd4j.profile.speed import Change, Setup, job_runner
from tests.profile.conftest import speed_job_command

MEMORY_FLAGS = ["-Xmx300m", "-XX:MaxDirectMemorySize=200m"]


def _fake_memory_tune(exit_code: int):
    def tune_job(job, out_dir=None, **kw):
        return {"command": list(job), "recommended": MEMORY_FLAGS, "recommended_environment": MALLOC_ENV,
                "reasons": {}, "exit_code": exit_code,
                "outcome": "verified" if exit_code == 0 else "not-verified", "notes": []}
    return tune_job


def test_memory_without_speed_is_refused():
    out = CliRunner().invoke(main, ["tune", "--memory", "--", "java", "-cp", ".", "com.acme.Train"])
    assert out.exit_code == 2 and "--memory goes with --speed" in out.output


def test_total_with_speed_alone_names_memory():
    out = CliRunner().invoke(main, ["tune", "--speed", "--total", "1g", "--", "java", "-cp", ".", "com.acme.Train"])
    assert out.exit_code == 2 and "add --memory" in out.output


def test_fake_tunes_speed_runs_on_the_memory_flags_and_its_exit_code_wins(monkeypatch, tmp_path):
    seen = {}

    def tune_speed(job, out_dir=None, **kw):
        seen.update(kw, out_dir=out_dir)
        return {"out": str(out_dir), "probe": {"iterations_per_s": 5.0}, "base_jvm_options": kw["base_jvm"],
                "speed": {"verdict": "no verified change", "changes": []}, "exit_code": 3}
    monkeypatch.setattr("pyd4j.profile.tune.tune_job", _fake_memory_tune(0))
    monkeypatch.setattr("pyd4j.profile.speed.tune_speed", tune_speed)
    monkeypatch.setattr("pyd4j.commands._tune_output.report", lambda doc, side: None)
    out = CliRunner().invoke(main, ["tune", "--speed", "--memory", "--json", "--out", str(tmp_path / "t"),
                                    "--", "java", "-cp", ".", "com.acme.Train"])
    doc = json.loads(out.output)
    assert seen["base_jvm"] == MEMORY_FLAGS and str(seen["out_dir"]).endswith("speed")
    assert seen["base_env"] == MALLOC_ENV
    assert out.exit_code == 3 and doc["exit_code"] == 3 and doc["memory_exit_code"] == 0
    assert doc["recommended"] == MEMORY_FLAGS and doc["speed"]["verdict"] == "no verified change"
    assert doc["speed_tune"]["base_jvm_options"] == MEMORY_FLAGS


def test_fake_tunes_no_speed_tune_when_memory_is_not_verified(monkeypatch, tmp_path):
    def tune_speed(*a, **kw):
        raise AssertionError("the speed tune must not run on unverified memory flags")
    monkeypatch.setattr("pyd4j.profile.tune.tune_job", _fake_memory_tune(3))
    monkeypatch.setattr("pyd4j.profile.speed.tune_speed", tune_speed)
    monkeypatch.setattr("pyd4j.commands._tune_output.report", lambda doc, side: None)
    out = CliRunner().invoke(main, ["tune", "--speed", "--memory", "--json", "--", "java", "-cp", ".", "com.acme.Train"])
    doc = json.loads(out.output)
    assert out.exit_code == 3 and doc["speed"] is None and any("speed tune was not run" in n for n in doc["notes"])


@pytest.mark.jvm
@pytest.mark.slow
def test_speed_runs_carry_the_memory_flags_through_a_launcher(tmp_path):
    java = shlex.join(speed_job_command("mlp", "2"))
    run = job_runner(["bash", "-c", java], tmp_path, base_jvm=MEMORY_FLAGS, base_env=MALLOC_ENV)
    plain = run(Setup(), "before")
    heap = Change("heap", "max heap 300 MiB", "-Xmx600m", "", jvm=("-Xmx600m",), replaces_memory_flags=True)
    bigger = run(Setup((heap,)), "after")
    # (how fast it trained does not matter here: on a busy machine a short run may not measure a speed)
    assert plain.timeline is not None and bigger.timeline is not None, (plain.why, bigger.why)
    assert "fail" not in plain.why + bigger.why and "exit code" not in plain.why + bigger.why
    # the JVM the shell started got the memory tune's flags (JAVA_TOOL_OPTIONS), and its heap is that size
    args = plain.timeline.start["jvm_args"]
    assert all(f in args for f in MEMORY_FLAGS), args
    assert plain.timeline.limits()["heap_max"] <= 300 << 20
    # and the environment those flags assume: glibc's mmap threshold fixed, as the agent read it in the JVM
    assert plain.timeline.nd4j_settings()["malloc_mmap_threshold"] == MALLOC_ENV["MALLOC_MMAP_THRESHOLD_"]
    # a speed change's own -Xmx comes after them and wins
    assert bigger.timeline.limits()["heap_max"] > 300 << 20
