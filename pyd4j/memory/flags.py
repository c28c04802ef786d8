"""JVM flags that hold a DL4J network's memory, and the same flags for java, Maven, Gradle, Spark, Kubernetes:
the one flag generator, pure Python (no JVM).

This module is its public face; the work is split by concept:

    pyd4j.memory.flag_sizing   the sizes (-Xmx, maxbytes, maxphysicalbytes, container, collector, JIT cap) from
                               an `Estimate` and a budget, each flag with its reason; the largest batch that fits
    pyd4j.memory.flag_formats  a `FlagSet` written as java arguments, environment, Maven, Gradle, Kubernetes
    pyd4j.memory.spark_jvm     DL4J on Spark: an executor's and the driver's memory, spark-submit settings
"""

from __future__ import annotations

from pyd4j.memory.flag_formats import FORMATS, render
from pyd4j.memory.flag_sizing import (COLLECTOR_FLAG, CONTAINER_MARGIN_FRACTION, CONTAINER_MARGIN_MIN,
                                      CUDA_CONTEXT_BYTES, DEFAULT_HEADROOM, DEFAULT_MAX_DIRECT, HEAP_ALIGN, JAVACPP_TERM,
                                      JIT_FLAG, JVM_FILE_PAGES, MIN_MAXBYTES, BudgetError, Flag, FlagSet, default_total,
                                      flags, jvm_sizes, largest_batch, measured_estimate, pinned_jvm)
from pyd4j.memory.spark_jvm import (SPARK_DRIVER_LIVE_HEAP, SPARK_DRIVER_NATIVE, SPARK_EXECUTOR_LIVE_HEAP,
                                    SPARK_EXECUTOR_NATIVE, SPARK_FETCH_TO_MEM, SPARK_MAX_DIRECT, SPARK_MIN_HEAP,
                                    SPARK_RESERVED_HEAP, SparkFlags, SparkShape, spark_driver_estimate,
                                    spark_executor_estimate, spark_flags, spark_measured_estimate, spark_measured_flags)

__all__ = [
    "COLLECTOR_FLAG", "CONTAINER_MARGIN_FRACTION", "CONTAINER_MARGIN_MIN", "CUDA_CONTEXT_BYTES", "DEFAULT_HEADROOM",
    "DEFAULT_MAX_DIRECT", "FORMATS", "HEAP_ALIGN", "JAVACPP_TERM", "JIT_FLAG", "JVM_FILE_PAGES", "MIN_MAXBYTES",
    "SPARK_DRIVER_LIVE_HEAP", "SPARK_DRIVER_NATIVE", "SPARK_EXECUTOR_LIVE_HEAP", "SPARK_EXECUTOR_NATIVE",
    "SPARK_FETCH_TO_MEM", "SPARK_MAX_DIRECT", "SPARK_MIN_HEAP", "SPARK_RESERVED_HEAP", "BudgetError", "Flag", "FlagSet",
    "SparkFlags", "SparkShape", "default_total", "flags", "jvm_sizes", "largest_batch", "measured_estimate",
    "pinned_jvm", "render", "spark_driver_estimate", "spark_executor_estimate", "spark_flags",
    "spark_measured_estimate", "spark_measured_flags",
]
