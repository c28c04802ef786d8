"""JVM flags that hold a DL4J network's memory, and the same flags for java, Maven, Gradle, Spark, Kubernetes.

Pure Python (no JVM): takes an `Estimate` (pyd4j.memory.estimate, or `measured_estimate()` from
observed peaks) and a total budget, and works out:

    -Xms = -Xmx          the Java heap the job's objects need (ND4J data is not on the heap)
    maxbytes             ND4J off-heap estimate x (1 + headroom)
    MaxDirectMemorySize  small: NIO direct buffers only, which ND4J does not use for arrays
    maxphysicalbytes     maxbytes + heap + direct + JVM native overhead x (1 + headroom)
    container limit      maxphysicalbytes + margin (JavaCPP checks RSS only at its next allocation)

Which limit governs what (checked against ND4J/DL4J 1.0.0-M2.1 with JavaCPP 1.5.7, see
tests/memory/test_limits.py): `-XX:MaxDirectMemorySize` bounds java.nio direct buffers and never
ND4J arrays. JavaCPP's `maxbytes` bounds the bytes of JavaCPP Pointers it tracks (`totalBytes`);
ND4J's CPU backend allocates INDArray buffers inside libnd4j, outside that count. What stops an
ND4J job is `maxphysicalbytes`: each time ND4J creates a Pointer, JavaCPP compares the process's
resident memory (heap included) against it and throws "Cannot allocate new ...Pointer" /
"Physical memory usage is too high". So maxphysicalbytes must cover heap + off-heap + JVM native.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from pyd4j.inputs import JAVA_LONG_MAX
from pyd4j.memory.estimate import HEAP_MIN_BYTES, Estimate, EstimateError, Term, check_batch
from pyd4j.output import human_bytes
from pyd4j.units import SizeError, jvm_size, parse_bytes

MiB = 1024**2
HEAP_ALIGN = 16 * MiB            # -Xmx in whole 16 MiB: G1 regions are 1-4 MiB at these sizes, finer buys nothing
DEFAULT_HEADROOM = 0.15          # estimate error seen in benchmarks/flags_accuracy.py is within +-21% off-heap
DEFAULT_MAX_DIRECT = 16 * MiB    # NIO direct buffers only; NMT 'Other' (where they live) held 31 KB in DL4J training
CONTAINER_MARGIN_MIN = 16 * MiB  # page tables and kernel memory charged to the cgroup, outside RSS
CONTAINER_MARGIN_FRACTION = 0.05  # JavaCPP sees RSS over maxphysicalbytes only at its next Pointer: overshoot room
MIN_MAXBYTES = 16 * MiB          # maxbytes=0 would mean "no limit" to JavaCPP: never write it
CUDA_CONTEXT_BYTES = 512 * MiB  # CUDA context + cuBLAS/cuDNN handles on the device (estimate)
FORMATS = ("args", "env", "maven", "gradle", "spark", "k8s")


class BudgetError(ValueError):
    """The budget cannot hold the network: says how much is needed, by which term, and the largest batch that fits."""

    def __init__(self, message: str, needed_bytes: int, budget_bytes: int, biggest_term: str,
                 largest_batch: int, breakdown: dict[str, int]) -> None:
        super().__init__(message)
        self.needed_bytes = needed_bytes
        self.budget_bytes = budget_bytes
        self.biggest_term = biggest_term
        self.largest_batch = largest_batch
        self.breakdown = breakdown


@dataclass(frozen=True)
class Flag:
    name: str        # e.g. "-Xmx"
    arg: str         # the command-line argument
    bytes: int
    reason: str


@dataclass(frozen=True)
class FlagSet:
    """Flags for one network at one batch, with the sizes they come from."""

    model: str
    batch: int
    dtype: str
    mode: str
    headroom: float
    heap_bytes: int
    max_direct_bytes: int
    maxbytes: int
    maxphysicalbytes: int
    container_bytes: int
    budget_bytes: int | None
    flags: tuple[Flag, ...]
    breakdown: dict[str, int]
    sources: dict[str, str]
    gpu_budget_bytes: int | None = None
    gpu_need_bytes: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total_bytes(self) -> int:
        """What the whole process may use: the container memory limit to ask for."""
        return self.container_bytes

    def args(self) -> list[str]:
        return [f.arg for f in self.flags]

    def render(self, fmt: str = "args") -> str:
        """The flags in one of FORMATS."""
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
        return _RENDERERS[fmt](self)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flags"] = self.args()
        d["reasons"] = {f.arg: f.reason for f in self.flags}
        d["total_bytes"] = self.total_bytes
        return d


# Name of the measured off-heap term JavaCPP counts (Pointers with a deallocator): `maxbytes` is
# sized from it alone when an estimate has it; the rest of off-heap memory only counts in RSS.
JAVACPP_TERM = "javacpp_peak"
MIN_MAXBYTES = 64 * MiB          # JavaCPP's own small Pointers (op arguments, shapes) in a job that makes no others


def measured_estimate(offheap_bytes: int, heap_bytes: int, native_bytes: int, model: str = "measured",
                      batch: int = 1, javacpp_bytes: int | None = None) -> Estimate:
    """An Estimate from observed peaks (e.g. a profiled run), so `flags()` can size from facts.

    With `javacpp_bytes` (the measured peak of JavaCPP's totalBytes), off-heap is two terms: that one,
    which `maxbytes` must hold, and `offheap_bytes`, memory JavaCPP does not count (libnd4j array
    buffers on the CPU backend, other native allocations), which only the RSS limits see."""
    offheap = [Term("offheap_peak", "offheap", "measured", int(offheap_bytes), 0, "measured peak of ND4J off-heap memory")]
    if javacpp_bytes is not None:
        offheap = [Term(JAVACPP_TERM, "offheap", "measured", int(javacpp_bytes), 0,
                        "measured peak of JavaCPP totalBytes (Pointers with a deallocator: arrays built from Java arrays, ...)"),
                   Term("untracked_offheap", "offheap", "measured", int(offheap_bytes), 0,
                        "measured peak of off-heap memory JavaCPP does not count (libnd4j array buffers, native allocations)")]
    terms = (
        *offheap,
        Term("java_heap", "heap", "measured", int(heap_bytes), 0, "measured heap need"),
        Term("jvm_native", "native", "measured", int(native_bytes), 0, "measured JVM native memory"),
    )
    return Estimate(model=model, model_kind="measured", batch=batch, dtype="float32", mode="train", inputs=(),
                    parameter_count=0, layer_count=0, terms=terms, workspace_overallocation=0.0, prefetch_queue=0)


def _mib_up(n: float, unit: int = MiB) -> int:
    """Round up to a whole unit, ignoring float noise (230.00000000000003 MiB is 230 MiB)."""
    return int(math.ceil(n / unit - 1e-9) * unit)


def _size(value: int | str | None, what: str) -> int | None:
    if value is None:
        return None
    try:
        n = parse_bytes(value, what=what)
    except SizeError as err:
        raise EstimateError(str(err)) from None
    if n <= 0:
        raise EstimateError(f"{what} {value!r} must be more than 0 bytes; write e.g. '8g'")
    return n


def _javacpp_part(est: Estimate) -> int | None:
    """The off-heap bytes JavaCPP counts, when the estimate tells them apart (measured runs)."""
    try:
        return est.term_bytes(JAVACPP_TERM)
    except KeyError:
        return None


def _sizes(est: Estimate, headroom: float, max_direct: int) -> dict[str, int]:
    """The sizes behind the flags. Floors keep every flag meaningful whatever the estimate: a heap
    of at least HEAP_MIN_BYTES (an estimate without a heap term must not give -Xmx0) and a
    maxbytes of at least MIN_MAXBYTES (0 means unlimited to JavaCPP)."""
    javacpp = _javacpp_part(est)
    heap = max(_mib_up(est.heap_bytes, HEAP_ALIGN), HEAP_MIN_BYTES)
    native = _mib_up(est.native_bytes * (1 + headroom))
    if javacpp is None:
        # an estimated network: all of its off-heap memory under maxbytes (harmless where JavaCPP does not count it)
        maxbytes = max(_mib_up(est.offheap_bytes * (1 + headroom)), MIN_MAXBYTES)
        maxphys = maxbytes + heap + max_direct + native
    else:
        maxbytes = max(_mib_up(javacpp * (1 + headroom)), MIN_MAXBYTES)
        untracked = _mib_up((est.offheap_bytes - javacpp) * (1 + headroom))
        maxphys = maxbytes + untracked + heap + max_direct + native
    margin = max(CONTAINER_MARGIN_MIN, _mib_up(maxphys * CONTAINER_MARGIN_FRACTION))
    return dict(maxbytes=maxbytes, heap=heap, native=native, maxphysicalbytes=maxphys, container=maxphys + margin, margin=margin)


def _check_estimate(est: Estimate) -> None:
    """Refuse an estimate no flags can follow: a negative term (a network with a negative layer
    size gives one) or a total past what a JVM can hold."""
    if not est.terms:
        raise EstimateError(f"the estimate of {est.model} has no terms: nothing to size flags from")
    for term in est.terms:
        if term.bytes_at(est.batch) < 0:
            raise EstimateError(f"the estimate's term {term.name} is {term.bytes_at(est.batch)} bytes at batch {est.batch}, "
                                f"less than 0 ({term.source}: {term.why}); check the network's layer sizes")
    if est.total_bytes * 5 > JAVA_LONG_MAX:  # with headroom (up to 4x) and margins, flags would leave a Java long
        raise EstimateError(f"{est.model} at batch {est.batch} needs {human_bytes(est.total_bytes)}, beyond what a JVM "
                            f"can be given (a Java long of bytes); lower the batch or check the network's sizes")


def _gpu_need(est: Estimate, headroom: float) -> int:
    return _mib_up(est.offheap_bytes * (1 + headroom)) + CUDA_CONTEXT_BYTES


def default_total() -> int:
    """The budget when none is given: the cgroup memory limit, else physical RAM."""
    from pyd4j.memory.machine import probe  # noqa: PLC0415

    return probe().usable_bytes


def largest_batch(est: Estimate, total: int | str | None = None, gpu_mem: int | str | None = None,
                  headroom: float = DEFAULT_HEADROOM, max_direct: int | str = DEFAULT_MAX_DIRECT,
                  limit: int = 1 << 24) -> int:
    """The largest minibatch whose flags fit `total` host memory (and `gpu_mem` device memory); 0 if none."""
    if not 0 <= headroom <= 4:
        raise EstimateError(f"headroom {headroom!r} must be a fraction between 0 and 4 (0.15 = 15%)")
    _check_estimate(est)
    total_b = _size(total, "total budget") if total is not None else (None if gpu_mem is not None else default_total())
    gpu_b = _size(gpu_mem, "GPU memory budget")
    direct = _size(max_direct, "MaxDirectMemorySize")

    def fits(b: int) -> bool:
        e = est.at_batch(b)
        if e.total_bytes * 5 > JAVA_LONG_MAX:
            return False
        if total_b is not None and _sizes(e, headroom, direct)["container"] > total_b:
            return False
        return gpu_b is None or _gpu_need(e, headroom) <= gpu_b

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    if hi > limit:
        return lo
    while hi - lo > 1:  # fits(lo) and not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def flags(est: Estimate, total: int | str | None = None, headroom: float = DEFAULT_HEADROOM,
          gpu_mem: int | str | None = None, max_direct: int | str = DEFAULT_MAX_DIRECT,
          refuse: bool = True) -> FlagSet:
    """JVM flags that hold `est` with `headroom` to spare, checked against `total` (default: cgroup limit / RAM).

    Raises BudgetError when the budget cannot hold them (refuse=False returns the flags anyway).
    """
    if not isinstance(est, Estimate):
        raise TypeError(f"flags() takes an Estimate (pyd4j.memory.estimate), not {type(est).__name__}")
    check_batch(est.batch)
    if not 0 <= headroom <= 4:
        raise EstimateError(f"headroom {headroom!r} must be a fraction between 0 and 4 (0.15 = 15%)")
    _check_estimate(est)
    budget = _size(total, "total budget") if total is not None else default_total()
    gpu_b = _size(gpu_mem, "GPU memory budget")
    direct = _size(max_direct, "MaxDirectMemorySize")
    s = _sizes(est, headroom, direct)
    pct = f"{headroom:.0%}"
    flag_list = (
        Flag("-Xms", f"-Xms{jvm_size(s['heap'])}", s["heap"],
             "initial heap = maximum: the heap is committed once, so RSS is predictable and never grows past the plan"),
        Flag("-Xmx", f"-Xmx{jvm_size(s['heap'])}", s["heap"],
             f"Java heap for DL4J/ND4J objects (not array data, which is off-heap): {human_bytes(est.heap_bytes)} estimated, "
             f"rounded up to {HEAP_ALIGN // MiB} MiB, at least {HEAP_MIN_BYTES // MiB} MiB"),
        Flag("-XX:MaxDirectMemorySize", f"-XX:MaxDirectMemorySize={jvm_size(direct)}", direct,
             "bounds java.nio direct buffers only (Netty, NIO file I/O); ND4J arrays are JavaCPP/libnd4j memory and "
             "ignore it, so it stays small"),
        Flag("org.bytedeco.javacpp.maxbytes", f"-Dorg.bytedeco.javacpp.maxbytes={s['maxbytes']}", s["maxbytes"],
             _maxbytes_reason(est, pct)),
        Flag("org.bytedeco.javacpp.maxphysicalbytes", f"-Dorg.bytedeco.javacpp.maxphysicalbytes={s['maxphysicalbytes']}",
             s["maxphysicalbytes"],
             f"the limit ND4J really hits (JavaCPP checks process RSS at every Pointer): maxbytes + "
             + ("off-heap memory JavaCPP does not count + " if _javacpp_part(est) is not None else "")
             + f"heap + direct + JVM native {human_bytes(est.native_bytes)} + {pct}"),
    )
    sources = {t.name: t.source for t in est.terms}
    notes = [
        f"container memory limit {human_bytes(s['container'])} = maxphysicalbytes + {human_bytes(s['margin'])} margin: JavaCPP "
        f"notices RSS over maxphysicalbytes only at its next allocation",
    ]
    gpu_need = _gpu_need(est, headroom) if gpu_b is not None else None
    result = FlagSet(model=est.model, batch=est.batch, dtype=est.dtype, mode=est.mode, headroom=headroom,
                     heap_bytes=s["heap"], max_direct_bytes=direct, maxbytes=s["maxbytes"],
                     maxphysicalbytes=s["maxphysicalbytes"], container_bytes=s["container"], budget_bytes=budget,
                     flags=flag_list, breakdown=est.breakdown(), sources=sources, gpu_budget_bytes=gpu_b,
                     gpu_need_bytes=gpu_need, notes=tuple(notes))
    if not refuse:
        return result
    over_host = budget is not None and s["container"] > budget
    over_gpu = gpu_b is not None and gpu_need > gpu_b
    if over_host or over_gpu:
        best = largest_batch(est, total=budget if over_host or total is not None else None, gpu_mem=gpu_b,
                             headroom=headroom, max_direct=direct)
        needed, have, where = (s["container"], budget, "memory budget") if over_host else (gpu_need, gpu_b, "GPU memory")
        biggest = est.biggest_term() if over_host else max(
            (t for t in est.terms if t.region == "offheap"), key=lambda t: t.bytes_at(est.batch), default=est.biggest_term())
        fit = (f"the largest minibatch that fits is {best}" if best else
               f"no minibatch fits: even batch 1 needs more (the fixed part alone is "
               f"{human_bytes(sum(t.fixed_bytes for t in est.terms))})")
        raise BudgetError(
            f"{where} {human_bytes(have)} cannot hold {est.model} at batch {est.batch} ({est.mode}, {est.dtype}): it needs "
            f"{human_bytes(needed)}; the biggest term is {biggest.name} = {human_bytes(biggest.bytes_at(est.batch))} "
            f"({biggest.source}); {fit}. Lower --batch, or raise the budget",
            needed_bytes=needed, budget_bytes=have, biggest_term=biggest.name, largest_batch=best,
            breakdown=est.breakdown())
    return result


def _maxbytes_reason(est: Estimate, pct: str) -> str:
    javacpp = _javacpp_part(est)
    if javacpp is None:
        return (f"JavaCPP-tracked off-heap: ND4J off-heap estimate {human_bytes(est.offheap_bytes)} + {pct} headroom "
                f"(JavaCPP's default would be -Xmx, unrelated to the network)")
    return (f"what JavaCPP counts: the job's JavaCPP Pointers peaked at {human_bytes(javacpp)} (measured exactly: arrays "
            f"built from Java arrays, Pointers it made) + {pct}, at least {human_bytes(MIN_MAXBYTES)}; the "
            f"{human_bytes(est.offheap_bytes - javacpp)} of libnd4j array buffers and other native memory are not "
            f"counted by JavaCPP, so maxphysicalbytes holds them")


# ----------------------------------------------------------------------------- output formats

def _render_args(fs: FlagSet) -> str:
    return " ".join(fs.args())


def _render_env(fs: FlagSet) -> str:
    return f"export JAVA_TOOL_OPTIONS={shlex.quote(' '.join(fs.args()))}"


def _render_maven(fs: FlagSet) -> str:
    args = " ".join(fs.args())
    exec_args = "\n".join(f"      <argument>{a}</argument>" for a in fs.args())
    return f"""<!-- surefire / failsafe: tests run in a forked JVM with these flags -->
<plugin>
  <groupId>org.apache.maven.plugins</groupId>
  <artifactId>maven-surefire-plugin</artifactId>
  <configuration>
    <argLine>{args}</argLine>
  </configuration>
</plugin>
<!-- exec-maven-plugin, goal exec:exec: a child JVM with these flags -->
<plugin>
  <groupId>org.codehaus.mojo</groupId>
  <artifactId>exec-maven-plugin</artifactId>
  <configuration>
    <executable>java</executable>
    <arguments>
{exec_args}
      <argument>-classpath</argument>
      <classpath/>
      <argument>your.main.Class</argument>
    </arguments>
  </configuration>
</plugin>
<!-- exec:java runs in Maven's own JVM: export MAVEN_OPTS="{args}" -->"""


def _render_gradle(fs: FlagSet) -> str:
    items = ", ".join(f"'{a}'" for a in fs.args())
    return f"""// build.gradle
def nd4jJvmArgs = [{items}]
tasks.withType(Test).configureEach {{ jvmArgs nd4jJvmArgs }}
tasks.withType(JavaExec).configureEach {{ jvmArgs nd4jJvmArgs }}
// with the application plugin: application {{ applicationDefaultJvmArgs = nd4jJvmArgs }}"""


# Spark keeps 300 MiB of every executor/driver heap for itself and refuses a heap under 1.5x that.
SPARK_RESERVED_HEAP = 300 * MiB
SPARK_MIN_HEAP = 450 * MiB


def spark_conf(fs: FlagSet) -> dict[str, str]:
    """spark-submit --conf values: heap (plus Spark's own reserved 300 MiB, at least Spark's 450 MiB
    minimum) as spark.*.memory, everything off-heap in memoryOverhead."""
    extra = " ".join(f.arg for f in fs.flags if f.name not in ("-Xms", "-Xmx"))  # Spark forbids -Xmx here
    overhead = _mib_up(fs.container_bytes - fs.heap_bytes)
    heap = _mib_up(max(fs.heap_bytes + SPARK_RESERVED_HEAP, SPARK_MIN_HEAP))
    conf = {}
    for role in ("executor", "driver"):
        conf[f"spark.{role}.memory"] = f"{heap // MiB}m"
        conf[f"spark.{role}.memoryOverhead"] = f"{overhead // MiB}m"
        conf[f"spark.{role}.extraJavaOptions"] = extra
    return conf


def _render_spark(fs: FlagSet) -> str:
    lines = ["spark-submit \\"]
    for key, value in spark_conf(fs).items():
        lines.append(f"  --conf {shlex.quote(f'{key}={value}')} \\")
    lines.append("  ...  # memoryOverhead covers ND4J off-heap + JVM native (driver overhead applies in cluster mode)")
    return "\n".join(lines)


def _render_k8s(fs: FlagSet) -> str:
    mib = _mib_up(fs.container_bytes) // MiB
    return f"""# container spec: request = limit, so the pod is never squeezed below what ND4J was sized for
resources:
  requests:
    memory: "{mib}Mi"
  limits:
    memory: "{mib}Mi"
env:
  - name: JAVA_TOOL_OPTIONS
    value: "{' '.join(fs.args())}\""""


_RENDERERS = {"args": _render_args, "env": _render_env, "maven": _render_maven, "gradle": _render_gradle,
              "spark": _render_spark, "k8s": _render_k8s}
