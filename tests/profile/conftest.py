"""Fixture jobs (tests/fixtures/java, built by `make setup`) run under the agent, once per session."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from pyd4j.jvm.classpath import PROJECT_ROOT, classpath

FIXTURES_JAR = PROJECT_ROOT / "tests" / "fixtures" / "java" / "target" / "pyd4j-fixtures.jar"
CORPUS_SOURCE = PROJECT_ROOT / "tests" / "fixtures" / "java" / "src" / "main" / "java" / "org" / "pyd4j" / "fixtures" / "CorpusJob.java"
COMPAT_TARGET = PROJECT_ROOT / "tests" / "fixtures" / "java-compat" / "target"
# The corpus asks the agent for live-set points more often than its default (every 2 s, up to 5% of
# the run in those pauses) so that a verdict is reached in about a minute even on a loaded machine.
CORPUS_AGENT = "-Dpyd4j.agent=live=2,live_share=0.05"
HEALTHY_MIN_S = 60
DEADLINE_S = 600  # generous: the jobs stop on events (enough evidence), this only bounds a broken run


def corpus_command(job: str, *jvm: str, seconds: int = 0, min_iterations: int = 0, stop: Path | None = None) -> list[str]:
    """`java <jvm> -cp fixtures:ND4J org.pyd4j.fixtures.CorpusJob job seconds minIterations 1 [stop]` (one ND4J thread)."""
    if not FIXTURES_JAR.exists():
        pytest.skip(f"{FIXTURES_JAR} not built; run `make setup`")
    cp = os.pathsep.join([str(FIXTURES_JAR), *classpath()[1:]])
    return ["java", *jvm, "-cp", cp, "org.pyd4j.fixtures.CorpusJob", job, str(seconds), str(min_iterations), "1",
            *([str(stop)] if stop else [])]


def speed_job_command(*args: str) -> list[str]:
    """tests/fixtures/java SpeedJob with these arguments (network, seconds, options), on pyd4j's class path."""
    if not FIXTURES_JAR.exists():
        pytest.fail(f"{FIXTURES_JAR} not built; run `make setup`")
    cp = os.pathsep.join([str(FIXTURES_JAR), *classpath()[1:]])
    return ["java", "-cp", cp, "org.pyd4j.fixtures.SpeedJob", *args]


def compat_command(*jvm: str, seconds: int = 0, stop: Path | None = None) -> list[str]:
    """The healthy job built against the older DL4J release (tests/fixtures/java-compat), its own classpath."""
    jar = COMPAT_TARGET / "pyd4j-compat-fixture.jar"
    if not jar.exists():
        pytest.skip(f"{jar} not built; run `make setup`")
    cp = os.pathsep.join([str(jar), *sorted(str(p) for p in (COMPAT_TARGET / "lib").glob("*.jar"))])
    return ["java", *jvm, "-cp", cp, "org.pyd4j.compat.CompatJob", str(seconds), "0", *([str(stop)] if stop else [])]


def leak_site_line(job: str) -> int:
    """The line of CorpusJob.java marked `LEAK SITE <job>`: where the kept arrays are allocated."""
    for number, line in enumerate(CORPUS_SOURCE.read_text().splitlines(), start=1):
        if re.search(rf"LEAK SITE {re.escape(job)}$", line.strip()):
            return number
    raise AssertionError(f"no 'LEAK SITE {job}' marker in {CORPUS_SOURCE}")


@dataclass
class Stopper:
    """on_sample callback: once `enough(timeline)` holds (checked every few seconds, after `min_s`),
    run `before_stop` and create the stop file the job waits for."""

    run_dir: Path
    stop: Path
    enough: Callable
    min_s: float = 0.0
    before_stop: Callable | None = None
    started: float = field(default_factory=time.monotonic)
    checked: float = 0.0

    def __call__(self, sample: dict) -> None:
        from pyd4j.profile.timeline import Timeline

        now = time.monotonic()
        if self.stop.exists() or now - self.checked < 3 or now - self.started < self.min_s:
            return
        self.checked = now
        t = Timeline.load(self.run_dir)
        if self.enough(t):
            if self.before_stop:
                self.before_stop(t)
            self.stop.touch()


def verdicts_reached(t) -> bool:
    from pyd4j.profile.leak_verdicts import leak_verdicts

    return all(v.status != "not-enough-data" for v in leak_verdicts(t))


def offheap_leak_found(t) -> bool:
    from pyd4j.profile.leak_verdicts import leak_verdicts

    return any(v.status == "leak" for v in leak_verdicts(t)[1:])


def run_concurrently(jobs: dict[str, Callable[[], object]]) -> dict[str, object]:
    """Call each job in its own thread (each starts and watches one JVM); results (or exceptions) by name.
    ND4J gets one OpenMP thread per JVM: several JVMs share the machine's cores."""
    results: dict[str, object] = {}
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        def call(name: str, fn: Callable[[], object]) -> None:
            try:
                results[name] = fn()
            except BaseException as err:  # noqa: BLE001 - reported by the test that reads it
                results[name] = err

        threads = [threading.Thread(target=call, args=item, daemon=True) for item in jobs.items()]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    return results


