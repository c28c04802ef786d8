"""Where Spark is: pyspark's bundled Spark (the `spark` extra), its launch scripts and their environment."""

from __future__ import annotations

import ctypes
import os
import signal
from pathlib import Path


_PR_SET_PDEATHSIG = 1


class SparkNotFoundError(RuntimeError):
    """No Spark installation to launch jobs or a cluster with; says how to get one."""


def spark_home() -> Path:
    """SPARK_HOME if set, else the Spark inside the installed pyspark package."""
    env = os.environ.get("SPARK_HOME")
    if env:
        home = Path(env)
        if not (home / "bin" / "spark-submit").exists():
            raise SparkNotFoundError(f"SPARK_HOME={env} has no bin/spark-submit; point it at a Spark 3.5 installation "
                                     f"or unset it to use pyspark's")
        return home
    try:
        import pyspark  # noqa: PLC0415
    except ImportError:
        raise SparkNotFoundError("Spark is not installed: install pyd4j's spark extra (pip install 'pyd4j[spark]', "
                                 "`make setup` does) or set SPARK_HOME") from None
    return Path(pyspark.__file__).resolve().parent


def spark_version() -> str:
    """The version of the Spark that spark_home() launches (from its spark-core jar)."""
    jars = sorted((spark_home() / "jars").glob("spark-core_*.jar"))
    if not jars:
        raise SparkNotFoundError(f"no spark-core jar in {spark_home() / 'jars'}")
    return jars[0].stem.split("-")[-1]


def spark_script(name: str) -> str:
    """Path of bin/spark-submit, bin/spark-class, ..."""
    return str(spark_home() / "bin" / name)


def spark_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment Spark's scripts need: SPARK_HOME, and every socket on loopback (SPARK_LOCAL_IP)."""
    env = dict(os.environ if base is None else base)
    env["SPARK_HOME"] = str(spark_home())
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_LOCAL_HOSTNAME"] = "127.0.0.1"
    env.setdefault("PYSPARK_PYTHON", "python3")
    return env


def write_properties(path: str | Path, props: dict[str, str]) -> Path:
    """A spark-submit properties file, readable by this user only (it may hold the cluster's secret)."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        for key, value in props.items():
            fh.write(f"{key} {value}\n")
    return path


def die_with_parent() -> None:
    """In a child between fork and exec: the kernel sends it SIGTERM when this process dies, even by SIGKILL."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
