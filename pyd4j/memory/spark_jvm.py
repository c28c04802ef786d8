"""DL4J on Spark: the memory of an executor and of the driver, and the spark-submit settings that hold them.

dl4j-spark's training masters run one task per executor core (spark.task.cpus each), and every
running task trains its own copy of the network on its partition (ParameterAveragingTrainingMaster:
fit `averagingFrequency` minibatches of `batchSizePerWorker`, then average). So one executor holds
`concurrent tasks` x the network's training memory off the heap, plus Spark's own heap and native
memory. Spark gives the executor `spark.executor.memory` as its heap (-Xmx) and expects everything
else in `spark.executor.memoryOverhead` (YARN and Kubernetes size the container as their sum and
kill an executor that goes over it; in standalone mode the node's memory is the limit). The flags
come from pyd4j.memory.flag_sizing, the one flag generator.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, replace
from typing import Any

from pyd4j.memory.estimate import HEAP_GC_FACTOR, HEAP_PER_LAYER_BYTES, Estimate, EstimateError, Term
from pyd4j.memory.jvm_overhead import jvm_native_terms
from pyd4j.memory.flag_sizing import (DEFAULT_HEADROOM, JAVACPP_TERM, BudgetError, FlagSet, default_total, flags,
                                      jvm_sizes, largest_batch)
from pyd4j.output import human_bytes

MiB = 1024**2

SPARK_RESERVED_HEAP = 300 * MiB   # Spark's reserved memory: its unified pool is (heap - 300 MiB) x spark.memory.fraction
SPARK_MIN_HEAP = 480 * MiB        # Spark refuses a heap whose Runtime.maxMemory() is under 1.5 x 300 MiB (450 MiB)
SPARK_MAX_DIRECT = 64 * MiB       # Netty's RPC and block-transfer buffers are NIO direct: 13-20 MiB measured per JVM
# Spark 3.5 refuses to start an executor whose Netty direct memory is below this setting (200 MiB by
# default); blocks above it are streamed to disk instead of memory.
SPARK_FETCH_TO_MEM = SPARK_MAX_DIRECT // 2
# Spark's own share of an executor/driver JVM beyond a plain DL4J one (pyd4j.memory.estimate's model),
# measured with pyd4j's agent on the digits MLP (1 MiB of ND4J memory, so the rest is Spark and the JVM)
# on a loopback standalone cluster (1-core executors, JDK 17, Spark 3.5.8): executor live heap 43-45 MiB
# vs DL4J's 35 MiB; executor RSS outside the heap 301-314 MiB; driver 45 MiB live heap and 256 MiB
# outside the heap. The native constants are those figures less what pyd4j.memory.estimate's model
# gives a plain DL4J JVM at Spark's 480 MiB heap on one core (122 MiB). benchmarks/spark.py checks them
# on other networks.
SPARK_EXECUTOR_LIVE_HEAP = 10 * MiB   # block manager, RPC endpoints, task and broadcast state
SPARK_EXECUTOR_NATIVE = 184 * MiB     # Spark's classes (metaspace), Netty arenas, ~95 more threads, malloc arenas
SPARK_DRIVER_LIVE_HEAP = 10 * MiB
SPARK_DRIVER_NATIVE = 134 * MiB


@dataclass(frozen=True)
class SparkShape:
    """The cluster a DL4J-on-Spark job runs on; the network's batch is the batch per worker (batchSizePerWorker)."""

    executors: int = 1
    executor_cores: int = 1
    worker_memory: int | None = None   # bytes a worker (node) has for its executors; None: this machine's memory
    executors_per_worker: int = 1
    task_cpus: int = 1

    def __post_init__(self) -> None:
        for name in ("executors", "executor_cores", "executors_per_worker", "task_cpus"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise EstimateError(f"{name.replace('_', '-')} {value!r} must be a whole number of at least 1")
        if self.task_cpus > self.executor_cores:
            raise EstimateError(f"task-cpus {self.task_cpus} is more than executor-cores {self.executor_cores}: no task "
                                f"could ever start; use task-cpus <= executor-cores")
        if self.worker_memory is not None and self.worker_memory <= 0:
            raise EstimateError(f"worker-memory {self.worker_memory!r} must be more than 0 bytes; write e.g. '8g'")

    @property
    def concurrent_tasks(self) -> int:
        """Tasks an executor runs at once, each training its own copy of the network."""
        return self.executor_cores // self.task_cpus

    def with_cores(self, cores: int) -> "SparkShape":
        return SparkShape(self.executors, cores, self.worker_memory, self.executors_per_worker, min(self.task_cpus, cores))


def _scaled_term(term: Term, times: int, why: str) -> Term:
    return replace(term, fixed_bytes=term.fixed_bytes * times, per_sample_bytes=term.per_sample_bytes * times,
                   why=f"{term.why}; {why}" if times != 1 else term.why)


def _reserved_term(heap_so_far: int, role: str) -> Term:
    reserved = max(SPARK_RESERVED_HEAP, SPARK_MIN_HEAP - heap_so_far)
    return Term("spark_reserved_heap", "heap", "estimate", reserved, 0,
                f"Spark's reserved memory ({SPARK_RESERVED_HEAP // MiB} MiB; the {role} heap must be at least "
                f"{SPARK_MIN_HEAP // MiB} MiB): its execution/storage pool, incl. the cached training data, is "
                f"(heap - {SPARK_RESERVED_HEAP // MiB} MiB) x spark.memory.fraction")


def spark_executor_estimate(est: Estimate, shape: SparkShape) -> Estimate:
    """One executor's memory: `concurrent_tasks` copies of `est` (the network training at the batch per worker)
    off the heap, DL4J's and Spark's objects on the heap, the JVM's and Spark's native memory."""
    tasks = shape.concurrent_tasks
    copies = f"x {tasks} concurrent tasks, each training its own copy"
    terms = [_scaled_term(t, tasks, copies) for t in est.terms if t.region == "offheap"]
    heap = [t for t in est.terms if t.region == "heap"]
    if tasks > 1:
        heap.append(Term("task_copies_heap", "heap", "estimate",
                         int((tasks - 1) * est.layer_count * HEAP_PER_LAYER_BYTES * HEAP_GC_FACTOR), 0,
                         f"{tasks - 1} more network copies' layer objects: {HEAP_PER_LAYER_BYTES // MiB} MiB x "
                         f"{est.layer_count} layers x {HEAP_GC_FACTOR:g}"))
    heap.append(Term("spark_executor_heap", "heap", "measured", int(SPARK_EXECUTOR_LIVE_HEAP * HEAP_GC_FACTOR), 0,
                     f"Spark's live objects in an executor (block manager, RPC, task state) "
                     f"~{SPARK_EXECUTOR_LIVE_HEAP // MiB} MiB x {HEAP_GC_FACTOR:g}, measured"))
    heap.append(_reserved_term(sum(t.fixed_bytes for t in heap), "executor"))
    heap_total = sum(t.bytes_at(est.batch) for t in heap)
    terms += heap
    # a Spark JVM runs G1 (the JVM's choice on any worker of 2+ cores and 1792+ MiB; the flags leave it alone)
    terms += jvm_native_terms(heap_total, shape.executor_cores, est.layer_count)   # ND4J's caches are per process
    terms.append(Term("spark_executor_native", "native", "measured", SPARK_EXECUTOR_NATIVE, 0,
                      "Spark in the executor beyond a plain DL4J JVM: its classes, Netty buffers, ~95 more threads; "
                      "measured"))
    return Estimate(model=est.model, model_kind=est.model_kind, batch=est.batch, dtype=est.dtype, mode=est.mode,
                    inputs=est.inputs, parameter_count=est.parameter_count, layer_count=est.layer_count,
                    terms=tuple(terms), workspace_overallocation=est.workspace_overallocation,
                    prefetch_queue=est.prefetch_queue, cpu_count=shape.executor_cores,
                    notes=est.notes + (f"Spark executor: {tasks} concurrent task(s) x the network's training memory.",),
                    environment=dict(est.environment),
                    without_environment=_scaled_term(est.without_environment, tasks, copies) if est.without_environment else None)


def spark_driver_estimate(est: Estimate, cores: int = 1) -> Estimate:
    """The driver (client mode): the master copy of the network (parameters, updater state) and the averaged
    parameters coming back, DL4J's and Spark's objects, the JVM's and Spark's native memory."""
    keep = {"parameters": "the master copy of the network", "updater_state": "the master copy's updater state",
            "gradients": "averaged parameters coming back from the workers (one parameter-sized array)"}
    terms = [Term(t.name, t.region, t.source, t.bytes_at(est.batch), 0, f"{t.why}: {keep[t.name]}")
             for t in est.terms if t.name in keep]
    heap = [t for t in est.terms if t.region == "heap"]
    heap.append(Term("spark_driver_heap", "heap", "measured", int(SPARK_DRIVER_LIVE_HEAP * HEAP_GC_FACTOR), 0,
                     f"Spark's live objects in the driver (scheduler, block manager) ~{SPARK_DRIVER_LIVE_HEAP // MiB} MiB x {HEAP_GC_FACTOR:g}, measured"))
    heap.append(_reserved_term(sum(t.fixed_bytes for t in heap), "driver"))
    heap_total = sum(t.fixed_bytes for t in heap)
    terms += heap
    terms += jvm_native_terms(heap_total, cores, est.layer_count)
    terms.append(Term("spark_driver_native", "native", "measured", SPARK_DRIVER_NATIVE, 0,
                      "Spark in the driver beyond a plain DL4J JVM: its classes, Netty buffers, scheduler threads; measured"))
    return Estimate(model=est.model, model_kind=est.model_kind, batch=est.batch, dtype=est.dtype, mode=est.mode,
                    inputs=est.inputs, parameter_count=est.parameter_count, layer_count=est.layer_count,
                    terms=tuple(terms), workspace_overallocation=est.workspace_overallocation, prefetch_queue=0,
                    cpu_count=cores)


@dataclass(frozen=True)
class SparkFlags:
    """spark-submit settings for a DL4J job on a cluster shape: the executors' and the driver's flags."""

    shape: SparkShape
    executor: FlagSet
    driver: FlagSet
    executor_estimate: Estimate
    driver_estimate: Estimate

    @property
    def executor_memory_bytes(self) -> int:
        """spark.executor.memory: the executor's heap."""
        return self.executor.heap_bytes

    @property
    def executor_overhead_bytes(self) -> int:
        """spark.executor.memoryOverhead: everything of the executor's container outside its heap."""
        return self.executor.container_bytes - self.executor.heap_bytes

    @property
    def executor_container_bytes(self) -> int:
        return self.executor.container_bytes

    def conf(self) -> dict[str, str]:
        """spark.* settings, each a --conf of spark-submit (or a line of a properties file)."""
        return {key: value for key, value, _ in self.settings()}

    def settings(self) -> list[tuple[str, str, str]]:
        """(key, value, reason) for every setting."""
        sh = self.shape
        def opts(fs: FlagSet) -> str:
            return " ".join(f.arg for f in fs.flags if f.name not in ("-Xms", "-Xmx"))  # Spark refuses -Xmx there
        out = [
            ("spark.executor.memory", f"{self.executor.heap_bytes // MiB}m",
             f"executor heap: {human_bytes(self.executor_estimate.heap_bytes)} (DL4J's and Spark's objects and Spark's "
             f"{SPARK_RESERVED_HEAP // MiB} MiB reserve)"),
            ("spark.executor.memoryOverhead", f"{self.executor_overhead_bytes // MiB}m",
             f"everything else in the executor: ND4J off-heap {human_bytes(self.executor_estimate.offheap_bytes)} for "
             f"{sh.concurrent_tasks} concurrent task(s), JVM + Spark native {human_bytes(self.executor_estimate.native_bytes)}, "
             f"NIO direct, headroom; YARN/Kubernetes size the container as memory + memoryOverhead"),
            ("spark.executor.cores", str(sh.executor_cores), "cores per executor"),
            ("spark.executor.instances", str(sh.executors), "executors (YARN, Kubernetes)"),
            ("spark.cores.max", str(sh.executors * sh.executor_cores), "total cores: executors x cores (standalone)"),
            ("spark.executor.extraJavaOptions", opts(self.executor),
             "JavaCPP limits for the executor: maxphysicalbytes (checked against the process's RSS) covers heap + "
             "off-heap; on the CPU backend maxbytes does not bound ND4J arrays; MaxDirectMemorySize for Netty"),
            ("spark.network.maxRemoteBlockSizeFetchToMem", f"{SPARK_FETCH_TO_MEM // MiB}m",
             f"below -XX:MaxDirectMemorySize={SPARK_MAX_DIRECT // MiB}m, as Spark 3.5 requires of Netty's direct memory "
             f"(its default, 200 MiB, would need a 200 MiB direct pool); larger remote blocks go to disk"),
            ("spark.executorEnv.OMP_NUM_THREADS", str(sh.task_cpus),
             f"each task's ND4J ops use spark.task.cpus={sh.task_cpus} thread(s), so {sh.concurrent_tasks} concurrent "
             f"task(s) do not oversubscribe the executor's {sh.executor_cores} core(s)"),
            *((f"spark.executorEnv.{k}", v, f"the executors' environment: {self.executor.environment_reason}")
              for k, v in self.executor.environment.items()),
            ("spark.driver.memory", f"{self.driver.heap_bytes // MiB}m",
             f"driver heap: {human_bytes(self.driver_estimate.heap_bytes)}"),
            ("spark.driver.memoryOverhead", f"{(self.driver.container_bytes - self.driver.heap_bytes) // MiB}m",
             "driver off-heap (cluster deploy mode only): the master copy of the network and the averaged parameters"),
            ("spark.driver.extraJavaOptions", opts(self.driver), "JavaCPP limits for the driver"),
        ]
        if sh.task_cpus > 1:
            out.insert(5, ("spark.task.cpus", str(sh.task_cpus),
                           f"{sh.task_cpus} cores per task: {sh.concurrent_tasks} network copies at a time per executor"))
        return out

    def local_conf(self) -> dict[str, str]:
        """For `--master local[N]`: one JVM is driver and executor, so the driver gets the executor's heap and
        JavaCPP limits (N = executor_cores runs the same concurrent tasks)."""
        conf = self.conf()
        conf["spark.driver.memory"] = conf["spark.executor.memory"]
        conf["spark.driver.extraJavaOptions"] = conf["spark.executor.extraJavaOptions"]
        return conf

    def render(self) -> str:
        lines = ["spark-submit \\"]
        for key, value in self.conf().items():
            lines.append(f"  --conf {shlex.quote(f'{key}={value}')} \\")
        lines.append("  ...  # executor container = memory + memoryOverhead; the driver's overhead applies in cluster mode")
        if self.executor.environment:
            lines.append(f"# with --master local[N] the driver trains too: start spark-submit with "
                         f"{' '.join(self.executor.environment_assignments())} in its environment")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"shape": asdict(self.shape), "concurrent_tasks": self.shape.concurrent_tasks, "conf": self.conf(),
                "reasons": {k: why for k, _, why in self.settings()},
                "executor_memory_bytes": self.executor_memory_bytes, "executor_overhead_bytes": self.executor_overhead_bytes,
                "executor_container_bytes": self.executor_container_bytes,
                "executor": self.executor.to_dict(), "driver": self.driver.to_dict(),
                "executor_breakdown": self.executor_estimate.breakdown(),
                "driver_breakdown": self.driver_estimate.breakdown()}


