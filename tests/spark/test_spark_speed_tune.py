"""`tune --speed` of a spark-submit job on the two-worker standalone cluster (real Spark, real DL4J): a change
reaches the executors as the Spark setting a user would paste, and the job's speed is its executors' sum.

The job's command gives its executors more OpenMP threads than they have cores
(`spark.executorEnv.OMP_NUM_THREADS=8` on 1-core executors). The probe must read that on the executors
(where ND4J trains), the thread change must start from it, and each run with the change must have
ND4J on every executor at 1 thread. The runs carry base Spark settings as `tune --speed --memory` gives
the memory tune's (here a JavaCPP limit in spark.executor.extraJavaOptions), which every executor of every
run must hold beside the change. Two runs a side keep the test short: whether the change is faster
is the benchmark's question (benchmarks/speed_tuning.py --spark), not this test's."""

from __future__ import annotations

import os

import pytest

from pyd4j.jvm.classpath import spark_examples_classpath
from pyd4j.profile.spark_executors import executor_lanes
from pyd4j.profile.speed import tune_speed
from pyd4j.profile.timeline import Timeline
from pyd4j.spark.cluster import LocalCluster
from pyd4j.spark.install import spark_script, write_properties
from pyd4j.spark.job import MAIN_CLASS

pytestmark = [pytest.mark.jvm, pytest.mark.slow]


def test_speed_tune_reaches_the_executors_of_a_cluster_job(jvm, tmp_path, monkeypatch):
    with LocalCluster(workers=2, cores=1, memory="1536m", directory=tmp_path / "cluster") as cluster:
        for key, value in cluster.env().items():
            if key.startswith("SPARK"):
                monkeypatch.setenv(key, value)
        jar, lib = spark_examples_classpath()
        props = write_properties(tmp_path / "app.properties", {
            **cluster.app_properties(), "spark.ui.enabled": "false", "spark.executor.memory": "768m",
            "spark.driver.extraClassPath": f"{jar}{os.pathsep}{lib}", "spark.executor.extraClassPath": f"{jar}{os.pathsep}{lib}"})
        job = [spark_script("spark-submit"), "--properties-file", str(props),
               "--conf", "spark.executorEnv.OMP_NUM_THREADS=8", "--class", MAIN_CLASS, jar,
               "--conf", "examples/data/digits_mlp.json", "--data", "synthetic:4096", "--features", "64", "--labels", "10",
               "--epochs", "1", "--batch-per-worker", "32", "--approach", "direct", "--workers", "2"]
        base = {"spark.executor.extraJavaOptions": "-Dorg.bytedeco.javacpp.maxbytes=900m"}
        doc = tune_speed(job, tmp_path / "speed", only={"threads"}, min_runs=2, max_runs=2, timeout_s=600,
                         base_spark=base)

    spark = doc["spark_cluster"]
    assert spark["master"].startswith("spark://127.0.0.1:") and spark["executor_cores"] == 1
    assert spark["executor_environment"] == {"OMP_NUM_THREADS": "8"} and doc["base_spark_conf"] == base
    assert doc["probe"]["nd4j"]["max_threads"] == 8      # read where ND4J trains: on an executor
    trial = next(t for t in doc["speed"]["tried"] if t["setting"] == "threads=1")
    assert trial["after"] == "OMP_NUM_THREADS=1" and trial["runs"] == 4, trial
    log = doc["speed"]["run_log"]
    assert [r["side"] for r in log] == ["probe", "before", "after", "before", "after"], log
    for run in log:
        rates = run["executors_iterations_per_s"]
        # both executors trained, and the job's speed is their sum
        assert run["ok"] and len(rates) == 2 and all(r and r > 0 for r in rates), run
        assert run["iterations_per_s"] == pytest.approx(sum(rates)), run
        lanes = executor_lanes(Timeline.load_lanes(run["run_dir"]))
        threads = {t.nd4j_settings()["max_threads"] for t in lanes}
        assert len(lanes) == 2 and threads == ({1} if run["side"] == "after" else {8}), (run["side"], threads)
        assert {t.limits()["javacpp_max"] for t in lanes} == {900 * 1024**2}, run["side"]   # the base settings held
    if doc["speed"]["verdict"] == "verified":   # what to paste is the Spark setting, not this shell's environment
        assert doc["speed"]["paste"]["spark_submit"] == ["--conf spark.executorEnv.OMP_NUM_THREADS=1"]
        assert doc["speed"]["paste"]["environment"] == {}
