"""The JVM's own resident memory beside the heap and ND4J's arrays: what a container limit and JavaCPP's
maxphysicalbytes must hold for the JVM itself, measured, and the collector the JVM picks. Part of the one
memory model (`pyd4j.memory.estimate`), which adds these terms to the network's."""

from __future__ import annotations

from pyd4j.dl4j.fitmem import Term

MiB = 1024**2

# JVM native overhead model: the process's resident memory besides the heap and ND4J's arrays (what
# a container limit and maxphysicalbytes must hold for the JVM itself). Measured as RSS, not NMT's
# committed memory: NMT commits G1's tables and thread stacks that are never touched. Measured by
# benchmarks/flags_accuracy.py as peak RSS - heap (pre-touched) - ND4J's off-heap growth, JDK 17, 2 CPUs:
# 102-118 MiB on 3-layer networks, 141 MiB on ResNet50 (175 vertices) under the Serial collector. It grows
# with the network (ND4J's cached shape and op descriptors, oneDNN's primitives, JIT code): base + per layer,
# least squares over 51 runs of 14 networks (residual sd 3.9 MiB, measured/model at most 1.09).
JVM_NATIVE_BASE_BYTES = 100 * MiB    # classes + CDS, JIT code, thread stacks, libnd4j/oneDNN/OpenBLAS code
NATIVE_PER_LAYER_BYTES = 160 * 1024  # per layer/vertex: ND4J's cached shapes and op descriptors, oneDNN primitives
NATIVE_PER_CPU_BYTES = 4 * MiB       # per OpenMP worker: GEMM packing buffer and malloc arena (not measured beyond 2 CPUs)
# What a long run holds beyond the base, which was fitted on 3-iteration runs: the JIT compiler's code and the
# arenas C2 compiles the job's hot loop in (NMT's "Arena Chunk": 12-15 MiB in 3 iterations, 27-78 MiB in
# deeplearning4j-examples' SumModel, 2000 fast iterations), and what else settles over thousands of iterations.
# Measured as need - (heap + ND4J off-heap + base) over 1000-3000 iterations with the heap pre-touched
# (benchmarks/jit_cap.py): up to 61 MiB with the JDK's C2 (an LSTM; SumModel, once refused by JavaCPP under flags
# without this term, 44), at most 36 MiB with C2's node limit pinned, which the flags for one JVM do.
LONG_RUN_TERM = "long_run_native"
LONG_RUN_BYTES = 48 * MiB            # the JDK's C2 (Spark's settings, which pin no JVM option; + the native headroom holds 61)
LONG_RUN_CAPPED_BYTES = 40 * MiB     # with -XX:MaxNodeLimit=JIT_NODE_LIMIT
# C2's node limit (JDK default 80000) bounds the graph one compilation builds, and with it the compilation's arenas:
# a method whose graph would grow past it is given up and keeps its C1 code.
JIT_NODE_LIMIT = 20000
# The collector: G1's remembered sets and marking tables are resident in proportion to the heap; Serial's are
# not (0.3-1.4 MiB by NMT). Measured against Serial on the same runs (benchmarks/collector_choice.py): 3.3-4.7% of
# the heap. The JVM picks G1 itself only on a "server-class machine": 2 or more CPUs and 1792 MiB or more of
# memory, which in a container is its limit; pyd4j's flags pin the collector they were sized for.
G1_TABLES_FRACTION = 0.05
G1_TERM = "g1_tables"
SERVER_CLASS_BYTES = 1792 * MiB      # JDK: is_server_class_machine() needs 2 GiB less 256 MiB
SERVER_CLASS_CPUS = 2


def jvm_native_bytes(cpus: int, layers: int) -> int:
    """The JVM's and native libraries' resident memory outside the heap and ND4J's arrays, under any collector
    (the JIT compiler's peak not included: a term of its own)."""
    return JVM_NATIVE_BASE_BYTES + NATIVE_PER_LAYER_BYTES * layers + NATIVE_PER_CPU_BYTES * cpus


def jvm_native_terms(heap_bytes: int, cpus: int, layers: int) -> list[Term]:
    """The JVM's own resident memory: what any collector needs, and G1's tables (which flags drop where they pin
    the Serial collector)."""
    return [Term("jvm_native", "native", "estimate", jvm_native_bytes(cpus, layers), 0,
                 f"the JVM's and native libraries' resident memory: {JVM_NATIVE_BASE_BYTES // MiB} MiB (classes, JIT code, "
                 f"threads, libnd4j/oneDNN/OpenBLAS) + {NATIVE_PER_LAYER_BYTES // 1024} KiB x {layers} layers (ND4J's "
                 f"cached shapes, oneDNN's primitives) + {NATIVE_PER_CPU_BYTES // MiB} MiB x {cpus} CPUs; measured as "
                 f"RSS, 102-141 MiB from 3 to 175 layers"),
            Term(LONG_RUN_TERM, "native", "measured", LONG_RUN_BYTES, 0,
                 f"what a long run holds beyond the base (fitted on 3 iterations): the JIT compiler's code and C2's "
                 f"arenas while it compiles the job's hot loop; measured up to 61 MiB over 1000-3000 iterations, "
                 f"{LONG_RUN_CAPPED_BYTES // MiB} MiB where C2's node limit is pinned (at most 36 MiB measured)"),
            Term(G1_TERM, "native", "estimate", int(heap_bytes * G1_TABLES_FRACTION), 0,
                 f"G1's remembered sets and marking tables, {G1_TABLES_FRACTION:.0%} of the heap, measured against the "
                 f"Serial collector; only where the JVM runs G1 (the JVM's default with {SERVER_CLASS_CPUS}+ CPUs and "
                 f"{SERVER_CLASS_BYTES // MiB}+ MiB)")]


def collector(container_bytes: int, cpus: int) -> str:
    """The collector a JDK 17 JVM picks by itself in a container of `container_bytes` with `cpus` CPUs."""
    return "G1" if cpus >= SERVER_CLASS_CPUS and container_bytes >= SERVER_CLASS_BYTES else "Serial"