def _largest_cores(est: Estimate, shape: SparkShape, budget: int, headroom: float) -> int:
    """The most cores per executor whose concurrent tasks fit `budget` at this batch; 0 if not even 1."""
    for cores in range(shape.executor_cores, 0, -1):
        trial = shape.with_cores(cores)
        if jvm_sizes(spark_executor_estimate(est, trial), headroom, SPARK_MAX_DIRECT)["container"] <= budget:
            return cores
    return 0


def spark_flags(est: Estimate, shape: SparkShape, headroom: float = DEFAULT_HEADROOM, refuse: bool = True) -> SparkFlags:
    """Spark settings that hold `est` (the network at the batch per worker) on `shape`.

    Raises BudgetError when a worker's memory cannot hold its executors, naming the term that does not fit,
    the largest batch per worker and the most cores per executor that do (refuse=False returns them anyway).
    """
    if not isinstance(est, Estimate):
        raise TypeError(f"spark_flags() takes an Estimate (pyd4j.memory.estimate), not {type(est).__name__}")
    worker = shape.worker_memory if shape.worker_memory is not None else default_total()
    per_executor = worker // shape.executors_per_worker
    exec_est = spark_executor_estimate(est, shape)
    driver_est = spark_driver_estimate(est)
    executor = flags(exec_est, total=per_executor, headroom=headroom, max_direct=SPARK_MAX_DIRECT, refuse=False,
                     pin_jvm=False)
    driver = flags(driver_est, total=None if refuse else per_executor, headroom=headroom, max_direct=SPARK_MAX_DIRECT,
                   refuse=False, pin_jvm=False)
    result = SparkFlags(shape, executor, driver, exec_est, driver_est)
    if refuse and executor.container_bytes > per_executor:
        best_batch = largest_batch(exec_est, total=per_executor, headroom=headroom, max_direct=SPARK_MAX_DIRECT,
                                   pin_jvm=False)
        best_cores = _largest_cores(est, shape, per_executor, headroom)
        # the term the shape multiplies (ND4J memory per concurrent task), not Spark's fixed reserve
        biggest = max((t for t in exec_est.terms if t.region == "offheap"), key=lambda t: t.bytes_at(exec_est.batch))
        fits = [f"the largest batch per worker that fits is {best_batch}" if best_batch else
                "no batch per worker fits at these cores"]
        if shape.executor_cores > 1:
            fits.append(f"at batch {est.batch}, at most {best_cores} core(s) per executor fit" if best_cores else
                        f"not even 1 core per executor fits at batch {est.batch}")
            if best_cores and shape.task_cpus == 1 and shape.concurrent_tasks > best_cores:
                tc = -(-shape.executor_cores // best_cores)
                fits.append(f"or keep {shape.executor_cores} cores with spark.task.cpus={tc} "
                            f"({shape.executor_cores // tc} network copies at a time)")
        where = (f"worker memory {human_bytes(worker)}" + (f" / {shape.executors_per_worker} executors"
                                                           if shape.executors_per_worker > 1 else ""))
        raise BudgetError(
            f"{where} cannot hold an executor running {shape.concurrent_tasks} concurrent task(s) of {est.model} at "
            f"batch {est.batch} per worker: each executor needs {human_bytes(executor.container_bytes)} (heap "
            f"{human_bytes(executor.heap_bytes)} + overhead {human_bytes(executor.container_bytes - executor.heap_bytes)}); "
            f"the biggest term is {biggest.name} = {human_bytes(biggest.bytes_at(exec_est.batch))} ({biggest.source}); "
            f"{'; '.join(fits)}. Lower the batch per worker or the cores per executor, or give the workers more memory",
            needed_bytes=executor.container_bytes, budget_bytes=per_executor, biggest_term=biggest.name,
            largest_batch=best_batch, breakdown=exec_est.breakdown())
    return result


def spark_measured_estimate(per_task_javacpp: int, per_task_offheap: int, fixed_offheap: int, heap: int, native: int,
                            tasks: int, model: str = "measured", role: str = "executor") -> Estimate:
    """An executor's (or driver's) memory from a profiled run: what one task's network used off the heap
    (measured peak of the executor divided by the tasks it ran at once), times `tasks`, plus what the
    JVM and Spark used once per executor (measured: off-heap outside ND4J, heap, metaspace and code).
    The heap is at least Spark's minimum. Spark's own memory is in the measurement, so no model term is added."""
    terms = [
        Term(JAVACPP_TERM, "offheap", "measured", int(per_task_javacpp) * tasks, 0,
             f"measured peak of JavaCPP totalBytes per task ({human_bytes(per_task_javacpp)}) x {tasks} concurrent task(s)"),
        Term("untracked_offheap", "offheap", "measured", int(per_task_offheap) * tasks, 0,
             f"measured peak of libnd4j buffers JavaCPP does not count, per task ({human_bytes(per_task_offheap)}) "
             f"x {tasks} concurrent task(s)"),
        Term("spark_jvm_offheap", "offheap", "measured", int(fixed_offheap), 0,
             f"measured memory outside the heap and ND4J, once per {role} (Spark's Netty arenas, threads, malloc)"),
        Term("java_heap", "heap", "measured", max(int(heap), SPARK_MIN_HEAP), 0,
             f"measured heap need, at least Spark's {SPARK_MIN_HEAP // MiB} MiB minimum"),
        Term("jvm_native", "native", "measured", int(native), 0, "measured metaspace + code cache"),
    ]
    return Estimate(model=model, model_kind="measured", batch=1, dtype="float32", mode="train", inputs=(),
                    parameter_count=0, layer_count=0, terms=tuple(terms), workspace_overallocation=0.0, prefetch_queue=0,
                    cpu_count=max(tasks, 1))


def spark_measured_flags(executor: Estimate, driver: Estimate, shape: SparkShape,
                         headroom: float = DEFAULT_HEADROOM) -> SparkFlags:
    """Spark settings from measured executor and driver estimates (spark_measured_estimate), by the one flag generator."""
    return SparkFlags(shape, flags(executor, headroom=headroom, max_direct=SPARK_MAX_DIRECT, refuse=False),
                      flags(driver, headroom=headroom, max_direct=SPARK_MAX_DIRECT, refuse=False), executor, driver)

