"""JVM flags that hold a DL4J network's memory, and the same flags for java, Maven, Gradle, Spark, Kubernetes.

Pure Python (no JVM): takes an `Estimate` (pyd4j.memory.estimate, or `measured_estimate()` from
observed peaks) and a total budget, and works out:

    -Xms = -Xmx          the Java heap the job's objects need (ND4J data is not on the heap)
    maxbytes             ND4J off-heap estimate x (1 + headroom)
    MaxDirectMemorySize  small: NIO direct buffers only, which ND4J does not use for arrays
    maxphysicalbytes     heap + direct + (off-heap + JVM native) x (1 + headroom), less the JVM's file-backed
                         pages (JavaCPP counts resident memory less shared pages)
    container limit      heap + direct + (off-heap + JVM native) x (1 + headroom) + margin (JavaCPP checks
                         only at its next Pointer: the margin holds what is allocated before it)
    collector            the one the JVM picks itself in that container (Serial below 1792 MiB or 2 CPUs,
                         else G1), pinned: G1's tables are resident memory the sizes must know about
    JIT node limit       -XX:MaxNodeLimit, pinned: it bounds what C2 takes while it compiles a long job's hot
                         loop, which the sizes must hold

Which limit governs what (checked against ND4J/DL4J 1.0.0-M2.1 with JavaCPP 1.5.7, see
tests/memory/test_limits.py): `-XX:MaxDirectMemorySize` bounds java.nio direct buffers and never
ND4J arrays. JavaCPP's `maxbytes` bounds the bytes of JavaCPP Pointers it tracks (`totalBytes`);
ND4J's CPU backend allocates INDArray buffers inside libnd4j, outside that count. What stops an
ND4J job is `maxphysicalbytes`: each time ND4J creates a Pointer, JavaCPP compares the process's
resident memory less shared pages (heap included) against it and throws "Cannot allocate new ...Pointer" /
"Physical memory usage is too high". So maxphysicalbytes must cover heap + off-heap + JVM native.
"""

from __future__ import annotations

import copy
import math
import shlex
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from pyd4j.inputs import JAVA_LONG_MAX
from pyd4j.memory.estimate import (G1_TERM, HEAP_MIN_BYTES, JIT_NODE_LIMIT, LONG_RUN_BYTES, LONG_RUN_CAPPED_BYTES,
                                   LONG_RUN_TERM, SERVER_CLASS_BYTES, SERVER_CLASS_CPUS, Estimate, EstimateError, Term,
                                   assignments, check_batch, collector)
from pyd4j.output import human_bytes
from pyd4j.units import SizeError, jvm_size, parse_bytes

MiB = 1024**2
JIT_FLAG = "jit_node_limit"
COLLECTOR_FLAG = "collector"
HEAP_ALIGN = 16 * MiB            # -Xmx in whole 16 MiB: G1 regions are 1-4 MiB at these sizes, finer buys nothing
DEFAULT_HEADROOM = 0.15          # estimate error seen in benchmarks/flags_accuracy.py is within +-21% off-heap
DEFAULT_MAX_DIRECT = 16 * MiB    # NIO direct buffers only; NMT 'Other' (where they live) held 31 KB in DL4J training
CONTAINER_MARGIN_MIN = 16 * MiB  # page tables and kernel memory charged to the cgroup, outside RSS
CONTAINER_MARGIN_FRACTION = 0.05  # JavaCPP sees RSS over maxphysicalbytes only at its next Pointer: overshoot room
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
    sized: Estimate = field(repr=False, compare=False)
    """The estimate the sizes come from: the network's, with the terms the pinned JVM settings change."""
    gpu_budget_bytes: int | None = None
    gpu_need_bytes: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    environment: dict[str, str] = field(default_factory=dict)
    """Environment variables the job must start with: the flags are sized for them."""
    environment_reason: str = ""
    collector: str | None = None
    """The garbage collector the flags pin ("Serial" or "G1"), None where they leave the JVM's choice (Spark)."""

    @property
    def breakdown(self) -> dict[str, int]:
        """Bytes per term of the estimate the flags were sized from."""
        return self.sized.breakdown()

    @property
    def sources(self) -> dict[str, str]:
        """Where each term comes from (dl4j-report / measured / estimate)."""
        return {t.name: t.source for t in self.sized.terms}

    @property
    def total_bytes(self) -> int:
        """What the whole process may use: the container memory limit to ask for."""
        return self.container_bytes

    def args(self) -> list[str]:
        return [f.arg for f in self.flags]

    def pinned_args(self) -> list[str]:
        """The HotSpot options these flags pin (C2's node limit, the collector): a JVM other than HotSpot's
        server VM (OpenJ9, a minimal VM without C2) may refuse them."""
        return [f.arg for f in self.flags if f.name in (JIT_FLAG, COLLECTOR_FLAG)]

    def environment_assignments(self) -> list[str]:
        """The environment as NAME=VALUE words (for `env` or a shell line before `java`)."""
        return assignments(self.environment)

    def render(self, fmt: str = "args") -> str:
        """The flags in one of FORMATS."""
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
        if fmt == "spark":
            raise ValueError("Spark settings depend on the cluster shape (executors, cores, worker memory): use "
                             "spark_flags(estimate, SparkShape(...)).render(), or `pyd4j flags --format spark`")
        return _RENDERERS[fmt](self)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for f in fields(self):   # the estimate goes out as its terms' bytes and sources
            if f.name == "sized":
                d.update(breakdown=self.breakdown, sources=self.sources)
            else:
                d[f.name] = self.args() if f.name == "flags" else copy.deepcopy(getattr(self, f.name))
        d["reasons"] = {f.arg: f.reason for f in self.flags}
        d["total_bytes"] = self.total_bytes
        return d


