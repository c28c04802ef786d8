"""DL4J training on real Spark (pyspark's Spark 3.5) under pyd4j-generated settings in local[2]. The two-worker
standalone cluster on loopback, workers memory-limited like nodes, is trained on by tests/spark/test_spark_tune.py."""

from __future__ import annotations

import json
import os

import pytest

from pyd4j.jvm.classpath import spark_examples_classpath
from pyd4j.memory.estimate import estimate
from pyd4j.memory.flags import SparkShape, spark_flags
from pyd4j.profile.launch import profile_job
from pyd4j.spark.install import spark_env, spark_script, write_properties
from pyd4j.spark.job import MAIN_CLASS, SparkJobResult

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

DIGITS_MLP = "examples/data/digits_mlp.json"
DIGITS_LENET = "examples/data/digits_lenet.json"


def _events(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "stdout.log").read_text().splitlines() if line.startswith("{")]


def _check_trained(result, min_accuracy: float) -> None:
    assert result.ok, f"spark-submit exit {result.returncode}:\n{result.stderr[-4000:]}"
    scores = result.scores()
    assert len(scores) >= 2, result.stdout
    # the score on the whole training set after the last epoch, against the untrained network's (ln 10 = 2.30)
    assert scores[0] > 2.0 and scores[-1] < 0.6 * scores[0], scores
    # an independent check of what was learned: accuracy on the held-out digits (10 classes, chance 0.1)
    assert result.done()["accuracy"] >= min_accuracy, result.done()
    assert "OutOfMemoryError" not in result.stderr


def test_cnn_as_computation_graph_in_local_mode_under_profile(jvm, tmp_path, monkeypatch):
    """`pyd4j profile -- spark-submit --master local[2] ...`: the driver runs the tasks, under generated settings."""
    est = estimate(DIGITS_LENET, 32, input="cnn:8x8x1")
    sf = spark_flags(est, SparkShape(executors=1, executor_cores=2, worker_memory=4 * 1024**3))
    jar, lib = spark_examples_classpath()
    props = write_properties(tmp_path / "app.properties", {
        "spark.master": "local[2]", "spark.ui.enabled": "false", **sf.local_conf(),
        "spark.driver.extraClassPath": f"{jar}{os.pathsep}{lib}"})
    argv = [spark_script("spark-submit"), "--properties-file", str(props), "--class", MAIN_CLASS, jar,
            "--conf", DIGITS_LENET, "--reshape", "1,8,8", "--graph", "true", "--epochs", "2", "--batch-per-worker", "32"]
    for key, value in spark_env({}).items():
        monkeypatch.setenv(key, value)   # SPARK_HOME, loopback
    run = profile_job(argv, tmp_path / "run", timeout_s=900)
    result = SparkJobResult(run.command, run.returncode, _events(run.run_dir), (run.run_dir / "stdout.log").read_text(),
                            (run.run_dir / "stderr.log").read_text(), run.wall_s)
    assert result.events[0]["network"] == "SparkComputationGraph" and result.events[0]["master"] == "local[2]"
    _check_trained(result, min_accuracy=0.6)
    # the driver is the run's main lane, it trained, and its JVM got the generated JavaCPP limit and heap
    driver = run.timeline
    assert driver.jvm.spark == "driver" and driver.jvm.primary and driver.iterations() > 0 and len(driver.samples) > 5
    assert driver.start["javacpp_maxphysicalbytes_prop"] == str(sf.executor.maxphysicalbytes)
    assert abs(driver.limits()["heap_max"] - sf.executor.heap_bytes) < 0.1 * sf.executor.heap_bytes
    # spark-submit's launcher JVM (org.apache.spark.launcher.Main) is told apart from the job
    others = [t.jvm for t in run.lanes if t is not driver and t.jvm is not None]
    assert others and all(j.role == "launcher" and j.launcher == "spark-launcher" for j in others), others


# DL4J on the two-worker cluster under generated settings: tests/spark/test_spark_tune.py (its first run).
