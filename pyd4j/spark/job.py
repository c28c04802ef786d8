"""Run the DL4J-on-Spark example job (examples/spark, `org.pyd4j.examples.spark.TrainOnSpark`) with spark-submit
and read what it printed: one JSON event per line (start, one per epoch, done).

The job's classpath (its jar and DL4J/ND4J from `make setup`) goes on the driver and executor class
paths, which works because every executor of a local or loopback cluster sees this machine's files.
Confs are written to a properties file (`--properties-file`), so the cluster's secret never shows on a
command line. `with_agent()` adds pyd4j's profiling agent to the driver and every executor, each writing
its own timeline (`driver.jsonl`, `executor-<app>-<id>.jsonl`) into one directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from pyd4j.jvm.classpath import spark_examples_classpath
from pyd4j.spark.install import die_with_parent, spark_env, spark_script, write_properties

MAIN_CLASS = "org.pyd4j.examples.spark.TrainOnSpark"


@dataclass
class SparkJobResult:
    """How a spark-submit run ended and the events the job printed."""

    command: list[str]
    returncode: int | None
    events: list[dict]
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and any(e.get("event") == "done" for e in self.events)

    @property
    def app_id(self) -> str | None:
        return next((e.get("app_id") for e in self.events if e.get("event") == "start"), None)

    def scores(self) -> list[float]:
        """Score on the training data before training, then after each epoch."""
        return [float(e["score"]) for e in self.events if e.get("event") in ("start", "epoch") and "score" in e]

    def done(self) -> dict:
        return next((e for e in self.events if e.get("event") == "done"), {})


def job_classpath_conf() -> dict[str, str]:
    """The example job's jar and DL4J/ND4J jars on the driver and executor class paths."""
    cp = os.pathsep.join(spark_examples_classpath())
    return {"spark.driver.extraClassPath": cp, "spark.executor.extraClassPath": cp}


def _append_option(conf: dict[str, str], key: str, option: str) -> None:
    conf[key] = f"{conf[key]} {option}".strip() if conf.get(key) else option


def with_agent(conf: dict[str, str], out_dir: str | Path, interval_ms: int = 100) -> dict[str, str]:
    """`conf` plus pyd4j's agent on the driver and every executor, each with its own timeline in `out_dir`.

    Spark fills in {{APP_ID}} and {{EXECUTOR_ID}} in executor options, so each executor's file is its own.
    """
    from pyd4j.profile.launch import agent_jar  # noqa: PLC0415

    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    jar = agent_jar()
    conf = dict(conf)
    _append_option(conf, "spark.driver.extraJavaOptions", f"-javaagent:{jar}=out={out / 'driver.jsonl'},interval={interval_ms}")
    _append_option(conf, "spark.executor.extraJavaOptions",
                   f"-javaagent:{jar}=out={out}/executor-{{{{APP_ID}}}}-{{{{EXECUTOR_ID}}}}.jsonl,interval={interval_ms}")
    return conf


def run_example(conf: dict[str, str], job_args: list[str], properties_file: str | Path, *,
                env: dict[str, str] | None = None, timeout: float = 900.0, cwd: str | Path | None = None) -> SparkJobResult:
    """spark-submit the example job with `conf` (master included) written to `properties_file`."""
    from pyd4j.jvm.classpath import PROJECT_ROOT  # noqa: PLC0415
    from pyd4j.profile.launch import kill_tree  # noqa: PLC0415

    props = {"spark.ui.enabled": "false", **job_classpath_conf(), **conf}
    write_properties(properties_file, props)
    command = [spark_script("spark-submit"), "--properties-file", str(properties_file), "--class", MAIN_CLASS,
               spark_examples_classpath()[0], *job_args]
    t0 = time.monotonic()
    proc = subprocess.Popen(command, env=env or spark_env(), cwd=str(cwd or PROJECT_ROOT), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=die_with_parent)  # noqa: PLW1509  (the driver never outlives us)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_tree(proc.pid)
        out, err = proc.communicate()
    except BaseException:
        kill_tree(proc.pid)
        raise
    events = []
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return SparkJobResult(command, proc.returncode, events, out, err, round(time.monotonic() - t0, 1), timed_out, props)
