"""DL4J training on real Spark (pyspark's Spark 3.5) under pyd4j-generated settings in local[2]. The two-worker
standalone cluster on loopback, workers memory-limited like nodes, is trained on by tests/spark/test_spark_tune.py."""

from __future__ import annotations

import pytest

from pyd4j.memory.estimate import estimate
from pyd4j.memory.flags import SparkShape, spark_flags
from pyd4j.spark.job import run_example

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

DIGITS_MLP = "examples/data/digits_mlp.json"
DIGITS_LENET = "examples/data/digits_lenet.json"


def _check_trained(result, min_accuracy: float) -> None:
    assert result.ok, f"spark-submit exit {result.returncode}:\n{result.stderr[-4000:]}"
    scores = result.scores()
    assert len(scores) >= 2, result.stdout
    # the score on the whole training set after the last epoch, against the untrained network's (ln 10 = 2.30)
    assert scores[0] > 2.0 and scores[-1] < 0.6 * scores[0], scores
    # an independent check of what was learned: accuracy on the held-out digits (10 classes, chance 0.1)
    assert result.done()["accuracy"] >= min_accuracy, result.done()
    assert "OutOfMemoryError" not in result.stderr


def test_cnn_as_computation_graph_in_local_mode(jvm, tmp_path):
    est = estimate(DIGITS_LENET, 32, input="cnn:8x8x1")
    sf = spark_flags(est, SparkShape(executors=1, executor_cores=2, worker_memory=4 * 1024**3))
    conf = {"spark.master": "local[2]", **sf.local_conf()}
    result = run_example(conf, ["--conf", DIGITS_LENET, "--reshape", "1,8,8", "--graph", "true", "--epochs", "2",
                                "--batch-per-worker", "32"], tmp_path / "app.properties", timeout=900)
    assert result.events[0]["network"] == "SparkComputationGraph" and result.events[0]["master"] == "local[2]"
    assert f"-Dorg.bytedeco.javacpp.maxphysicalbytes={sf.executor.maxphysicalbytes}" in \
        result.properties["spark.driver.extraJavaOptions"]
    _check_trained(result, min_accuracy=0.6)


# DL4J on the two-worker cluster under generated settings: tests/spark/test_spark_tune.py (its first run).