# Name of the measured off-heap term JavaCPP counts (Pointers with a deallocator): `maxbytes` is
# sized from it alone when an estimate has it; the rest of off-heap memory only counts in RSS.
JAVACPP_TERM = "javacpp_peak"
MIN_MAXBYTES = 64 * MiB
"""The least maxbytes written: JavaCPP's own small Pointers (op arguments, shapes) in a job that makes
no others; and never 0, which would mean "no limit" to JavaCPP."""
JVM_FILE_PAGES = 45 * MiB
"""The JVM's resident pages mapped from files (the JDK's, libnd4j's, OpenBLAS's and JavaCPP's libraries:
RssFile 45.4 MiB in a training JVM). JavaCPP's physicalBytes() leaves them out (resident less shared
pages), so maxphysicalbytes is the budget less them."""


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


def pinned_jvm(est: Estimate, headroom: float, max_direct: int) -> tuple[Estimate, str | None]:
    """The estimate under the JVM settings the flags pin, and the collector they pin.

    The collector: sized first without G1's tables, a container that stays under the JVM's server-class line runs
    Serial (the JVM's own choice there, which the flags then pin); one over it runs G1 and keeps its tables.
    The JIT compiler: with C2's node limit pinned (-XX:MaxNodeLimit) a long run's term is the one measured so.
    An estimate without these terms (measured) is left as it is, with no collector."""
    if not any(t.name == G1_TERM for t in est.terms):
        return est, None
    terms = tuple(replace(t, fixed_bytes=LONG_RUN_CAPPED_BYTES) if t.name == LONG_RUN_TERM else t for t in est.terms)
    capped = replace(est, terms=terms)
    serial = replace(capped, terms=tuple(t for t in terms if t.name != G1_TERM))
    gc = collector(_sizes(serial, headroom, max_direct)["container"], est.cpu_count)
    return (serial, gc) if gc == "Serial" else (capped, gc)


def _jit_flag() -> Flag:
    return Flag(JIT_FLAG, f"-XX:MaxNodeLimit={JIT_NODE_LIMIT}", 0,
                f"bounds the graph one C2 compilation may build (JDK default 80000; a method whose graph grows past it "
                f"keeps its C1 code), and with it the compiler's arenas while it compiles the job's hot loop: a long run "
                f"held up to 61 MiB beyond the base without it, at most 36 with it ({human_bytes(LONG_RUN_CAPPED_BYTES)} "
                f"in the sizes instead of {human_bytes(LONG_RUN_BYTES)}); speed 0.96-1.09 of the JDK's default, within the runs' "
                f"noise (benchmarks/jit_cap.py)")


def _collector_flag(gc: str, est: Estimate) -> Flag:
    if gc == "Serial":
        return Flag(COLLECTOR_FLAG, "-XX:+UseSerialGC", 0,
                    f"the collector the JVM picks by itself in this container (under {SERVER_CLASS_BYTES // MiB} MiB, or "
                    f"fewer than {SERVER_CLASS_CPUS} CPUs), pinned so the job gets it wherever these flags go: G1, its "
                    f"choice on a larger machine, keeps its tables resident (measured 3.3-4.7% of the heap more), which "
                    f"these sizes leave out")
    return Flag(COLLECTOR_FLAG, "-XX:+UseG1GC", 0,
                f"the collector the JVM picks by itself in this container ({SERVER_CLASS_CPUS}+ CPUs, "
                f"{SERVER_CLASS_BYTES // MiB}+ MiB), pinned; its tables ({human_bytes(est.term_bytes(G1_TERM))}) are in the sizes")


