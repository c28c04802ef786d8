"""Spark settings for a DL4J job on a cluster shape (pure Python: a hand-made estimate, no JVM)."""

from __future__ import annotations

import shlex

import pytest

from pyd4j.memory.estimate import EstimateError
from pyd4j.memory.flags import (
    SPARK_EXECUTOR_NATIVE,
    SPARK_MIN_HEAP,
    BudgetError,
    SparkShape,
    flags,
    spark_executor_estimate,
    spark_flags,
)
from tests.memory.test_flags import hand_estimate

MiB = 1024**2


def test_hand_worked_executor_settings():
    # hand_estimate(100): off-heap 100 MiB fixed + 1 MiB/sample, heap 256 MiB, 2 layers. Executor of 2 cores:
    # off-heap x 2 tasks = 2 x 200 = 400 MiB -> maxbytes 460 MiB.
    # heap: DL4J 256 + 1 more copy's layers 1 x 2 x 1 MiB x 2 = 4 + Spark 10 x 2 = 20 -> 280; reserve max(300, 480 - 280) = 300
    #   -> 580 MiB, aligned to 16 MiB: 592 MiB.
    # native: JVM 100 + 160 KiB x 2 layers (0.3125) + 4 x 2 CPUs = 108.3125; the JIT's 48; G1's tables 5% of 580 = 29
    # (a Spark JVM runs G1; the flags pin no collector); + Spark 184 = 369.3125 x 1.15 = 424.71 -> 425 MiB.
    # budget = 460 + 592 + 64 (direct) + 425 = 1541 MiB; margin ceil(1541 x 0.05) = 78 -> container 1619 MiB.
    # maxphysicalbytes = the budget less the JVM's 45 MiB of file-backed pages = 1496 MiB.
    sf = spark_flags(hand_estimate(100), SparkShape(executors=2, executor_cores=2, worker_memory=4096 * MiB))
    assert SPARK_EXECUTOR_NATIVE == 184 * MiB
    assert sf.executor.maxbytes == 460 * MiB
    assert sf.executor.heap_bytes == 592 * MiB
    assert sf.executor.maxphysicalbytes == 1496 * MiB
    assert sf.executor_container_bytes == 1619 * MiB
    assert sf.executor.collector is None and "GC" not in conf_opts(sf) and "MaxNodeLimit" not in conf_opts(sf)
    conf = sf.conf()
    assert conf["spark.executor.memory"] == "592m"
    assert conf["spark.executor.memoryOverhead"] == f"{1619 - 592}m"
    assert conf["spark.executor.cores"] == "2" and conf["spark.cores.max"] == "4"
    assert conf["spark.executorEnv.OMP_NUM_THREADS"] == "1"
    assert "spark.task.cpus" not in conf  # one core per task is Spark's default
    # Spark 3.5 refuses an executor whose Netty direct memory (MaxDirectMemorySize) is below this
    assert int(conf["spark.network.maxRemoteBlockSizeFetchToMem"].rstrip("m")) < 64
    assert "-XX:MaxDirectMemorySize=64m" in conf["spark.executor.extraJavaOptions"]
    opts = conf["spark.executor.extraJavaOptions"]
    assert "-Xmx" not in opts and "-Xms" not in opts  # Spark refuses -Xmx there; the heap is spark.executor.memory
    assert f"-Dorg.bytedeco.javacpp.maxphysicalbytes={1496 * MiB}" in opts
    tokens = shlex.split(sf.render().replace("\\\n", " ").split("#")[0])
    assert "spark.executor.memoryOverhead=1027m" in tokens


def conf_opts(sf) -> str:
    return sf.conf()["spark.executor.extraJavaOptions"] + " " + sf.conf()["spark.driver.extraJavaOptions"]


def test_every_concurrent_task_trains_its_own_copy():
    est = hand_estimate(100)
    one = spark_executor_estimate(est, SparkShape(executor_cores=1))
    four = spark_executor_estimate(est, SparkShape(executor_cores=4))
    two_by_two = spark_executor_estimate(est, SparkShape(executor_cores=4, task_cpus=2))
    assert one.offheap_bytes == est.offheap_bytes
    assert four.offheap_bytes == 4 * est.offheap_bytes
    assert two_by_two.offheap_bytes == 2 * est.offheap_bytes  # spark.task.cpus=2: two copies at a time
    assert four.heap_bytes >= SPARK_MIN_HEAP and one.heap_bytes >= SPARK_MIN_HEAP


def test_executors_get_the_environment_the_estimate_assumes():
    """The fit() model assumes glibc's mmap threshold fixed: executors get it through spark.executorEnv, with
    what glibc may keep without it scaled by the concurrent tasks; the driver, which does not train, not."""
    import dataclasses

    from pyd4j.memory.estimate import Term

    kept = Term("kept_by_glibc", "offheap", "estimate", 0, MiB, "hand")
    est = dataclasses.replace(hand_estimate(100), environment={"MALLOC_MMAP_THRESHOLD_": "131072"}, without_environment=kept)
    sf = spark_flags(est, SparkShape(executors=1, executor_cores=2, worker_memory=8192 * MiB))
    assert sf.conf()["spark.executorEnv.MALLOC_MMAP_THRESHOLD_"] == "131072"
    assert "200 MiB more" in sf.settings()[[k for k, _, _ in sf.settings()].index("spark.executorEnv.MALLOC_MMAP_THRESHOLD_")][2]
    assert sf.driver.environment == {}
    assert "MALLOC_MMAP_THRESHOLD_=131072" in sf.render()
    assert "spark.executorEnv.MALLOC_MMAP_THRESHOLD_" not in spark_flags(hand_estimate(100), SparkShape(
        worker_memory=8192 * MiB)).conf()


