"""The corpus of small DL4J jobs with known endings (tests/fixtures/java CorpusJob and MemoryJob,
tests/fixtures/java-compat CompatJob on DL4J 1.0.0-beta7) that the diagnosis benchmarks run."""

from __future__ import annotations

import os
import re
import sys

from pyd4j.jvm import classpath
from pyd4j.jvm.classpath import PROJECT_ROOT

FIXTURES = PROJECT_ROOT / "tests" / "fixtures"
FIXTURES_JAR = FIXTURES / "java" / "target" / "pyd4j-fixtures.jar"
COMPAT = FIXTURES / "java-compat" / "target"
SOURCES = {"corpus": FIXTURES / "java/src/main/java/org/pyd4j/fixtures/CorpusJob.java",
           "compat": FIXTURES / "java-compat/src/main/java/org/pyd4j/compat/CompatJob.java"}
MIB = 1 << 20


def cp() -> str:
    return os.pathsep.join([str(FIXTURES_JAR), *classpath()[1:]])


def corpus(job: str, seconds: int, *jvm: str, min_iterations: int = 0) -> list[str]:
    return ["java", *jvm, "-cp", cp(), "org.pyd4j.fixtures.CorpusJob", job, str(seconds), str(min_iterations), "1"]


def memory_job(mode: str, iterations: int, *jvm: str) -> list[str]:
    return ["java", *jvm, "-cp", cp(), "org.pyd4j.fixtures.MemoryJob", mode, str(iterations), "10"]


def compat(seconds: int, leak: bool = False) -> list[str]:
    jars = os.pathsep.join([str(COMPAT / "pyd4j-compat-fixture.jar"), *sorted(str(p) for p in (COMPAT / "lib").glob("*.jar"))])
    return ["java", "-cp", jars, "org.pyd4j.compat.CompatJob", str(seconds), "0", "", *(["leak"] if leak else [])]


def in_container(limit: int, command: list[str]) -> list[str]:
    """The command in a fresh memory cgroup of `limit` bytes (pyd4j.memory.container), exiting as it did."""
    code = ("import sys; from pyd4j.memory.container import run_limited; "
            "r = run_limited(sys.argv[2:], int(sys.argv[1]), capture=False); "
            "sys.exit(r.exit_code if r.exit_code >= 0 else 128 - r.exit_code)")
    return [sys.executable, "-c", code, str(limit), *command]


def site_line(source: str, job: str) -> str:
    path = SOURCES[source]
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if re.search(rf"LEAK SITE {re.escape(job)}\b", line):
            return f"{path.name}:{number})"
    raise SystemExit(f"no LEAK SITE {job} marker in {path}")


def cases(seconds: int) -> list[dict]:
    """name, group, command, expected finding (None: healthy), marker of the leak's line, kill after N iterations."""
    s = seconds
    return [
        {"name": "mlp", "group": "healthy", "command": corpus("mlp", s)},
        {"name": "cnn", "group": "healthy", "command": corpus("cnn", s)},
        {"name": "lstm", "group": "healthy", "command": corpus("lstm", s)},
        {"name": "graph", "group": "healthy", "command": corpus("graph", s)},
        {"name": "plateau", "group": "healthy", "command": corpus("plateau", s)},
        {"name": "short-30", "group": "healthy", "command": corpus("mlp", 0, min_iterations=30)},
        {"name": "beta7-mlp", "group": "healthy", "command": compat(s)},
        {"name": "leak-list", "group": "leaking", "command": corpus("leak-list", s), "expect": "leak-offheap",
         "site": site_line("corpus", "leak-list")},
        {"name": "leak-detached", "group": "leaking", "command": corpus("leak-detached", s), "expect": "leak-offheap",
         "site": site_line("corpus", "leak-detached")},
        {"name": "leak-cache", "group": "leaking", "command": corpus("leak-cache", s), "expect": "leak-offheap",
         "site": site_line("corpus", "leak-cache")},
        {"name": "leak-workspace", "group": "leaking", "command": corpus("leak-workspace", s), "expect": "leak-offheap",
         "site": site_line("corpus", "leak-workspace")},
        {"name": "leak-late", "group": "leaking", "command": corpus("leak-late", s), "expect": "leak-offheap",
         "site": site_line("corpus", "leak-late")},
        {"name": "leak-heap", "group": "leaking", "command": corpus("leak-heap", s), "expect": "leak-heap"},
        {"name": "beta7-leak", "group": "leaking", "command": compat(s, leak=True), "expect": "leak-offheap",
         "site": site_line("compat", "compat-leak")},
        {"name": "dies-heap", "group": "dying", "command": memory_job("heap", 400, "-Xmx96m"), "expect": "oom-heap"},
        {"name": "dies-javacpp", "group": "dying",
         "command": memory_job("maxbytes", 400, "-Xmx256m", "-Dorg.bytedeco.javacpp.maxbytes=64m"),
         "expect": "oom-javacpp-maxbytes"},
        {"name": "dies-direct", "group": "dying", "command": corpus("direct", 600, "-XX:MaxDirectMemorySize=64m"),
         "expect": "oom-direct"},
        {"name": "dies-metaspace", "group": "dying", "command": corpus("metaspace", 600, "-XX:MaxMetaspaceSize=64m"),
         "expect": "oom-metaspace"},
        {"name": "dies-container", "group": "dying",
         "command": in_container(448 * MIB, corpus("leak-list", 600, "-Xmx256m")), "expect": "killed"},
        {"name": "kill-9", "group": "signal", "command": corpus("mlp", 600), "expect": "killed-signal", "kill_at": 40},
    ]
