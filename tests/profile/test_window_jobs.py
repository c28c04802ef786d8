"""Measurement windows on real jobs in real JVMs: the agent ends a long DL4J job cleanly at its window and
the run says "stopped at the window", never a failure (profile, report, tune, exit codes); --timeout the
same; `tune --from` recommends from a run without starting the job; a signal to `tune --json` still
prints one JSON document; nothing the job started outlives it. No timed assertion: iterations and events."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pyd4j.malloc import MALLOC_ENV
from pyd4j.profile import window
from pyd4j.profile.launch import profile_job
from pyd4j.profile.timeline import Timeline
from pyd4j.profile.window import AUTO, RunWindow, parse_window
from tests.profile.conftest import fixture_command

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

_CLI = "import sys; from pyd4j.cli import main; main(sys.argv[1:], prog_name='pyd4j')"
LONG = 100_000   # iterations: hours at the jobs' pace; every run here ends at its window, its timeout or a signal


def pyd4j(*args: str, timeout: float = 900) -> tuple[int, dict, str]:
    p = subprocess.run([sys.executable, "-c", _CLI, *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, json.loads(p.stdout) if p.stdout.strip() else {}, p.stderr


def long_job(mode: str = "healthy", *jvm: str, sleep_ms: int = 1, iterations: int = LONG, heap: str = "-Xmx256m"
             ) -> list[str]:
    return fixture_command(mode, iterations, heap, *jvm, sleep_ms=sleep_ms)


def running_with(marker: str) -> list[psutil.Process]:
    """Processes whose command line holds `marker` (a job's unique argument)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if marker in " ".join(p.info["cmdline"] or []) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def test_profile_window_ends_the_job_at_its_iteration_as_asked_and_tune_from_reads_it(tmp_path):
    run_dir = tmp_path / "run"
    rc, doc, err = pyd4j("profile", "--json", "--no-report", "--window", "60", "--out", str(run_dir), "--",
                         *long_job(iterations=LONG + 1, heap="-Xmx1g"))
    assert rc == 0, err[-2000:]
    assert doc["stopped_by"] == "window" and doc["stopped_as_asked"] is True and doc["iterations"] == 60
    assert not {f["kind"] for f in doc["findings"]} & {"crash", "killed", "killed-signal", "native-crash"}
    t = Timeline.load(run_dir)
    assert t.window["n"] == 60 and t.window["reason"] == "iterations" and t.end["reason"] == "window"
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["returncode"] == 0 and meta["left_running"] == [] and meta["window"]["spec"] == "60 iterations"
    # `pyd4j report` says how it ended, and exits 0
    p = subprocess.run([sys.executable, "-c", _CLI, "report", str(run_dir)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "as asked: not a failure" in p.stdout
    # tune --from: 60 iterations are too few to show the memory flat, so no limit goes below what the run had
    before = sorted(os.listdir(run_dir))
    rc, tuned, err = pyd4j("tune", "--json", "--from", str(run_dir))
    assert rc == 3 and tuned["outcome"] == "not-verified" and tuned["from"] == str(run_dir), err[-2000:]
    assert "-Xmx1g" in tuned["recommended"] and "kept at the job's own" in tuned["reasons"]["-Xmx1g"]
    assert any("not sized for the whole job" in why and ("rule a leak out" in why or "not shown flat" in why)
               for why in tuned["not_verified_because"]), tuned["not_verified_because"]
    assert sorted(os.listdir(run_dir)) == before   # no job was started, nothing written there
    rc, refused, _ = pyd4j("tune", "--json", "--from", str(run_dir), "--speed")
    assert rc == 2 and refused["error"].startswith("--speed needs runs of the job")


def test_tune_from_a_completed_run_recommends_for_the_whole_job(healthy_run):
    rc, doc, err = pyd4j("tune", "--json", "--from", str(healthy_run.run_dir))
    assert rc == 0 and doc["outcome"] == "recommended", (err[-2000:], doc.get("not_verified_because"))
    assert doc["before"]["scope"]["whole_job"] and doc["before"]["scope"]["ended"] == "completed"
    heap = next(a for a in doc["recommended"] if a.startswith("-Xmx"))
    assert "kept at the job's own" not in doc["reasons"][heap]
    # the run left glibc's mmap threshold to move (its JVM's environment, as the agent read it): the
    # flags come with the environment they assume
    assert healthy_run.timeline.nd4j_settings()["malloc_mmap_threshold"] == ""
    assert doc["recommended_environment"] == MALLOC_ENV


def test_stop_file_ends_the_job_at_the_next_iteration(tmp_path):
    stop = tmp_path / "stop"

    def ask(sample: dict) -> None:
        if (sample.get("iterations") or 0) >= 30:
            stop.touch()
    run = profile_job(long_job("healthy", f"-Dpyd4j.agent=stop_file={stop}", iterations=LONG + 2), tmp_path / "run",
                      on_sample=ask, timeout_s=600)
    assert run.stopped_by == "window" and run.returncode == 0 and run.stopped_as_asked
    assert run.timeline.window["reason"] == "requested" and 30 <= run.timeline.iterations() < LONG


def test_nothing_the_job_started_outlives_it(tmp_path):
    # a child started as the job ends, one in a session of its own, and one still running at --timeout
    ended = profile_job(["bash", "-c", "(sleep 3141 &); setsid sleep 3142 & sleep 0.5; exit 0"], tmp_path / "a")
    assert ended.returncode == 0 and not running_with("sleep 3141") and not running_with("sleep 3142")
    meta = json.loads((tmp_path / "a" / "run.json").read_text())
    assert meta["left_running"] == []
    assert {"sleep 3141", "sleep 3142"} <= {e["name"] for e in meta["ended_after_exit"]}
    cut = profile_job(["bash", "-c", "setsid sleep 3143 & sleep 3144"], tmp_path / "b", timeout_s=2)
    assert cut.stopped_by == "timeout" and cut.stopped_as_asked
    assert not running_with("sleep 3143") and not running_with("sleep 3144")


def test_auto_window_tune_sizes_or_keeps_limits_and_verifies_for_its_window(tmp_path, monkeypatch):
    """A healthy job of hours, tuned with the auto window (shortened here: 25 s of training at least, 60 at
    most; live points every second): both runs end at their window; flags are sized from the window when
    its memory was flat (verified for the window, exit 0), else the limits stay at the job's own (exit 3)."""
    from pyd4j.profile.tune import tune_job

    monkeypatch.setattr(window, "MEMORY_MIN_S", 25.0)
    monkeypatch.setattr(window, "MEMORY_MAX_S", 60.0)
    job = fixture_command("healthy", LONG + 3, "-Xmx1g", "-Dpyd4j.agent=live=1,live_share=0.2", sleep_ms=5)
    doc = tune_job(job, tmp_path / "tune", window=AUTO)
    before, after = doc["before"], doc["after"]
    assert before["stopped_by"] == "window" and after["stopped_by"] == "window"
    assert doc["outcome"] != "rerun-failed" and after["iterations"] >= before["iterations"]
    heap = next(a for a in doc["recommended"] if a.startswith("-Xmx"))
    if before["scope"]["whole_job"]:
        assert heap != "-Xmx1g" and doc["exit_code"] == 0 and doc["verified_for"].startswith("the window: ")
        assert any("--verify-full" in n for n in doc["notes"])
    else:
        assert heap == "-Xmx1g" and "kept at the job's own" in doc["reasons"][heap]
        assert doc["exit_code"] == 3 and any("not sized for the whole job" in w for w in doc["not_verified_because"])


def test_a_leak_in_the_window_keeps_the_jobs_limits(tmp_path, monkeypatch):
    from pyd4j.profile.tune import tune_job

    job = long_job("leak", "-Dpyd4j.agent=live=1,live_share=0.2", sleep_ms=100, iterations=LONG + 4, heap="-Xmx1g")
    doc = tune_job(job, tmp_path / "tune", window=AUTO, verify=False)
    assert doc["before"]["stopped_by"] == "window" and "leak-offheap" in doc["before"]["findings"]
    assert "a leak was found" in doc["before"]["window"]["decision"]["reason"]
    assert doc["outcome"] == "not-verified" and doc["exit_code"] == 3
    assert "-Xmx1g" in doc["recommended"] and not doc["before"]["scope"]["whole_job"]


def test_a_job_calling_system_gc_every_iteration_still_gets_a_heap_verdict(tmp_path):
    """The job's own full collections give off-heap points but never heap ones (its heap still holds the
    bookkeeping of what they freed): they postponed the agent's inspections for good, and every tune of
    such a job said "0 live points ... not sized for the whole job"."""
    from pyd4j.jvm.classpath import classpath
    from pyd4j.profile.leak_verdicts import leak_verdicts
    from tests.profile.conftest import FIXTURES_JAR

    cp = os.pathsep.join([str(FIXTURES_JAR), *classpath()[1:]])
    job = ["java", "-Xmx1g", "-cp", cp, "org.pyd4j.fixtures.LongJob", "bad", str(LONG + 5), "hidden=64", "pause=20"]
    rc, doc, err = pyd4j("profile", "--json", "--no-report", "--window", "1500", "--out", str(tmp_path / "run"), "--", *job)
    assert rc == 0 and doc["stopped_by"] == "window", err[-2000:]
    t = Timeline.load(tmp_path / "run")
    assert [p for p in t.live_points if p["trigger"] == "full-gc"], "the job's System.gc() calls gave no points"
    assert len([p for p in t.live_points if p["trigger"] == "inspection"]) >= 5
    assert all(v.status != "not-enough-data" for v in leak_verdicts(t)), [v.reason for v in leak_verdicts(t)]
    # and under the small heap a tune's re-run gives it (a collection every few ms): the deallocators are never
    # idle, so its inspections count undrained with their bookkeeping measured (0 usable points before)
    small = [a if a != "-Xmx1g" else "-Xmx256m" for a in job]
    small[small.index("pause=20")] = "pause=0"
    rc, doc, err = pyd4j("profile", "--json", "--no-report", "--window", "3000", "--out", str(tmp_path / "small"), "--",
                         *small)
    assert rc == 0 and doc["stopped_by"] == "window", err[-2000:]
    t = Timeline.load(tmp_path / "small")
    assert any(p.get("job_collected") for p in t.live_points if p["trigger"] == "inspection")
    assert all(v.status != "not-enough-data" for v in leak_verdicts(t)), [v.reason for v in leak_verdicts(t)]


def test_timeout_ends_are_not_failures(tmp_path):
    rc, doc, err = pyd4j("tune", "--json", "--timeout", "20", "--window", "full", "--out", str(tmp_path / "t"), "--",
                         *long_job(sleep_ms=5, iterations=LONG + 5))
    assert rc == 3 and doc["outcome"] == "not-verified", (doc.get("outcome"), err[-2000:])
    for side in ("before", "after"):
        assert doc[side]["stopped_by"] == "timeout" and doc[side]["stopped_as_asked"], doc[side]
        assert not {"crash", "killed", "killed-signal"} & set(doc[side]["findings"])


def _stop_when_training(cmd: list[str], out: Path, marker: str) -> tuple[int, str, str]:
    """Start a pyd4j command, SIGTERM it once its job has trained, return (exit, stdout, stderr); no job process
    may be left."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and p.poll() is None:
        lanes = list(out.rglob("jvm-*.jsonl"))
        if lanes and any('"iterations":' in line and '"iterations":0' not in line
                         for line in lanes[0].read_text(errors="replace").splitlines() if '"sample"' in line):
            break
        time.sleep(1)
    p.send_signal(signal.SIGTERM)
    stdout, stderr = p.communicate(timeout=120)
    assert not running_with(marker), "a process of the job outlived the tune"
    return p.returncode, stdout, stderr


@pytest.mark.parametrize("speed", [False, True])
def test_signal_to_tune_json_prints_one_partial_document(tmp_path, speed):
    iterations = LONG + 6 + int(speed)
    out = tmp_path / "tune"
    cmd = [sys.executable, "-c", _CLI, "tune", "--json", *(["--speed"] if speed else []), "--out", str(out), "--",
           *long_job(sleep_ms=5, iterations=iterations)]
    rc, stdout, stderr = _stop_when_training(cmd, out, f"MemoryJob healthy {iterations}")
    assert rc == 143, stderr[-2000:]
    doc = json.loads(stdout)
    assert doc["partial"] is True and doc["stopped_by"] == "SIGTERM" and doc["exit_code"] == 143
    if speed:
        assert doc["speed"]["verdict"] == "stopped" and doc["speed"]["changes"] == []


def test_windowed_speed_runs_each_end_at_their_window(tmp_path):
    from pyd4j.profile.speed import tune_speed

    job = long_job(sleep_ms=1, iterations=LONG + 8)
    doc = tune_speed(job, tmp_path / "speed", window=parse_window("40"), only={"omp_wait_policy"}, max_runs=4)
    assert doc["window"]["text"] == "40 iterations"
    runs = doc["speed"]["run_log"]
    assert len(runs) >= 1 + 8 or doc["speed"]["tried"][0]["verdict"] in ("broken",)
    for r in runs:
        t = Timeline.load(r["run_dir"])
        assert t.meta["stopped_by"] == "window" and t.iterations() == 40, r
    assert all(r["iterations_per_s"] for r in runs if r["ok"])
    assert RunWindow(parse_window("40")).agent_options(Path("x")) == ["window_iterations=40"]
