"""What a job needs, read off a profiled run, and the flags for it.

The flags come from pyd4j.memory.flags (the one flag generator), fed with the measured peaks
through `measured_estimate`; `measured_need` is the only arithmetic here: which measured number
stands for which need. A limit is never set below what the job was shown to need: a run whose
peaks are not the whole job's (pyd4j.profile.flatness.sizing_scope) leaves every limit it did not
die at at the value the job ran with.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from pyd4j.malloc import MALLOC_ENV
from pyd4j.memory.flags import DEFAULT_HEADROOM, FlagSet, flags, measured_estimate
from pyd4j.output import human_bytes
from pyd4j.profile.diagnose import diagnose
from pyd4j.profile.finding import Finding
from pyd4j.profile.flatness import sizing_scope
from pyd4j.profile.oom import LimitRefusal, limit_refusals
from pyd4j.profile.timeline import Timeline
from pyd4j.units import jvm_size, parse_bytes

MIB = 1 << 20
HEAP_PER_LIVE = 3.0          # heap = 3x the live set after full collections: room for young collections
MIN_HEAP = 256 * MIB
# Failures at a limit, and the recommended flag that sets that limit.
LIMIT_FLAGS = {"oom-heap": "-Xmx", "oom-javacpp-maxbytes": "-Dorg.bytedeco.javacpp.maxbytes",
               "oom-javacpp-maxphysicalbytes": "-Dorg.bytedeco.javacpp.maxphysicalbytes",
               "oom-direct": "-XX:MaxDirectMemorySize"}


@dataclass(frozen=True)
class MeasuredNeed:
    """What the job needs, read off a timeline (bytes), and where each number came from."""

    javacpp: int          # JavaCPP Pointers (count against maxbytes)
    offheap: int          # off-heap memory JavaCPP does not count (libnd4j buffers, native allocations)
    heap: int
    native: int
    why: dict[str, str] = field(default_factory=dict)


def measured_need(t: Timeline, findings: list[Finding] | None = None) -> MeasuredNeed:
    """Peaks -> needs, per allocator. A run that died at a limit only shows a lower bound: the need
    is then at least what its error names, or twice the measured peak."""
    peaks, limits = t.peaks(), t.limits()
    findings = diagnose(t) if findings is None else findings
    javacpp = peaks["javacpp_total"] or 0
    why = {"javacpp": f"JavaCPP totalBytes peaked at {human_bytes(javacpp)} (the agent's exact peak; largest single "
                      f"Pointer {human_bytes(peaks['javacpp_largest'])})"}
    native_rss = native_peak(t)
    nd4j = peaks["nd4j"] or 0
    offheap = max(native_rss - javacpp, nd4j, 0)
    why["offheap"] = (f"off-heap memory JavaCPP does not count: the larger of native memory outside the JVM's areas "
                      f"({human_bytes(native_rss)}, where the heap's resident pages were read) less JavaCPP's peak, "
                      f"and libnd4j buffers at their peak ({human_bytes(nd4j)})")
    live = peaks["heap_live"]
    if live:
        heap = max(int(live * HEAP_PER_LIVE), MIN_HEAP)
        why["heap"] = (f"{HEAP_PER_LIVE:g}x the largest live heap after full collections ({human_bytes(live)}), "
                       f"at least {human_bytes(MIN_HEAP)}")
    elif peaks["heap_after_gc"]:
        heap = max(int(peaks["heap_after_gc"] * HEAP_PER_LIVE), MIN_HEAP)
        why["heap"] = (f"no full collection measured the live heap: {HEAP_PER_LIVE:g}x the heap left after young "
                       f"collections ({human_bytes(peaks['heap_after_gc'])}, an upper bound of the live heap)")
    else:
        heap = max(peaks["heap_used"] or 0, MIN_HEAP)
        why["heap"] = f"no GC happened: the largest heap used, at least {human_bytes(MIN_HEAP)}"
    native = peaks["nonheap_used"] or 0
    why["native"] = "peak metaspace + code cache"
    kinds = {f.kind for f in findings}
    if "oom-heap" in kinds:
        heap = max(heap, 2 * (limits["heap_max"] or 0))
        why["heap"] += "; the run died of heap OOM, so at least twice the old -Xmx"
    need = MeasuredNeed(javacpp=int(javacpp), offheap=int(offheap), heap=int(heap), native=int(native), why=why)
    refusals = limit_refusals(t)
    if refusals:
        need = raised_by(need, refusals, limits["javacpp_max_physical"])
    elif "killed" in kinds or "oom-javacpp-maxphysicalbytes" in kinds:
        need = replace(need, offheap=2 * need.offheap,
                       why=dict(need.why, offheap=need.why["offheap"] + "; the run was killed or refused at its RSS "
                                                                            "limit, so twice that"))
    return need


def native_peak(t: Timeline) -> float:
    """Native memory's peak where the heap's resident pages were read (every few seconds): between reads the
    heap's share is interpolated, and a heap that grew and shrank in between shows as native memory that
    was never there, spikes a longer run meets more of. The interpolated peak where there were no reads."""
    exact = t.native_at_reads()
    exact = exact[~np.isnan(exact)]
    return float(exact.max()) if exact.size else float(t.peaks()["native"] or 0)


def raised_by(need: MeasuredNeed, refusals: list[LimitRefusal], max_physical: int | None) -> MeasuredNeed:
    """The need after JavaCPP refused allocations: at least what each error says was needed.

    `totalBytes (256 + 1144M) > maxBytes (253M)` means JavaCPP had to hold 256 B + 1144 MiB: the
    JavaCPP need is at least that. `physicalBytes (P + B) > maxPhysicalBytes (M)` means the process
    needed P + B of RSS: the memory JavaCPP does not count grows by what was missing."""
    why = dict(need.why)
    javacpp, offheap = need.javacpp, need.offheap
    for r in refusals:
        if r.limit == "maxbytes" and r.needed > javacpp:
            javacpp = r.needed
            why["javacpp"] = why.get("javacpp", "") + f"; a run was refused with '{r.text}', so at least {human_bytes(r.needed)}"
        elif r.limit == "maxphysicalbytes":
            missing = r.needed - (max_physical or r.limit_bytes)
            if missing > 0:
                offheap += missing
                why["offheap"] = why.get("offheap", "") + f"; a run was refused with '{r.text}', so {human_bytes(missing)} more"
    return replace(need, javacpp=int(javacpp), offheap=int(offheap), why=why)


def larger(a: MeasuredNeed, b: MeasuredNeed) -> MeasuredNeed:
    """Each need the larger of two runs', with the reason of the one it came from."""
    why = {}
    values = {}
    for name in ("javacpp", "offheap", "heap", "native"):
        pick = a if getattr(a, name) >= getattr(b, name) else b
        values[name] = getattr(pick, name)
        why[name] = pick.why.get(name, "")
    return MeasuredNeed(**values, why=why)


