"""The JVMs of one run: who each is (pid, main class, command line, parent JVM) and what it does.

A job given as `bash -c "java ..."`, `mvn exec:java`, Gradle or `spark-submit` can start several
JVMs. Every one of them gets the agent (through JAVA_TOOL_OPTIONS) and writes its own timeline,
`jvm-<pid>.jsonl`, into the run directory; the first line of each (`"type": "start"`) says who it
is. This module turns those start lines into identities and tells the job from the launchers:
Maven, the Gradle wrapper/client/daemon and spark-submit may only start other JVMs (then they are
"launcher" lanes) or run the job in their own JVM (`mvn exec:java`, spark-submit's local driver:
then they are "job" lanes, named after the class they run).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from pyd4j.profile.timeline import Timeline

LANE_PREFIX = "jvm-"
LANE_SUFFIX = ".jsonl"
# The agent's out= pattern: %p becomes the pid of each JVM (see org.pyd4j.agent.Sink).
LANE_PATTERN = f"{LANE_PREFIX}%p{LANE_SUFFIX}"

# Main classes of JVMs that launch others, by launcher.
KNOWN_LAUNCHERS = {
    "org.codehaus.plexus.classworlds.launcher.Launcher": "maven",
    "org.apache.maven.wrapper.MavenWrapperMain": "maven-wrapper",
    "org.gradle.wrapper.GradleWrapperMain": "gradle-wrapper",
    "org.gradle.launcher.GradleMain": "gradle",
    "org.gradle.launcher.daemon.bootstrap.GradleDaemon": "gradle-daemon",
    "worker.org.gradle.process.internal.worker.GradleWorkerMain": "gradle-worker",
    "org.apache.spark.launcher.Main": "spark-launcher",
    "org.apache.spark.deploy.SparkSubmit": "spark-submit",
    "org.apache.spark.deploy.master.Master": "spark-master",
    "org.apache.spark.deploy.worker.Worker": "spark-worker",
}
# Where a launcher that can run the job inside its own JVM names the job's class on its command line.
_HOSTED_MAIN = {
    "maven": re.compile(r"-Dexec\.mainClass=(\S+)"),
    "spark-submit": re.compile(r"--class[ =](\S+)"),
}


# Spark's executor back-ends (standalone, YARN, Kubernetes): each names its executor id and cores.
SPARK_EXECUTOR_MAINS = ("org.apache.spark.executor.CoarseGrainedExecutorBackend",
                        "org.apache.spark.executor.YarnCoarseGrainedExecutorBackend",
                        "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend")
_EXECUTOR_ARG = re.compile(r"--(executor-id|cores|app-id)[ =](\S+)")


def spark_part(command: str) -> tuple[str | None, str | None, int | None]:
    """(part, executor id, cores) of a Spark JVM from its command: ("driver", None, None) for
    spark-submit's JVM (client mode: the driver, also the executor in local[N]), ("executor", "1", 2)
    for an executor; (None, None, None) for any other JVM."""
    first = command.split(" ", 1)[0] if command else ""
    if first in ("org.apache.spark.deploy.SparkSubmit", "org.apache.spark.deploy.worker.DriverWrapper"):
        return "driver", None, None   # client mode: spark-submit's JVM; cluster deploy mode: a worker's DriverWrapper
    if first in SPARK_EXECUTOR_MAINS:
        args = dict(_EXECUTOR_ARG.findall(command))
        cores = args.get("cores")
        return "executor", args.get("executor-id"), int(cores) if cores and cores.isdigit() else None
    return None, None, None


def lane_files(run_dir: Path) -> list[Path]:
    """The per-JVM timelines of a run directory, oldest pid file first."""
    return sorted(run_dir.glob(f"{LANE_PREFIX}*{LANE_SUFFIX}"), key=lambda p: (p.stat().st_mtime_ns, p.name))


def main_class(start: dict[str, Any]) -> str:
    """The class a JVM runs: the first word of its command (`sun.java.command`; a jar for -jar),
    or, for a launcher running the job in its own JVM, the job's class it names (-Dexec.mainClass)."""
    command = str(start.get("command") or "")
    first = command.split(" ", 1)[0] if command else ""
    launcher = KNOWN_LAUNCHERS.get(first)
    pattern = _HOSTED_MAIN.get(launcher or "")
    if pattern:
        match = pattern.search(command)
        if match:
            return match.group(1)
    return first or "java"


def short_name(name: str, limit: int = 40) -> str:
    """`org.deeplearning4j.examples.quickstart.LeNetMNIST` -> `LeNetMNIST`; a jar's file name;
    never longer than `limit` characters."""
    short = name.rsplit("/", 1)[-1]
    if not short.endswith(".jar"):
        short = short.rsplit(".", 1)[-1] or short
    return short if len(short) <= limit else short[: limit - 1] + "…"


