"""The executors of a profiled Spark application: their lanes, how each ended, what each needed.

Each executor JVM writes its own timeline (pyd4j.profile.spark_submit ships the agent to it); who is who comes
from pyd4j.profile.jvms (driver, executor <id>, cores). How an executor ended is not in its own
timeline when it was killed (no end line), so it is read from the driver's log, where Spark says
why it lost an executor: `Executor app-.../1 removed: Command exited with code 137` (standalone),
`Container killed by YARN for exceeding memory limits`, `OOMKilled` (Kubernetes), and each failed task
with its exception (`Lost task ... (... executor 1): java.lang.OutOfMemoryError: ...`).

Exit codes: 137 = SIGKILL (the node's/container's OOM killer when over its memory), 52 = Spark's exit
for an uncaught OutOfMemoryError, 143 = SIGTERM (a worker ending its executors at the application's end).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pyd4j.output import human_bytes

if TYPE_CHECKING:
    from pyd4j.profile.timeline import Timeline

SPARK_OOM_EXIT = 52
_REMOVED = re.compile(r"Executor (?:app-[\w-]+/)?(?P<id>\d+) removed: (?P<why>.*)$")
_LOST_EXECUTOR = re.compile(r"Lost executor (?P<id>\d+) on [^:]*: (?P<why>.*)$")
_LOST_TASK = re.compile(r"Lost task .*?executor (?P<id>\d+)\): (?P<why>.*)$")
_EXIT_CODE = re.compile(r"exit(?:ed with)?(?: code|Status)[ :=]*(-?\d+)", re.IGNORECASE)
_LOG_LINE = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d |\d{4}-\d\d-\d\d[ T]\d\d:\d\d")   # log4j's default date
_OVER_LIMIT = re.compile(r"exceeding (?:physical |virtual )?memory limits|OOMKilled|killed by the kernel", re.IGNORECASE)


@dataclass
class ExecutorOutcome:
    """How one executor ended and why, for the report and tune."""

    executor_id: str
    pid: int | None
    lane: str | None
    exit_code: int | None
    kind: str            # ok | oom-heap | oom-offheap | oom (which memory not said) | killed-for-memory | lost
    memory: bool         # the executor ran out of memory (the fix is a memory setting)
    diagnosis: str
    evidence: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def executor_lanes(lanes: list["Timeline"]) -> list["Timeline"]:
    """The lanes of Spark executors, by executor id."""
    out = [t for t in lanes if t.jvm is not None and t.jvm.spark == "executor"]
    return sorted(out, key=lambda t: (int(t.jvm.executor_id) if (t.jvm.executor_id or "").isdigit() else 1 << 30, t.jvm.pid))


def driver_lane(lanes: list["Timeline"]) -> "Timeline | None":
    return next((t for t in lanes if t.jvm is not None and t.jvm.spark == "driver" and t.jvm.role == "job"), None)


def driver_log_lines(log: str) -> dict[str, list[str]]:
    """What the driver's log says about each executor id: lines on its removal, loss and failed tasks,
    each failed task with the `Caused by:` lines of its stack trace (DL4J wraps an OutOfMemoryError)."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in log.splitlines():
        for pattern in (_REMOVED, _LOST_EXECUTOR, _LOST_TASK):
            match = pattern.search(line)
            if match:
                current = out.setdefault(match.group("id"), [])
                current.append(line.strip()[-600:])
                if pattern is not _LOST_TASK:
                    current = None
                break
        else:
            if current is not None and _LOG_LINE.match(line):
                current = None   # the next log line: the failed task's stack trace is over
            elif current is not None and line.startswith("Caused by:"):
                current.append(line.strip()[:600])
    return out


def exit_code(lines: list[str]) -> int | None:
    """The executor's exit code where the driver's log names one ("Command exited with code 137")."""
    return next((int(m.group(1)) for line in lines for m in [_EXIT_CODE.search(line)] if m), None)


