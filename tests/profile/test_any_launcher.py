"""Real jobs started every way users start them, each JVM profiled in its own lane: a shell
command starting two JVMs, `mvn exec:java` (the job inside Maven's JVM), `mvn exec:exec` (Maven
as the launcher of a child JVM). Stopping pyd4j keeps the summary and the report and leaves no
process; silent local connections lose no sample; a full disk keeps what was written and says
what was lost; a wrong main class is named."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from pyd4j.jvm.classpath import PROJECT_ROOT
from pyd4j.profile import profile_job
from pyd4j.profile.perfetto import perfetto_trace
from pyd4j.profile.report import write_report
from pyd4j.profile.timeline import Timeline
from tests.profile.conftest import FIXTURES_JAR, fixture_command, idle_command

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

MAIN = "org.pyd4j.fixtures.MemoryJob"
CLI = "import sys; from pyd4j.cli import main; main(sys.argv[1:], prog_name='pyd4j')"


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _first_sample(run_dir: Path, deadline_s: float = 180.0) -> int:
    """Wait until a JVM of the run has written a sample; its pid."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for lane in run_dir.glob("jvm-*.jsonl"):
            lines = lane.read_text().splitlines()
            if any('"type":"sample"' in line for line in lines[1:]):
                return json.loads(lines[0])["pid"]
        time.sleep(0.1)
    raise AssertionError(f"no sample in {run_dir} within {deadline_s} s")


def _maven(*goals: str) -> list[str]:
    classifier = subprocess.run([sys.executable, "-m", "pyd4j.memory.machine", "--nd4j-classifier"],
                                capture_output=True, text=True, check=True).stdout.strip()
    return ["mvn", "-q", "-B", "-f", str(PROJECT_ROOT / "tests" / "fixtures" / "java" / "pom.xml"),
            f"-Dnd4j.classifier={classifier}", *goals]


