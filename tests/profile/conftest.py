"""Fixture jobs (tests/fixtures/java, built by `make setup`) run under the agent, once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pyd4j.jvm.classpath import PROJECT_ROOT, classpath

FIXTURES_JAR = PROJECT_ROOT / "tests" / "fixtures" / "java" / "target" / "pyd4j-fixtures.jar"


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
    return _run(runs_root, "leak", fixture_command("leak", 120, "-Xmx256m"), transport="socket")


@pytest.fixture(scope="session")
def maxbytes_run(runs_root):
    return _run(runs_root, "maxbytes", fixture_command("maxbytes", 400, "-Xmx256m", "-Dorg.bytedeco.javacpp.maxbytes=64m"))


@pytest.fixture(scope="session")
def heap_run(runs_root):
    return _run(runs_root, "heap", fixture_command("heap", 400, "-Xmx96m"))