def flags_for(need: MeasuredNeed, model: str, total: str | int | None, headroom: float) -> FlagSet:
    """Flags from a need, by the one flag generator."""
    est = measured_estimate(need.offheap + need.javacpp, need.heap, need.native, model=model, javacpp_bytes=need.javacpp)
    return flags(est, total=parse_bytes(total, "budget") if total is not None else None, headroom=headroom)


def environment_for(findings: list[str]) -> dict[str, str]:
    """The environment the flags assume, for a job whose first run lacked it: glibc's mmap threshold fixed
    (MALLOC_ENV), as `pyd4j flags` writes it. Left to move, glibc keeps freed arrays resident at its own
    pace, and the job's native memory outside the JVM differs from run to run by more than the flags'
    headroom (an older-release job's re-run came within 5% of maxphysicalbytes on a loaded machine)."""
    return dict(MALLOC_ENV) if "malloc-threshold-default" in findings else {}


def keep_unshown_limits(flagset: FlagSet, t: Timeline, findings: list[Finding]) -> FlagSet:
    """After a run whose peaks are not the whole job's (pyd4j.profile.flatness: it did not complete, or
    it ended at its window or --timeout without its memory shown flat), no limit below what the job ran
    with, except the one it died at (whose new value is raised from the failure anyway): the job may
    need more later, and a tune that lowered a limit it never saw the job reach would make it fail there."""
    scope = sizing_scope(t)
    if scope.whole_job:
        return flagset
    limits = t.limits()
    died_at = {LIMIT_FLAGS[f.kind] for f in findings if f.kind in LIMIT_FLAGS}
    own = {"-Xmx": limits["heap_max"], "-XX:MaxDirectMemorySize": limits["max_direct"],
           "org.bytedeco.javacpp.maxbytes": limits["javacpp_max"],
           "org.bytedeco.javacpp.maxphysicalbytes": limits["javacpp_max_physical"]}
    changed = {}
    new_flags = []
    for f in flagset.flags:
        limit = own.get(f.name)
        flag_arg = f.arg.split("=", 1)[0] if f.arg.startswith("-D") else f.name
        if limit and limit > f.bytes and flag_arg not in died_at:
            value = jvm_size(limit) if f.name.startswith("-X") else str(int(limit))
            arg = f"{f.name}{value}" if f.name == "-Xmx" else f"{f.arg.split('=', 1)[0]}={value}"
            f = replace(f, arg=arg, bytes=int(limit),
                        reason=f"kept at the job's own {human_bytes(limit)}, which the run ran with: {scope.why}; "
                               f"it measured only {human_bytes(f.bytes)} with headroom")
            changed[f.name] = int(limit)
        new_flags.append(f)
    if not changed:
        return flagset
    physical = changed.get("org.bytedeco.javacpp.maxphysicalbytes", flagset.maxphysicalbytes)
    container = max(flagset.container_bytes, physical + (flagset.container_bytes - flagset.maxphysicalbytes))
    again = ("a run that trains to its end (or a window that shows the memory flat) shows what they can be lowered to"
             if scope.ended in ("window", "timeout") else "a completed re-run shows what they can be lowered to")
    note = (f"limits the run did not die at keep the values the job ran with ({', '.join(changed)}): {scope.why}; "
            f"{again}")
    return replace(flagset, flags=tuple(new_flags), heap_bytes=changed.get("-Xmx", flagset.heap_bytes),
                   max_direct_bytes=changed.get("-XX:MaxDirectMemorySize", flagset.max_direct_bytes),
                   maxbytes=changed.get("org.bytedeco.javacpp.maxbytes", flagset.maxbytes),
                   maxphysicalbytes=physical, container_bytes=container, notes=(*flagset.notes, note))


def recommend(t: Timeline, total: str | int | None = None, headroom: float = DEFAULT_HEADROOM) -> tuple[FlagSet, MeasuredNeed]:
    """Flags for the measured run, from the flag generator."""
    findings = diagnose(t)
    need = measured_need(t, findings)
    return keep_unshown_limits(flags_for(need, t.name, total, headroom), t, findings), need