def test_shell_command_starting_two_jvms_gives_two_lanes_and_keeps_the_users_tool_options(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Dpyd4j.test.kept=yes")
    train = shlex.join(fixture_command("healthy", 15, "-Xmx200m"))
    idle = shlex.join(idle_command(1500, "-Xmx64m"))
    run = profile_job(["bash", "-c", f"{idle} & {train}; wait"], tmp_path / "shell", timeout_s=300)
    assert run.returncode == 0, (run.run_dir / "stderr.log").read_text()[-2000:]
    assert len(run.lanes) == 2
    by_main = {t.jvm.main_class: t for t in run.lanes}
    assert sorted(by_main) == ["org.pyd4j.fixtures.Idle", MAIN]
    train_lane, idle_lane = by_main[MAIN], by_main["org.pyd4j.fixtures.Idle"]
    assert train_lane.jvm.primary and train_lane.iterations() == 15 and run.timeline is train_lane
    assert not idle_lane.jvm.primary and idle_lane.iterations() == 0
    assert (train_lane.limits()["heap_max"] >> 20, idle_lane.limits()["heap_max"] >> 20) == (200, 64)
    for t in run.lanes:
        assert t.jvm.role == "job" and t.end is not None and t.samples and t.jvm.parent_jvm is None
        assert "-Dpyd4j.test.kept=yes" in t.start["jvm_args"]           # the user's JAVA_TOOL_OPTIONS kept
        assert t.path.name == f"jvm-{t.start['pid']}.jsonl"
    meta = json.loads((run.run_dir / "run.json").read_text())
    assert sorted(j["pid"] for j in meta["jvms"]) == sorted(t.start["pid"] for t in run.lanes)
    assert meta["java_tool_options"].startswith("-Dpyd4j.test.kept=yes ")
    assert all(_gone(t.start["pid"]) for t in run.lanes)
    # the report: one lane per JVM in the plot, the table and the trace
    paths = write_report(run.run_dir)
    page = paths["html"].read_text()
    assert "JVMs of the run (2)" in page and "jvms_png" in paths
    assert all(f"<td>{t.start['pid']}</td>" in page for t in run.lanes)
    trace = perfetto_trace(run.lanes)
    names = [e for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert sorted(e["pid"] for e in names) == sorted(t.start["pid"] for t in run.lanes)


def test_maven_exec_java_profiles_the_job_inside_mavens_jvm(tmp_path):
    run = profile_job(_maven("exec:java", f"-Dexec.mainClass={MAIN}", "-Dexec.args=healthy 30 10"),
                      tmp_path / "mvn-java", timeout_s=900)  # Maven alone took 4 min to start the job at load 40
    assert run.returncode == 0, (run.run_dir / "stderr.log").read_text()[-3000:]
    (t,) = run.lanes
    assert t.start["command"].startswith("org.codehaus.plexus.classworlds.launcher.Launcher")
    assert t.jvm.launcher == "maven" and t.jvm.role == "job" and t.jvm.main_class == MAIN and t.name == MAIN
    assert t.iterations() == 30                                    # the hooks reach classes Maven loads
    assert any(s.get("javacpp_total") is not None for s in t.samples)
    # Maven ends its JVM itself after exec:java's thread: the timeline still ends with the end record,
    # and its last sample and the end record count the last iteration
    assert t.end is not None and t.end["reason"] == "exit" and t.end["iterations"] == 30
    assert t.samples[-1]["iterations"] == 30


def test_maven_exec_exec_is_the_launcher_and_its_child_jvm_the_job(tmp_path):
    child = f"-Xmx256m -cp %classpath {MAIN} healthy 25 10"
    run = profile_job(_maven("exec:exec", "-Dexec.executable=java", f"-Dexec.args={child}"), tmp_path / "mvn-exec",
                      timeout_s=400)
    assert run.returncode == 0, (run.run_dir / "stderr.log").read_text()[-3000:]
    roles = {t.jvm.role: t for t in run.lanes}
    assert sorted(roles) == ["job", "launcher"] and len(run.lanes) == 2
    maven, job = roles["launcher"], roles["job"]
    assert maven.jvm.launcher == "maven" and not maven.jvm.primary and maven.iterations() == 0
    assert job.jvm.primary and job.jvm.main_class == MAIN and job.iterations() == 25
    assert job.jvm.parent_jvm == maven.start["pid"]               # the child knows who started it
    assert run.timeline is job and Timeline.load(run.run_dir).start["pid"] == job.start["pid"]
    assert all(_gone(t.start["pid"]) for t in run.lanes)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stopping_profile_keeps_the_summary_and_the_report_and_leaves_no_process(tmp_path, sig, code):
    run_dir = tmp_path / "run"
    job = shlex.join(idle_command(3_600_000, "-Xmx64m"))  # would run for an hour
    pyd4j = subprocess.Popen([sys.executable, "-c", CLI, "profile", "--json", "--out", str(run_dir), "--",
                              "bash", "-c", job], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        jvm = _first_sample(run_dir)
        pyd4j.send_signal(sig)
        out, err = pyd4j.communicate(timeout=120)
    finally:
        if pyd4j.poll() is None:
            pyd4j.kill()
    assert pyd4j.returncode == code, err
    doc = json.loads(out)                                          # one JSON document, the partial run's
    assert doc["partial"] and doc["stopped_by"] == signal.Signals(sig).name and doc["samples"] >= 1
    assert "Traceback" not in err
    page = Path(doc["report"]["html"]).read_text()
    assert "Partial run" in page and signal.Signals(sig).name in page
    assert _gone(jvm)


def test_sigterm_to_tune_json_reports_the_partial_run(tmp_path):
    out_dir = tmp_path / "tune"
    job = shlex.join(idle_command(3_600_000, "-Xmx64m"))
    pyd4j = subprocess.Popen([sys.executable, "-c", CLI, "tune", "--json", "--out", str(out_dir), "--",
                              "bash", "-c", job], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        jvm = _first_sample(out_dir / "before")
        pyd4j.send_signal(signal.SIGTERM)
        out, err = pyd4j.communicate(timeout=120)
    finally:
        if pyd4j.poll() is None:
            pyd4j.kill()
    assert pyd4j.returncode == 143, err
    doc = json.loads(out)
    assert doc["partial"] and doc["stopped_by"] == "SIGTERM" and doc["stopped_in"] == "before"
    assert doc["before"]["stopped_by"] == "SIGTERM" and "after" not in doc
    assert Path(doc["report"]).exists() and "Partial run" in Path(doc["report"]).read_text()
    assert json.loads((out_dir / "tune.json").read_text())["partial"] is True
    assert _gone(jvm)


def test_silent_local_connections_before_the_agent_lose_no_sample(tmp_path):
    """A local process scans for the profiler's port and opens connections that never speak,
    before the job's JVM has started; the agent's stream must still be taken in full."""
    stop = threading.Event()
    held: list[socket.socket] = []

    def scanner() -> None:
        me = psutil.Process()
        while not stop.is_set():
            for c in me.net_connections(kind="tcp"):
                if c.status == psutil.CONN_LISTEN and c.laddr.ip == "127.0.0.1" and not held:
                    held.extend(socket.create_connection(("127.0.0.1", c.laddr.port)) for _ in range(3))
            time.sleep(0.01)

    thread = threading.Thread(target=scanner, daemon=True)
    thread.start()
    try:
        run = profile_job(idle_command(3000, "-Xmx64m"), tmp_path / "socket", transport="socket", interval_ms=20,
                          timeout_s=300)
    finally:
        stop.set()
        thread.join(timeout=5)
        for s in held:
            s.close()
    assert held, "the scanner never found the receiver's port"
    assert run.returncode == 0
    t = run.timeline
    assert t.end is not None and t.end["samples"] == len(t.samples) > 10  # every sample the agent wrote arrived


def test_full_disk_keeps_what_was_written_and_says_what_was_lost(tmp_path):
    """A real size limit on the job's files (ulimit -f: writes past 40 KiB fail as on a full disk)."""
    job = shlex.join(idle_command(8000, "-Xmx64m"))
    run_dir = tmp_path / "full"
    p = subprocess.run([sys.executable, "-c", CLI, "profile", "--json", "--interval", "50", "--out", str(run_dir), "--",
                        "bash", "-c", f"ulimit -f 40; exec {job}"], capture_output=True, text=True, timeout=400)
    assert "Traceback" not in p.stderr
    doc = json.loads(p.stdout)
    assert doc["exit_code"] == 0 and doc["partial"]                  # the job itself went on to its end
    assert p.returncode == 1                                          # ... but the run is not whole: never exit 0
    (lost,) = doc["write_errors"]
    assert lost["pid"] == doc["jvms"][0]["pid"] and "too large" in lost["error"].lower()
    assert lost["last_kept_t_ms"] and lost["lost_s"] > 0
    assert "could not be written" in lost["message"] and "the part before is kept" in lost["message"]
    assert doc["samples"] > 5 and (run_dir / doc["jvms"][0]["file"]).stat().st_size <= 40 * 1024
    assert "Timeline incomplete" in Path(doc["report"]["html"]).read_text()


def test_wrong_main_class_is_named_with_the_fix(tmp_path):
    cp = os.pathsep.join([str(FIXTURES_JAR)])
    p = subprocess.run([sys.executable, "-c", CLI, "profile", "--json", "--out", str(tmp_path / "typo"), "--",
                        "java", "-cp", cp, "org.pyd4j.fixtures.MemoryJbo"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    (crash,) = [f for f in doc["findings"] if f["kind"] == "crash"]
    assert "main class org.pyd4j.fixtures.MemoryJbo not found" in crash["title"]
    assert "-cp" in crash["fix"] and "Could not find or load main class" in crash["evidence"][0]
    assert "main class org.pyd4j.fixtures.MemoryJbo not found" in doc["startup_error"]


def test_tune_of_a_shell_launched_job_injects_the_flags_and_reports_before_after(tmp_path):
    from pyd4j.profile.tune import tune_job
    from pyd4j.units import parse_bytes

    job = shlex.join(fixture_command("healthy", 15, "-Xmx200m"))
    doc = tune_job(["bash", "-c", job], tmp_path / "tune", timeout_s=300)
    after = Timeline.load(doc["after"]["run_dir"])
    assert doc["after"]["exit_code"] == 0 and doc["after"]["iterations"] == 15
    got = after.start["jvm_args"]
    # the recommended flags reached the JVM the way the agent does, after it in JAVA_TOOL_OPTIONS; all
    # but -Xms, which the job's own smaller -Xmx would refuse
    for flag in doc["recommended"]:
        assert (flag in got) != flag.startswith("-Xms"), flag
    assert any(n.startswith("-Xms") and "not passed" in n for n in doc["notes"])
    agent = next(a for a in got if a.startswith("-javaagent:"))
    assert got.index(agent) < got.index(doc["recommended"][-1])
    # the job's own -Xmx200m on its command line wins over JAVA_TOOL_OPTIONS: said, not hidden
    xmx = parse_bytes(next(f for f in doc["recommended"] if f.startswith("-Xmx"))[4:])
    if abs(xmx - (200 << 20)) > 0.1 * xmx:
        assert any(n.startswith("JVM pid") and "command line" in n for n in doc["notes"])
    assert json.loads((tmp_path / "tune" / "tune.json").read_text())["recommended"] == doc["recommended"]
    tuned = write_report(doc["after"]["run_dir"])
    page = tuned["html"].read_text()
    assert "(tuned run)</h1>" in page and "Tuned run." in page and "Before / after" in page
    assert tuned["before_after_png"].read_bytes()[:4] == b"\x89PNG"
    assert all(f in page for f in doc["recommended"])
    first = write_report(doc["before"]["run_dir"])["html"].read_text()
    assert "First run of a tune" in first and "(tuned run)" not in first


def test_a_jvm_that_detaches_from_the_job_is_ended_with_it(tmp_path):
    """Like a Gradle daemon: started in its own session, it outlives the command that started it;
    the run ends it anyway (it reported in through its agent) and records it."""
    run_dir = tmp_path / "detached"
    idle = shlex.join(idle_command(3_600_000, "-Xmx64m"))
    reported = f"grep -qs '\"type\":\"start\"' {shlex.quote(str(run_dir))}/jvm-*.jsonl"
    script = f"setsid {idle} </dev/null >/dev/null 2>&1 & until {reported}; do sleep 0.1; done"
    run = profile_job(["bash", "-c", script], run_dir, timeout_s=300)
    assert run.returncode == 0 and run.stopped_by is None
    (t,) = run.lanes
    pid = t.start["pid"]
    meta = json.loads((run_dir / "run.json").read_text())
    assert pid in [p["pid"] for p in meta["ended_after_exit"]]
    deadline = time.monotonic() + 60
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(pid)
