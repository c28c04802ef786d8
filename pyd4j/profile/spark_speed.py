"""`pyd4j tune --speed` on a spark-submit job whose executors a cluster starts (standalone, YARN, Kubernetes).

The executors train; the command's environment and JVM options do not reach them, since the cluster
starts them with its own. So each change a speed run tries travels as Spark settings, the ones a user
pastes: environment variables as `spark.executorEnv.<NAME>`, JVM options and the agent's options in
`spark.executor.extraJavaOptions` (after the user's own, pyd4j.profile.spark_submit). The heap is not
tried: an executor's heap is `spark.executor.memory`, which the workers must offer or the application
waits for resources; the memory tune (`pyd4j tune`) sizes it.

The job's speed is the sum of its executors' iterations per second: each executor trains its own copy
of the network on its partitions (parameter averaging or gradient sharing), so their rates add up to
the job's. What ND4J loaded and how it was set is read on every executor.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from pyd4j.profile.spark_executors import executor_lanes
from pyd4j.profile.spark_submit import SparkSubmit

if TYPE_CHECKING:
    from pyd4j.profile.timeline import Timeline

EXECUTOR_ENV = "spark.executorEnv."
EXECUTOR_OPTIONS = "spark.executor.extraJavaOptions"


def cluster_submit(job: Sequence[str]) -> SparkSubmit | None:
    """The spark-submit command when its executors are started by a cluster; None for any other job,
    and for `--master local[N]`, where the driver trains and the runs' environment reaches it."""
    if not job or Path(job[0]).name != "spark-submit":
        return None
    submit = SparkSubmit.parse(list(job))
    return submit if submit.local_threads() is None else None


def executor_env(submit: SparkSubmit, base: dict[str, str] | None = None) -> dict[str, str]:
    """The executors' environment: what the job's command sets (spark.executorEnv.*), and over it the
    settings every run adds (`base`: the memory tune's, which set OMP_NUM_THREADS to the executor's cores)."""
    conf = {**submit.settings(), **(base or {})}
    return {k[len(EXECUTOR_ENV):]: v for k, v in conf.items() if k.startswith(EXECUTOR_ENV)}


def executor_conf(env: dict[str, str | None], jvm_options: Sequence[str]) -> dict[str, str]:
    """A setup's environment and JVM options as the Spark settings that give them to every executor."""
    removed = [name for name, value in env.items() if value is None]
    if removed:
        raise ValueError(f"{', '.join(removed)}: an executor's environment variable cannot be removed by a Spark "
                         f"setting, only set ({EXECUTOR_ENV}<NAME>)")
    heap = [o for o in jvm_options if o.startswith(("-Xmx", "-Xms"))]
    if heap:
        raise ValueError(f"{' '.join(heap)}: Spark refuses heap options in {EXECUTOR_OPTIONS}; the executors' heap "
                         f"is spark.executor.memory")
    conf = {EXECUTOR_ENV + name: str(value) for name, value in env.items()}
    if jvm_options:
        conf[EXECUTOR_OPTIONS] = shlex.join(jvm_options)
    return conf


def merged(base: dict[str, str], conf: dict[str, str]) -> dict[str, str]:
    """`conf` over `base` (the memory tune's settings): JVM options are appended to the base's, any other
    setting replaces it."""
    out = {**base, **conf}
    if base.get(EXECUTOR_OPTIONS) and conf.get(EXECUTOR_OPTIONS):
        out[EXECUTOR_OPTIONS] = f"{base[EXECUTOR_OPTIONS]} {conf[EXECUTOR_OPTIONS]}"
    return out


def paste(conf: dict[str, str]) -> list[str]:
    """The settings as spark-submit options."""
    return [f"--conf {shlex.quote(f'{k}={v}')}" for k, v in conf.items()]


def executor_speed(lanes: list["Timeline"]) -> tuple[float | None, list["Timeline"], list[float | None]]:
    """(the job's iterations per second: the sum over its executors, the executors that trained, each
    executor's own rate). None when no executor trained."""
    executors = executor_lanes(lanes)
    rates = [t.iterations_per_second() for t in executors]
    trained = [t for t, r in zip(executors, rates) if r]
    return (sum(r for r in rates if r) or None), trained, rates


def no_executor_lane(lanes: list["Timeline"]) -> str:
    """Why a cluster run has no executor speed."""
    if not executor_lanes(lanes):
        return ("no executor's timeline came back: the executors must find pyd4j's agent jar and the run directory "
                "at this machine's paths (a cluster on this machine, or a shared file system)")
    return "no executor trained two iterations or more: nothing to measure a speed from"