def histogram_total(pid: int, run_dir: Path) -> tuple[float, list[tuple[int, int]]]:
    """The reference live heap, as `jcmd` measures it: `jcmd <pid> GC.run`, then twice, each time once
    ND4J's and JavaCPP's deallocators have freed what the previous collection released (the agent's
    next drained live point says so; before that the bookkeeping of arrays that just died is still
    reachable and a histogram counts it), `jcmd <pid> GC.class_histogram`.
    Returns (epoch ms before the first histogram, (Total bytes, bookkeeping bytes) of each)."""
    from pyd4j.profile.histogram import read_histogram
    from pyd4j.profile.timeline import Timeline

    def after_deallocators(since: float) -> None:
        deadline = time.monotonic() + 300
        while not any(p["t"] >= since and p.get("offheap_drained") for p in Timeline.load(run_dir).live_points):
            assert time.monotonic() < deadline, "no drained live point after a jcmd collection"
            time.sleep(1)

    since = time.time() * 1000
    subprocess.run(["jcmd", str(pid), "GC.run"], check=True, capture_output=True, timeout=120)
    first, totals = None, []
    for _ in range(2):
        after_deallocators(since)
        since = time.time() * 1000
        first = first or since
        out = subprocess.run(["jcmd", str(pid), "GC.class_histogram"], check=True, capture_output=True, text=True,
                             timeout=120).stdout
        totals.append(read_histogram(out))
    return first, totals


def fixture_command(mode: str, iterations: int, *jvm: str, sleep_ms: int = 10) -> list[str]:
    """`java <jvm> -cp fixtures:ND4J org.pyd4j.fixtures.MemoryJob mode iterations sleep`."""
    if not FIXTURES_JAR.exists():
        pytest.skip(f"{FIXTURES_JAR} not built; run `make setup`")
    cp = os.pathsep.join([str(FIXTURES_JAR), *classpath()[1:]])
    return ["java", *jvm, "-cp", cp, "org.pyd4j.fixtures.MemoryJob", mode, str(iterations), str(sleep_ms)]


def idle_command(millis: int, *jvm: str) -> list[str]:
    """`java <jvm> -cp fixtures org.pyd4j.fixtures.Idle millis`: a real JVM without ND4J that waits."""
    if not FIXTURES_JAR.exists():
        pytest.skip(f"{FIXTURES_JAR} not built; run `make setup`")
    return ["java", *jvm, "-cp", str(FIXTURES_JAR), "org.pyd4j.fixtures.Idle", str(millis)]


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("profile-runs")


def _run(runs_root: Path, name: str, cmd: list[str], **kw):
    from pyd4j.profile import profile_job

    return profile_job(cmd, runs_root / name, timeout_s=240, **kw)


@pytest.fixture(scope="session")
def healthy_run(runs_root):
    return _run(runs_root, "healthy", fixture_command("healthy", 150, "-Xmx256m"))


@pytest.fixture(scope="session")
def leak_run(runs_root):
    # 1 MiB kept per iteration; live-set points every second (up to 20% of the run); 650 iterations of
    # 40 ms or more: a leak verdict needs a rise that lasts 20 s of training
    return _run(runs_root, "leak", fixture_command("leak", 650, "-Xmx256m", "-Dpyd4j.agent=live=1,live_share=0.2",
                                                   sleep_ms=40), transport="socket")


@pytest.fixture(scope="session")
def maxbytes_run(runs_root):
    return _run(runs_root, "maxbytes", fixture_command("maxbytes", 400, "-Xmx256m", "-Dorg.bytedeco.javacpp.maxbytes=64m"))


@pytest.fixture(scope="session")
def heap_run(runs_root):
    return _run(runs_root, "heap", fixture_command("heap", 400, "-Xmx96m"))


HEALTHY = ("mlp", "cnn", "lstm", "graph")
LEAKING = ("leak-list", "leak-detached", "leak-cache")


@pytest.fixture(scope="session")
def corpus(runs_root):
    """Every corpus job at once, each in its own JVM under the agent: the healthy shapes (60 s or more,
    until the leak verdicts are reached), the leaking ones (until the off-heap leak is established, or
    the verdicts say otherwise), the job built against the older DL4J release; for the LSTM job, a
    reference `jcmd GC.class_histogram` just before it stops. Returns name -> JobRun (or the error)."""
    from pyd4j.profile import profile_job

    root = runs_root / "corpus"
    root.mkdir()
    reference: dict[str, tuple[float, int]] = {}

    def job(name: str, command: list[str], stop: Path, enough: Callable, min_s: float,
            before_stop: Callable | None = None) -> Callable[[], object]:
        stopper = Stopper(root / name, stop, enough, min_s, before_stop)
        return lambda: profile_job(command, root / name, on_sample=stopper, timeout_s=DEADLINE_S)

    jobs = {}
    for name in HEALTHY:
        stop = root / f"{name}.stop"
        before = (lambda t: reference.setdefault("lstm", histogram_total(t.start["pid"], t.run_dir))) if name == "lstm" else None
        jobs[name] = job(name, corpus_command(name, CORPUS_AGENT, stop=stop), stop, verdicts_reached, HEALTHY_MIN_S, before)
    for name in LEAKING:
        stop = root / f"{name}.stop"
        jobs[name] = job(name, corpus_command(name, CORPUS_AGENT, min_iterations=20, stop=stop), stop,
                         lambda t: offheap_leak_found(t) or verdicts_reached(t), 0)
    stop = root / "compat.stop"
    jobs["compat"] = job("compat", compat_command(CORPUS_AGENT, stop=stop), stop, verdicts_reached, HEALTHY_MIN_S)
    runs = run_concurrently(jobs)
    runs["lstm-histogram"] = reference.get("lstm")
    return runs
