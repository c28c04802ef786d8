"""DL4J training on real Spark (pyspark's Spark 3.5) under pyd4j-generated settings: in local[2], and on a
two-worker standalone cluster on loopback whose workers are memory-limited like nodes."""

from __future__ import annotations

import pytest

from pyd4j.memory import container
from pyd4j.memory.estimate import estimate
from pyd4j.memory.flags import SparkShape, spark_flags
from pyd4j.spark.cluster import LocalCluster
from pyd4j.spark.job import run_example

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

DIGITS_MLP = "examples/data/digits_mlp.json"
DIGITS_LENET = "examples/data/digits_lenet.json"
CAN_LIMIT, WHERE = container.available()


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


def test_mlp_on_two_worker_cluster_under_generated_settings(jvm, tmp_path):
    est = estimate(DIGITS_MLP, 32, input="ff:64")
    sf = spark_flags(est, SparkShape(executors=2, executor_cores=1, worker_memory=4 * 1024**3))
    # each worker (node) gets exactly what the generated settings say one executor needs
    with LocalCluster(workers=2, cores=1, memory=sf.executor_container_bytes, directory=tmp_path / "cluster") as cluster:
        assert cluster.limited == CAN_LIMIT, cluster.limit_note
        conf = {**cluster.app_properties(), **sf.conf()}
        result = run_example(conf, ["--conf", DIGITS_MLP, "--epochs", "2", "--batch-per-worker", "32",
                                    "--approach", "direct", "--workers", "2"],
                             tmp_path / "app.properties", env=cluster.env(), timeout=900)
        start = result.events[0] if result.events else {}
        assert start.get("master") == cluster.master_url and start.get("approach") == "Direct"
        _check_trained(result, min_accuracy=0.8)
        exits = [e for e in cluster.executor_exits() if e.app_id == result.app_id]
        assert len(exits) == 2 and {e.worker for e in exits} == {0, 1}, exits  # one executor on each worker
        # ended by the application's end (KILLED, exit 143), not by the kernel (137) or an OutOfMemoryError
        assert all(not e.killed and "OutOfMemoryError" not in e.stderr_tail(100_000) for e in exits), exits
        assert cluster.oom_kills() == [0, 0]