def _sizes(est: Estimate, headroom: float, max_direct: int) -> dict[str, int]:
    """The sizes behind the flags.

    Floors keep every flag meaningful whatever the estimate: a heap of at least HEAP_MIN_BYTES (an
    estimate without a heap term must not give -Xmx0) and a maxbytes of at least MIN_MAXBYTES (0 means
    unlimited to JavaCPP). The budget is what is resident: heap + direct + the whole off-heap estimate
    (not maxbytes, a cap on part of it) + JVM native, the last two with headroom.

    maxphysicalbytes is where JavaCPP collects ND4J's garbage (arrays whose Java objects the collector
    has not found yet: without it a fit() holds ever more of them) and where it refuses an allocation a
    collection cannot make room for. JavaCPP 1.5.7 counts resident memory less shared pages, so it is the
    budget less the JVM's file-backed pages: JavaCPP collects when the process's RSS reaches the budget,
    and the container's margin holds what is allocated before its next check. (An earlier rule kept it
    below the budget by the largest workspace, from 241 MiB of RSS over it on ResNet50 while glibc kept
    freed arrays: 45 MiB of those were the file pages. With glibc's mmap threshold fixed and this rule, the
    cgroup's charge passed it by 8 MiB at most in 36 runs and 7 in 200-iteration runs, which left at least
    16 MiB under every container limit by VmHWM: benchmarks/README.md.)
    """
    javacpp = _javacpp_part(est)
    heap = max(_mib_up(est.heap_bytes, HEAP_ALIGN), HEAP_MIN_BYTES)
    native = _mib_up(est.native_bytes * (1 + headroom))
    offheap = _mib_up(est.offheap_bytes * (1 + headroom))
    # what JavaCPP counts where it was measured; for an estimated network all of its off-heap memory
    # (harmless where JavaCPP does not count it)
    maxbytes = max(_mib_up((est.offheap_bytes if javacpp is None else javacpp) * (1 + headroom)), MIN_MAXBYTES)
    budget = offheap + heap + max_direct + native
    margin = max(CONTAINER_MARGIN_MIN, _mib_up(budget * CONTAINER_MARGIN_FRACTION))
    maxphys = budget - min(JVM_FILE_PAGES, _mib_up(est.native_bytes))   # the file pages are part of JVM native
    return dict(maxbytes=maxbytes, heap=heap, native=native, maxphysicalbytes=maxphys, budget=budget,
                container=budget + margin, margin=margin)


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
                  limit: int = 1 << 24, pin_jvm: bool = True) -> int:
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
        if pin_jvm:
            e, _ = pinned_jvm(e, headroom, direct)
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
          refuse: bool = True, pin_jvm: bool = True) -> FlagSet:
    """JVM flags that hold `est` with `headroom` to spare, checked against `total` (default: cgroup limit / RAM).

    With `pin_jvm` the flags pin the collector the JVM would pick in their container and C2's node limit (see
    pinned_jvm).

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
    asked = est
    est, gc = pinned_jvm(est, headroom, direct) if pin_jvm else (est, None)
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
             "the limit ND4J really hits (JavaCPP checks the process's memory at every Pointer and collects ND4J's "
             f"garbage there): heap + direct + ND4J off-heap {human_bytes(est.offheap_bytes)} + {pct} + JVM native "
             f"{human_bytes(est.native_bytes)} + {pct}, less the JVM's {human_bytes(JVM_FILE_PAGES)} of file-backed "
             "pages, which JavaCPP does not count: it collects when the process's RSS reaches that budget"),
    ) + ((_jit_flag(), _collector_flag(gc, est)) if gc else ())
    notes = [
        f"container memory limit {human_bytes(s['container'])} = heap + direct + ND4J off-heap and JVM native with "
        f"headroom + {human_bytes(s['margin'])} margin (page tables, kernel memory, and what is allocated between "
        f"JavaCPP's checks: it notices memory over maxphysicalbytes only at its next Pointer)",
    ]
    gpu_need = _gpu_need(est, headroom) if gpu_b is not None else None
    result = FlagSet(model=est.model, batch=est.batch, dtype=est.dtype, mode=est.mode, headroom=headroom,
                     heap_bytes=s["heap"], max_direct_bytes=direct, maxbytes=s["maxbytes"],
                     maxphysicalbytes=s["maxphysicalbytes"], container_bytes=s["container"], budget_bytes=budget,
                     flags=flag_list, sized=est, gpu_budget_bytes=gpu_b,
                     gpu_need_bytes=gpu_need, notes=tuple(notes), environment=dict(est.environment),
                     environment_reason=est.environment_reason(), collector=gc)
    if not refuse:
        return result
    over_host = budget is not None and s["container"] > budget
    over_gpu = gpu_b is not None and gpu_need > gpu_b
    if over_host or over_gpu:
        best = largest_batch(asked, total=budget if over_host or total is not None else None, gpu_mem=gpu_b,
                             headroom=headroom, max_direct=direct, pin_jvm=pin_jvm)
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
        return (f"JavaCPP-tracked off-heap: ND4J off-heap estimate {human_bytes(est.offheap_bytes)} + {pct} headroom, at "
                f"least {human_bytes(MIN_MAXBYTES)} (JavaCPP's default would be -Xmx, unrelated to the network)")
    return (f"what JavaCPP counts: the job's JavaCPP Pointers peaked at {human_bytes(javacpp)} (measured exactly: arrays "
            f"built from Java arrays, Pointers it made) + {pct}, at least {human_bytes(MIN_MAXBYTES)}; the "
            f"{human_bytes(est.offheap_bytes - javacpp)} of libnd4j array buffers and other native memory are not "
            f"counted by JavaCPP, so maxphysicalbytes holds them")


# ----------------------------------------------------------------------------- output formats

def _render_args(fs: FlagSet) -> str:
    return " ".join(fs.args())


def _render_env(fs: FlagSet) -> str:
    return "\n".join([*(f"export {a}" for a in fs.environment_assignments()),
                      f"export JAVA_TOOL_OPTIONS={shlex.quote(' '.join(fs.args()))}"])


def _render_maven(fs: FlagSet) -> str:
    args = " ".join(fs.args())
    exec_args = "\n".join(f"      <argument>{a}</argument>" for a in fs.args())
    env = "".join(f"\n      <{k}>{v}</{k}>" for k, v in fs.environment.items())
    env_block = f"\n    <environmentVariables>{env}\n    </environmentVariables>" if env else ""
    exports = "".join(f"export {a}; " for a in fs.environment_assignments())
    return f"""<!-- surefire / failsafe: tests run in a forked JVM with these flags -->
