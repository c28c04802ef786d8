"""The speed-tuning benchmarks' jobs (tests/fixtures/java SpeedJob; examples/spark TrainOnSpark on a
loopback cluster) and how a tune's kept changes are checked again by a fresh A/B."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyd4j.jvm.classpath import PROJECT_ROOT, classpath
from pyd4j.profile import ab
from pyd4j.profile.nd4j_build import MKL_OPTION, classpath_javacpp, find_mkl, without_builds
from pyd4j.profile.speed import Setup, change_of, job_runner

FIXTURES_JAR = PROJECT_ROOT / "tests" / "fixtures" / "java" / "target" / "pyd4j-fixtures.jar"
OPENBLAS = "<openblas>"   # in a job's JVM options: ND4J's own OpenBLAS, not MKL
GENERIC = "<generic>"     # in a job's JVM options: the generic nd4j-native jar alone on the class path


def command(net: str, seconds: int, options: list[str], jvm: list[str]) -> list[str]:
    """The SpeedJob: the class path pyd4j builds (the nd4j-native build for this CPU) with MKL's jar and
    JavaCPP's option that loads it, unless `jvm` asks for OpenBLAS or the generic build."""
    jars = classpath()[1:]
    if GENERIC in jvm:
        jars = without_builds(jars, keep="linux-x86_64")
    blas: list[str] = []
    if OPENBLAS not in jvm:
        mkl = find_mkl(classpath_javacpp(jars))
        if mkl is None:
            raise SystemExit("MKL's redist jar is not in the local Maven repository: run `make setup`")
        jars, blas = [*jars, str(mkl)], [MKL_OPTION]
    own = [o for o in jvm if o not in (OPENBLAS, GENERIC)]
    cp = os.pathsep.join([str(FIXTURES_JAR), *jars])
    return ["java", *own, *blas, "-cp", cp, "org.pyd4j.fixtures.SpeedJob", net, str(seconds), *options]


def apply_env(env: dict[str, str | None]) -> None:
    """Set (None: remove) each variable of `env` in this process's environment."""
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextmanager
def environment(env: dict[str, str | None]) -> Iterator[None]:
    """This process's environment with `env` applied, as it was again after the block."""
    saved = dict(os.environ)
    try:
        apply_env(env)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def recheck(job: list[str], env: dict, kept: list[dict], out: Path, runs: int) -> dict:
    """A fresh alternated A/B of the job as it is against the job with the kept changes."""
    changes = [change_of(row) for row in kept]
    run = job_runner(job, out)

    def side(setup: Setup, name: str):
        def go() -> float:
            m = run(setup, name)
            if not m.ok or not m.iterations_per_s:
                raise ab.RunFailed(m.why)
            return m.iterations_per_s
        return go

    with environment(env):
        c = ab.compare(side(Setup(), "before"), side(Setup(tuple(changes)), "after"), min_runs=runs, max_runs=runs)
    return c.to_dict()


def tune_row(doc: dict) -> dict:
    """What a benchmark keeps of one tune's document: its verdict, kept changes and trials."""
    s = doc["speed"]
    return {"verdict": s["verdict"], "exit_code": doc["exit_code"], "ratio": s["ratio"], "interval": s["interval"],
            "changes": s["changes"],
            "tried": [{k: t[k] for k in ("setting", "on_top_of", "verdict", "ratio", "interval", "runs")} for t in s["tried"]],
            "extra_runs": s["extra_runs"]}


def claim_checked(row: dict, job: list[str], env: dict, out: Path, runs: int) -> None:
    """A kept change re-measured by a fresh A/B (`recheck`): a claim it does not reproduce (median ratio <= 1)
    is a false claim, one under 0.98 left the job slower. No kept change: neither."""
    if row["changes"]:
        row["recheck"] = recheck(job, env, row["changes"], out, runs)
        row["false_claim"] = not (row["recheck"]["ratio"] or 0) > 1.0
        row["left_slower"] = (row["recheck"]["ratio"] or 0) < 0.98
    else:
        row["false_claim"] = row["left_slower"] = False


@contextmanager
def spark_cluster(tmp: Path) -> Iterator[tuple[Path, str]]:
    """A loopback standalone cluster of two 1-core workers for examples/spark's TrainOnSpark: (its properties
    file, the examples jar). This process's SPARK_* environment is the cluster's until the block ends."""
    from pyd4j.jvm.classpath import spark_examples_classpath
    from pyd4j.spark.cluster import LocalCluster
    from pyd4j.spark.install import write_properties

    saved = dict(os.environ)
    try:
        with LocalCluster(workers=2, cores=1, memory="1536m", directory=tmp / "cluster") as cluster:
            os.environ.update({k: v for k, v in cluster.env().items() if k.startswith("SPARK")})
            jar, lib = spark_examples_classpath()
            yield write_properties(tmp / "app.properties", {
                **cluster.app_properties(), "spark.ui.enabled": "false", "spark.executor.memory": "768m",
                "spark.driver.extraClassPath": f"{jar}{os.pathsep}{lib}",
                "spark.executor.extraClassPath": f"{jar}{os.pathsep}{lib}"}), jar
    finally:
        os.environ.clear()
        os.environ.update(saved)


def train_on_spark(props: Path, jar: str, net: str, examples: int, conf: dict[str, str] | None = None,
                   options: list[str] | tuple[str, ...] = (), epochs: int = 1) -> list[str]:
    """The spark-submit command of TrainOnSpark on `net` with `examples` synthetic examples (64 features,
    10 labels; `options` after them), parameter averaging, batch 32 per worker, on spark_cluster's cluster."""
    from pyd4j.spark.install import spark_script
    from pyd4j.spark.job import MAIN_CLASS

    return [spark_script("spark-submit"), "--properties-file", str(props),
            *[w for k, v in (conf or {}).items() for w in ("--conf", f"{k}={v}")], "--class", MAIN_CLASS, jar,
            "--conf", net, "--data", f"synthetic:{examples}", "--features", "64", "--labels", "10",
            *options, "--epochs", str(epochs), "--batch-per-worker", "32", "--approach", "direct", "--workers", "2"]