@dataclass(frozen=True)
class JvmIdentity:
    """Who a JVM of the run is. `role` is "job" (it ran the work: DL4J/ND4J seen, or it is no known
    launcher) or "launcher" (a known launcher, or a JVM that started other JVMs, with no DL4J/ND4J)."""

    pid: int
    file: str
    main_class: str
    command: str
    jvm_args: tuple[str, ...]
    ppid: int | None
    parent_jvm: int | None
    launcher: str | None
    role: str
    primary: bool
    started_ms: float | None
    samples: int
    iterations: int
    spark: str | None = None          # "driver" or "executor" for the JVMs of a Spark application
    executor_id: str | None = None    # a Spark executor's id
    cores: int | None = None          # a Spark executor's cores (its concurrent tasks x spark.task.cpus)

    @property
    def label(self) -> str:
        """What a lane is called in the live view and the report: short class name and pid."""
        if self.spark == "executor":
            return f"Spark executor {self.executor_id} · pid {self.pid}"
        if self.spark == "driver" and self.role == "job":
            return f"{short_name(self.main_class)} (Spark driver) · pid {self.pid}"
        tag = f" ({self.launcher})" if self.role == "launcher" and self.launcher else (" (launcher)" if self.role == "launcher" else "")
        return f"{short_name(self.main_class)}{tag} · pid {self.pid}"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["jvm_args"] = list(self.jvm_args)
        return out


def role_text(jvm: dict[str, Any]) -> str:
    """A JVM's role for people: "job (main)", "job", "launcher (maven)", "Spark driver (main)", "Spark executor 1"."""
    if jvm.get("spark") == "executor":
        return f"Spark executor {jvm.get('executor_id')}" + (" (main)" if jvm.get("primary") else "")
    if jvm.get("spark") == "driver" and jvm.get("role") == "job":
        return "Spark driver (main)" if jvm.get("primary") else "Spark driver"
    if jvm.get("role") == "launcher":
        return f"launcher ({jvm['launcher']})" if jvm.get("launcher") else "launcher"
    return "job (main)" if jvm.get("primary") else "job"


def _did_work(t: "Timeline") -> bool:
    """DL4J or ND4J ran in this JVM: iterations, JavaCPP loaded, or ND4J workspaces."""
    return t.iterations() > 0 or any(s.get("javacpp_total") is not None or s.get("ws") for s in t.samples)


def identify(lanes: Sequence["Timeline"]) -> list[JvmIdentity]:
    """Identities of a run's JVMs (same order as `lanes`), with parents, roles and the primary job
    lane: a Spark application's driver, else of the job lanes the one with the most iterations, then
    the one that used ND4J, then the one that ran longest."""
    pids = {int(t.start["pid"]) for t in lanes if t.start.get("pid") is not None}
    parents: dict[int, int | None] = {}
    for t in lanes:
        pid = t.start.get("pid")
        if pid is None:
            continue
        parents[int(pid)] = next((int(a) for a in t.start.get("ancestors") or () if int(a) in pids), None)
    has_child = {p for p in parents.values() if p is not None}
    rows = []
    for t in lanes:
        pid = int(t.start.get("pid") or -1)
        command = str(t.start.get("command") or "")
        launcher = KNOWN_LAUNCHERS.get(command.split(" ", 1)[0] if command else "")
        worked = _did_work(t)
        role = "job" if worked or (launcher is None and pid not in has_child) else "launcher"
        ancestors = t.start.get("ancestors") or ()
        part, executor_id, cores = spark_part(command)
        if part == "executor":
            role = "job"   # an executor is started by a worker, outside the run's process tree
        rows.append(dict(
            pid=pid, file=t.path.name if t.path else "", main_class=main_class(t.start), command=command,
            jvm_args=tuple(str(a) for a in t.start.get("jvm_args") or ()), ppid=int(ancestors[0]) if ancestors else None,
            parent_jvm=parents.get(pid), launcher=launcher, role=role, primary=False,
            started_ms=t.start.get("jvm_start"), samples=len(t.samples), iterations=t.iterations(),
            spark=part, executor_id=executor_id, cores=cores,
        ))
    jobs = [i for i, r in enumerate(rows) if r["role"] == "job"] or list(range(len(rows)))
    drivers = [i for i in jobs if rows[i]["spark"] == "driver"]
    if drivers:  # a Spark application's main JVM is its driver: its exit status is the job's
        rows[drivers[0]]["primary"] = True
    elif jobs:
        best = max(jobs, key=lambda i: (rows[i]["iterations"], _did_work(lanes[i]), lanes[i].duration_s(), -i))
        rows[best]["primary"] = True
    return [JvmIdentity(**r) for r in rows]


def primary_lane(lanes: Sequence["Timeline"]) -> "Timeline":
    """The lane of the job's main JVM (see `identify`), else the first."""
    return next((t for t in lanes if t.jvm is not None and t.jvm.primary), lanes[0])


def lane_label(t: "Timeline") -> str:
    """A lane as reports name it: its JVM's label, else the job's short name."""
    return t.jvm.label if t.jvm is not None else short_name(t.name)


def run_origin_ms(lanes: Sequence["Timeline"]) -> float:
    """The common time origin of a run's lanes: the first JVM's start."""
    starts = [t.t0 for t in lanes if t.samples or t.start]
    return min(starts) if starts else 0.0