<plugin>
  <groupId>org.apache.maven.plugins</groupId>
  <artifactId>maven-surefire-plugin</artifactId>
  <configuration>
    <argLine>{args}</argLine>{env_block}
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
    </arguments>{env_block}
  </configuration>
</plugin>
<!-- exec:java runs in Maven's own JVM: {exports}export MAVEN_OPTS="{args}" -->"""


def _render_gradle(fs: FlagSet) -> str:
    items = ", ".join(f"'{a}'" for a in fs.args())
    env = ", ".join(f"'{k}': '{v}'" for k, v in fs.environment.items())
    with_env = "; environment nd4jEnvironment" if env else ""
    return f"""// build.gradle
def nd4jJvmArgs = [{items}]
{f"def nd4jEnvironment = [{env}]" if env else "// no environment variables needed"}
tasks.withType(Test).configureEach {{ jvmArgs nd4jJvmArgs{with_env} }}
tasks.withType(JavaExec).configureEach {{ jvmArgs nd4jJvmArgs{with_env} }}
// with the application plugin: application {{ applicationDefaultJvmArgs = nd4jJvmArgs }}"""


def _render_k8s(fs: FlagSet) -> str:
    mib = _mib_up(fs.container_bytes) // MiB
    env = "".join(f'\n  - name: {k}\n    value: "{v}"' for k, v in fs.environment.items())
    return f"""# container spec: request = limit, so the pod is never squeezed below what ND4J was sized for
resources:
  requests:
    memory: "{mib}Mi"
  limits:
    memory: "{mib}Mi"
env:{env}
  - name: JAVA_TOOL_OPTIONS
    value: "{' '.join(fs.args())}\""""


_RENDERERS = {"args": _render_args, "env": _render_env, "maven": _render_maven, "gradle": _render_gradle,
              "k8s": _render_k8s}


# ----------------------------------------------------------------------------- DL4J on Spark
#
# dl4j-spark's training masters run one task per executor core (spark.task.cpus each), and every
# running task trains its own copy of the network on its partition (ParameterAveragingTrainingMaster:
# fit `averagingFrequency` minibatches of `batchSizePerWorker`, then average). So one executor holds
# `concurrent tasks` x the network's training memory off the heap, plus Spark's own heap and native
# memory. Spark gives the executor `spark.executor.memory` as its heap (-Xmx) and expects everything
# else in `spark.executor.memoryOverhead` (YARN and Kubernetes size the container as their sum and
# kill an executor that goes over it; in standalone mode the node's memory is the limit).

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
    from pyd4j.memory.estimate import HEAP_GC_FACTOR, HEAP_PER_LAYER_BYTES, jvm_native_terms  # noqa: PLC0415

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
    from pyd4j.memory.estimate import HEAP_GC_FACTOR, jvm_native_terms  # noqa: PLC0415

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
        if _sizes(spark_executor_estimate(est, trial), headroom, SPARK_MAX_DIRECT)["container"] <= budget:
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