def test_small_network_gets_sparks_minimum_heap():
    sf = spark_flags(hand_estimate(1).at_batch(1), SparkShape(worker_memory=4096 * MiB))
    small = spark_executor_estimate(hand_estimate(1), SparkShape())
    assert small.heap_bytes >= SPARK_MIN_HEAP
    assert int(sf.conf()["spark.executor.memory"].rstrip("m")) * MiB >= SPARK_MIN_HEAP


def test_task_cpus_and_threads():
    sf = spark_flags(hand_estimate(10), SparkShape(executors=1, executor_cores=4, task_cpus=2, worker_memory=8 * 1024 * MiB))
    conf = sf.conf()
    assert conf["spark.task.cpus"] == "2"
    assert conf["spark.executorEnv.OMP_NUM_THREADS"] == "2"
    assert sf.shape.concurrent_tasks == 2


def test_refusal_names_the_term_and_what_fits():
    est = hand_estimate(120)
    shape = SparkShape(executors=2, executor_cores=4, worker_memory=1700 * MiB)
    with pytest.raises(BudgetError) as info:
        spark_flags(est, shape)
    err = info.value
    per_executor = 1700 * MiB
    assert err.budget_bytes == per_executor and err.needed_bytes > per_executor
    assert err.biggest_term == "activations"  # 4 x 120 MiB, more than the parameters' 4 x 100 MiB
    # independent check of the advice with the generator itself: the largest batch fits, one more does not
    b = err.largest_batch
    assert b >= 1
    assert spark_flags(est.at_batch(b), shape).executor_container_bytes <= per_executor
    with pytest.raises(BudgetError):
        spark_flags(est.at_batch(b + 1), shape)
    msg = str(err)
    assert "1.7 GiB" in msg and "4 concurrent task(s)" in msg and f"largest batch per worker that fits is {b}" in msg
    # 2 cores fit at batch 120 (1602 MiB, worked like the test above), 3 do not
    assert "at most 2 core(s) per executor fit" in msg
    assert spark_flags(est, SparkShape(executors=2, executor_cores=2, worker_memory=1700 * MiB))
    with pytest.raises(BudgetError):
        spark_flags(est, SparkShape(executors=2, executor_cores=3, worker_memory=1700 * MiB))
    assert "spark.task.cpus=2" in msg


def test_executors_share_a_worker():
    est = hand_estimate(100)
    alone = spark_flags(est, SparkShape(executor_cores=1, worker_memory=3000 * MiB))
    with pytest.raises(BudgetError) as info:
        spark_flags(est, SparkShape(executor_cores=1, worker_memory=3000 * MiB, executors_per_worker=3))
    assert info.value.budget_bytes == 1000 * MiB and info.value.needed_bytes == alone.executor_container_bytes


@pytest.mark.parametrize("kwargs, word", [
    (dict(executors=0), "executors 0"),
    (dict(executor_cores=-1), "executor-cores -1"),
    (dict(task_cpus=2, executor_cores=1), "task-cpus 2 is more than executor-cores 1"),
    (dict(worker_memory=0), "worker-memory 0"),
])
def test_bad_shapes_are_refused_with_the_value(kwargs, word):
    with pytest.raises(EstimateError, match=word):
        SparkShape(**kwargs)


def test_plain_flagset_points_to_spark_flags():
    with pytest.raises(ValueError, match="spark_flags"):
        flags(hand_estimate(10), total="8g").render("spark")


def test_hand_worked_settings_from_measured_executor():
    # A profiled executor ran 2 tasks at once: JavaCPP 20 MiB and libnd4j 200 MiB in all (10 + 100 MiB per task),
    # 150 MiB more outside the heap once (Spark, the JVM), heap need 100 MiB, metaspace + code 90 MiB.
    from pyd4j.memory.flags import spark_measured_estimate, spark_measured_flags

    def settings(tasks: int):
        est = spark_measured_estimate(10 * MiB, 100 * MiB, 150 * MiB, 100 * MiB, 90 * MiB, tasks)
        return est, spark_measured_flags(est, est, SparkShape(executors=2, executor_cores=tasks))

    est, sf = settings(2)
    assert est.offheap_bytes == (2 * 110 + 150) * MiB and est.native_bytes == 90 * MiB
    assert est.heap_bytes == SPARK_MIN_HEAP                       # 100 MiB measured, Spark insists on 480 MiB
    conf = sf.conf()
    assert conf["spark.executor.memory"] == "480m"
    # overhead by hand: maxbytes max(20 x 1.15, 64) = 64 MiB (a cap; its floor is not memory the job holds);
    # off-heap (20 + 200 + 150) x 1.15 = 425.5 -> 426 MiB; native 90 x 1.15 = 103.5 -> 104 MiB; direct 64 MiB;
    # budget = 426 + 480 + 64 + 104 = 1074 MiB; maxphysicalbytes = 1074 - 45 (the JVM's file-backed pages) = 1029 MiB;
    # container + max(16 MiB, 5% = 53.7 -> 54 MiB) = 1128 MiB; overhead = 1128 - 480 = 648 MiB
    assert f"-Dorg.bytedeco.javacpp.maxphysicalbytes={1029 * MiB}" in conf["spark.executor.extraJavaOptions"]
    assert conf["spark.executor.memoryOverhead"] == "648m"
    # per-task split: 4 tasks: off-heap (40 + 400 + 150) x 1.15 = 678.5 -> 679 MiB (+253); budget 1327 MiB,
    # margin 5% = 66.35 -> 67 MiB (+13): overhead +266 MiB
    _, sf4 = settings(4)
    assert sf4.executor_overhead_bytes - sf.executor_overhead_bytes == 266 * MiB
