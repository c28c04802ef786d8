"""The JVM flags that hold a DL4J network's memory: the sizes and the reason for each.

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
from dataclasses import dataclass, field, fields, replace
from typing import Any

from pyd4j.inputs import JAVA_LONG_MAX
from pyd4j.memory.flag_formats import render
from pyd4j.memory.estimate import HEAP_MIN_BYTES, Estimate, EstimateError, Term, assignments, check_batch
from pyd4j.memory.jvm_overhead import (G1_TERM, JIT_NODE_LIMIT, LONG_RUN_BYTES, LONG_RUN_CAPPED_BYTES, LONG_RUN_TERM,
                                       SERVER_CLASS_BYTES, SERVER_CLASS_CPUS, collector)
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
        """The flags in one of pyd4j.memory.flag_formats.FORMATS."""
        return render(self, fmt)

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
    gc = collector(jvm_sizes(serial, headroom, max_direct)["container"], est.cpu_count)
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


def jvm_sizes(est: Estimate, headroom: float, max_direct: int) -> dict[str, int]:
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
        if total_b is not None and jvm_sizes(e, headroom, direct)["container"] > total_b:
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
    s = jvm_sizes(est, headroom, direct)
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