def classify(lines: list[str], exit_code: int | None, agent_errors: list[str] = ()) -> tuple[str, bool, str]:
    """(kind, memory, diagnosis) from what the driver log and the executor's agent say."""
    from pyd4j.jvm.errors import JavaCppOutOfMemoryError, python_class_for  # noqa: PLC0415

    ooms = [t for t in [*agent_errors, *lines] if "OutOfMemoryError" in t]
    if ooms:
        text = ooms[0].split("OutOfMemoryError", 1)[1].lstrip(": ")
        cls = python_class_for(["java.lang.OutOfMemoryError"], text)
        heap = cls.__name__ == "JavaOutOfMemoryError"
        where = ("the Java heap: raise spark.executor.memory" if heap else
                 "memory outside the heap (ND4J/JavaCPP, NIO direct, metaspace): raise spark.executor.memoryOverhead "
                 "and the JavaCPP limits in spark.executor.extraJavaOptions" if issubclass(cls, JavaCppOutOfMemoryError)
                 or "Direct" in cls.__name__ else f"{cls.__doc__.splitlines()[0].strip()}")
        return ("oom-heap" if heap else "oom-offheap"), True, f"java.lang.OutOfMemoryError: {text[:200]} — {where}"
    if exit_code in (137, -9) or any(_OVER_LIMIT.search(t) for t in lines):
        return ("killed-for-memory", True,
                f"killed from outside (exit code {exit_code}, SIGKILL) with no Java error: the node's or container's "
                f"memory limit (spark.executor.memory + memoryOverhead on YARN/Kubernetes, the worker's memory in "
                f"standalone mode) was exceeded; raise spark.executor.memoryOverhead or run fewer tasks per executor")
    if exit_code == SPARK_OOM_EXIT:
        # the error itself is only in the executor's stderr on its worker: heap or off-heap cannot be told here
        return ("oom", True, "exit code 52: Spark ended the executor on an uncaught OutOfMemoryError; the driver's log does "
                "not say which memory (the executor's stderr on its worker does): the Java heap -> raise "
                "spark.executor.memory; ND4J/JavaCPP off-heap -> raise spark.executor.memoryOverhead and the JavaCPP "
                "limits in spark.executor.extraJavaOptions")
    if lines or exit_code not in (None, 0, 143, -15):
        return "lost", False, f"lost (exit code {exit_code}): " + ("; ".join(lines[:2]) or "no reason in the driver's log")
    return "ok", False, "ended with the application"


def outcomes(run_dir: "Path", all_lanes: list["Timeline"]) -> list[ExecutorOutcome]:
    """How each executor of a profiled spark-submit run ended, from its lane and the driver's log
    (the run's stderr.log: spark-submit's JVM is the driver in client mode)."""
    try:
        log = (Path(run_dir) / "stderr.log").read_text(errors="replace")
    except OSError:
        log = ""
    said = driver_log_lines(log)
    lanes = executor_lanes(all_lanes)
    ids = [t.jvm.executor_id for t in lanes] + sorted(set(said) - {t.jvm.executor_id for t in lanes}, key=int)
    out = []
    for eid in ids:
        lane = next((t for t in lanes if t.jvm.executor_id == eid), None)
        lines = said.get(eid, [])
        code = exit_code(lines)
        agent_errors = [f"{e.get('class')}: {e.get('message') or ''} {e.get('cause') or ''}"
                        for e in (lane.errors if lane is not None else [])]
        kind, memory, why = classify(lines, code, agent_errors)
        evidence = lines[:3]
        if lane is not None and lane.samples:
            peaks = lane.peaks()
            evidence.append(f"peak RSS {human_bytes(peaks['rss'])}, heap used {human_bytes(peaks['heap_used'])} of "
                            f"{human_bytes(lane.limits()['heap_max'])}")
        if lane is not None and lane.end is None and kind == "ok":
            kind, why = "lost", "its timeline has no end line: it did not shut down normally"
        out.append(ExecutorOutcome(eid, lane.jvm.pid if lane else None, lane.path.name if lane and lane.path else None,
                                   code, kind, memory, f"executor {eid}: {why}", evidence))
    return out


def mark_exit_codes(lanes: list["Timeline"], found: list[ExecutorOutcome]) -> None:
    """Give each executor lane its own exit status (the run's is the driver's), so a lane's findings
    (pyd4j.profile.diagnose: "killed" for 137) speak of that executor."""
    for o in found:
        lane = next((t for t in lanes if t.jvm is not None and t.jvm.spark == "executor"
                     and t.jvm.executor_id == o.executor_id), None)
        if lane is not None:
            lane.meta = {**lane.meta, "returncode": o.exit_code, "interrupted": False}
