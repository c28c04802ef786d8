"""What went wrong in a profiled run, with the evidence and the fix.

- OOM kinds told apart: Java heap, JavaCPP maxbytes, JavaCPP maxphysicalbytes, NIO direct
  buffers, metaspace, and a SIGKILL by the container's or the kernel's OOM killer (RSS near a
  memory limit), using the error the agent caught, the job's stderr and its exit status; a signal
  with no memory limit near is a kill from outside, not memory.
- Leaks: kept memory (live heap, libnd4j buffers, JavaCPP bytes, measured after full collections)
  rising with the iterations at 99% confidence, named by the call site that allocated it; "not
  enough data" rather than a guess.
- GC pressure: share of wall time spent in GC, overall and in the worst window.
- Workspace spills: an ND4J workspace that keeps spilling needs a larger initial size.
"""

from __future__ import annotations

import re
import signal
from dataclasses import asdict, dataclass, field

import numpy as np

from pyd4j.jvm.errors import (
    DirectBufferOutOfMemoryError,
    JavaCppOutOfMemoryError,
    JavaOutOfMemoryError,
    MetaspaceOutOfMemoryError,
    python_class_for,
)
from pyd4j.malloc import MALLOC_ENV
from pyd4j.memory.machine import physical_bytes
from pyd4j.output import human_bytes
from pyd4j.profile.signals import signal_name
from pyd4j.profile.startup import agent_refusal_in, startup_error_in
from pyd4j.profile.timeline import Timeline
from pyd4j.units import jvm_size

MIB = 1 << 20
# Leak verdicts (over live points: memory left after full collections, see the leaks section).
LEAK_MIN_POINTS = 5           # after warm-up; 5 points in rising order is p = 1/120 one-sided
LEAK_MIN_ITERATIONS = 20      # span of iterations the points cover (or seconds, for jobs without iterations)
LEAK_MIN_SECONDS = 20
LEAK_CONFIDENCE = 0.99
LEAK_MIN_GROWTH = 16 * MIB    # off-heap kept memory grown over the points
LEAK_MIN_GROWTH_HEAP = 8 * MIB
LEAK_MIN_RELATIVE_HEAP = 0.25  # ... and a quarter of the live heap: caches DL4J/ND4J grow once are not leaks
LEAK_LATE_SHARE = 0.5         # a leak still rises over the later half of the run at half its rate or more
ENVELOPE_SAMPLES = 20         # samples per window of the off-heap envelope (2 s at the default 100 ms)
ENVELOPE_GCS = 3              # young collections per window of the heap envelope
GC_SHARE_WARN = 0.10
MEASURING_GC_CAUSES = ("Diagnostic Command", "Heap Inspection Initiated GC")
GC_WINDOW_S = 5.0
GC_WINDOW_WARN = 0.30
SPILL_MIN_SAMPLES = 3
SPILL_MIN_SHARE = 0.2
KILL_NEAR = 0.9               # a SIGKILL is an OOM kill when RSS came this close to a memory limit

_OOM_LINE = re.compile(r"(?:java\.lang\.)?OutOfMemoryError:?\s*(.*)")
# JavaCPP's refusals name what was in use, what was asked for, and the limit (formatBytes: K/M/G/T, truncated)
_SIZE = r"(\d+)([KMGT]?)"
_JAVACPP_LIMITS = (
    ("maxbytes", re.compile(rf"totalBytes \({_SIZE} \+ {_SIZE}\) > maxBytes \({_SIZE}\)")),
    ("maxphysicalbytes", re.compile(rf"physicalBytes \({_SIZE}(?: \+ {_SIZE})?\) > maxPhysicalBytes \({_SIZE}\)")),
)


@dataclass
class Finding:
    """One diagnosis: what, how sure, the numbers behind it, and the fix (flags when there are)."""

    kind: str            # oom-heap, oom-javacpp-maxbytes, oom-javacpp-maxphysicalbytes, oom-direct,
    #                      oom-metaspace, killed (OOM killer), killed-signal (not memory), leak-offheap, leak-heap, gc-pressure, workspace-spill,
    #                      crash, native-crash, native-memory, near-limit, plan-not-applied, prefetch-died,
    #                      malloc-threshold-default
    severity: str        # error | warning | info
    title: str
    evidence: list[str]
    fix: str
    flags: list[str] = field(default_factory=list)
    numbers: dict[str, float | int | None] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def diagnose(timeline: Timeline) -> list[Finding]:
    """All findings for a run, most serious first."""
    if not timeline.samples:
        return [_no_data(timeline), *_plan_not_applied(timeline), *_prefetch_died(timeline)]
    # the iterator's own error first: the job's exit code follows from it
    findings = [*_prefetch_died(timeline), *_oom(timeline), *_leaks(timeline), *_gc_pressure(timeline), *_spills(timeline),
                *_near_limits(timeline), *_no_iterations(timeline), *_plan_not_applied(timeline),
                *_malloc_threshold(timeline)]
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: order.get(f.severity, 3))


def _no_data(t: Timeline) -> Finding:
    """No sample at all: nothing was measured, which is never a clean bill of health."""
    refused = agent_refusal_in(t.run_dir)
    if refused is not None:  # the agent's own reason, not a guess
        return Finding("no-data", "error", f"No measurements: the profiling agent refused its options ({refused})",
                       [f"[pyd4j agent] profiling agent not started ({refused})", *stderr_tail(t)],
                       "fix the option value it names (in -Dpyd4j.agent=... or the -javaagent arguments; "
                       "e.g. interval=100, live=5) and run again")
    why = ["the agent wrote no sample: " + ("it started but the job ended before its first tick"
                                           if t.start else "it never started (no start line in the timeline)")]
    why += stderr_tail(t)
    return Finding("no-data", "error", "No measurements: the run recorded 0 samples", why,
                   "run the job again and let it run longer; check stderr.log in the run directory for why it ended "
                   "(a wrong main class, a missing jar) or why the agent did not start ('[pyd4j agent]' lines)")


def _no_iterations(t: Timeline) -> list[Finding]:
    """A run with samples but no DL4J iteration: what was measured is start-up, not training."""
    if t.iterations() or not t.start.get("hooks", True):
        return []
    ended_normally = t.exit_code == 0 and not t.meta.get("interrupted")
    return [Finding("no-iterations", "warning" if ended_normally else "error", "No training iteration was seen",
                    [f"{len(t.samples)} samples over {t.duration_s():.1f} s and no MultiLayerNetwork/ComputationGraph "
                     f"fit() iteration completed"],
                    "profile the job while it trains (it may have ended or been stopped during start-up); jobs "
                    "that do not train through fit() are measured by time instead")]


def _malloc_threshold(t: Timeline) -> list[Finding]:
    """A training JVM whose environment leaves glibc's mmap threshold to move: the arrays DL4J frees
    may stay resident, which pyd4j's memory model (and the flags sized from it) assume they do not."""
    nd4j = t.nd4j_settings()
    if nd4j is None or "malloc_mmap_threshold" not in nd4j or nd4j["malloc_mmap_threshold"]:
        return []   # not a training JVM, an agent that does not say, or the threshold set
    setting = " ".join(f"{k}={v}" for k, v in MALLOC_ENV.items())
    return [Finding("malloc-threshold-default", "info", "glibc's mmap threshold is left to move in this job",
                    [f"the training JVM's environment has no {next(iter(MALLOC_ENV))}: glibc raises its mmap threshold "
                     "as large blocks are freed (up to 32 MiB), and freed arrays of DL4J's below it stay resident"],
                    f"start the job with {setting} in its environment (pyd4j flags writes it into every format): "
                    "measured on DL4J's fit(), the native peak fell to 0.70-0.98 of glibc's default at 0.97-1.03 of "
                    "the speed; pyd4j's estimates and flags assume it")]


def plan_refusals(t: Timeline) -> list[dict]:
    """The agent's "plan" events whose plan could not be applied to a network (plan= given)."""
    return [e for e in t.network_events
            if e.get("type") == "plan" and (e.get("result") or {}).get("status") != "attached"]


def _plan_not_applied(t: Timeline) -> list[Finding]:
    """A plan= the agent could not apply: the job was ended with the reason, or (plan_fallback=fit,
    asked for) trained with DL4J's own fit(); either way the run did not train under the plan."""
    refused = plan_refusals(t)
    if not refused:
        return []
    e = refused[-1]
    reason = (e.get("result") or {}).get("reason") or "no reason given"
    fallback = e.get("then") == "fit"
    then = ("the job trained with DL4J's own fit(), as plan_fallback=fit asks" if fallback
            else f"the agent ended the job (exit code {t.exit_code})")
    return [Finding("plan-not-applied", "warning" if fallback else "error",
                    f"Plan not applied: {reason.splitlines()[0]}",
                    [f"plan {e.get('file')}: {reason}", then],
                    "write the plan from this job's network (`pyd4j tune --plan POLICY` or `pyd4j plan --model "
                    "net.json --emit-plan FILE`); a network planned training refuses trains with DL4J's own fit() "
                    "(drop plan=, or add plan_fallback=fit to the agent's options)")]


def _prefetch_died(t: Timeline) -> list[Finding]:
    """ND4J's prefetch thread died on the job's iterator (the agent's PrefetchGuard): the job's next()
    threw on another thread, where fit() would have waited for it forever."""
    died = [n["prefetch_died"] for n in t.notes if isinstance(n.get("prefetch_died"), dict)]
    if not died:
        return []
    d = died[0]
    interrupted = any(isinstance(n.get("prefetch_interrupted"), dict) for n in t.notes)
    then = ("the training thread was waiting for that batch, which ND4J never ends: the agent interrupted it, and "
            "fit() failed instead of hanging" if interrupted else
            "the agent did not find the training thread waiting for it: fit() sees the error at its next batch (without "
            "the agent's hooks, hooks=false, the agent cannot tell the training thread, and the job may hang until stopped)")
    return [Finding("prefetch-died", "error", f"The data iterator failed on ND4J's prefetch thread: {d.get('cause')}",
                    [f"thread {d.get('thread')}: {d.get('exception')}", f"at {d.get('frames')}", then],
                    "fix the iterator's next() at the frames above; the error shows on the training thread, with no "
                    "hang, when the iterator's asyncSupported() returns false (fit() then calls next() itself)")]


# -- out of memory ---------------------------------------------------------------------------

def _error_texts(timeline: Timeline) -> list[str]:
    """OutOfMemoryError messages (with their causes) from the agent and from the job's stderr."""
    texts = []
    for e in timeline.errors:
        if "OutOfMemoryError" in (e.get("class") or "") or "OutOfMemoryError" in (e.get("cause") or ""):
            texts.append(f"{e.get('message') or ''} {e.get('cause') or ''}".strip())
    stderr = timeline.run_dir / "stderr.log"
    if stderr.exists():
        lines = stderr.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if "OutOfMemoryError" in line and not line.lstrip().startswith("at "):
                match = _OOM_LINE.search(line)
                text = match.group(1) if match else line
                causes = [lines[j] for j in range(i + 1, min(i + 60, len(lines))) if lines[j].startswith("Caused by:")]
                texts.append(" ".join([text, *causes]))
    return texts


@dataclass(frozen=True)
class LimitRefusal:
    """A JavaCPP limit error, read back: the limit, the bytes in use plus the bytes asked for, and the limit's value."""

    limit: str          # "maxbytes" or "maxphysicalbytes"
    needed: int         # in use + requested: what the limit had to allow (upper bound of JavaCPP's rounding)
    limit_bytes: int
    text: str


def _javacpp_bytes(number: str | None, unit: str | None, upper: bool) -> int:
    """JavaCPP's Pointer.formatBytes value back to bytes; it truncates, so `upper` gives the largest it may be."""
    if number is None:
        return 0
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit or ""]
    return int(number) * scale + (scale - 1 if upper and scale > 1 else 0)


def limit_refusals(t: Timeline) -> list[LimitRefusal]:
    """Every JavaCPP limit refusal the run shows (agent errors and stderr), with its numbers."""
    out = []
    for text in _error_texts(t):
        for limit, pattern in _JAVACPP_LIMITS:
            m = pattern.search(text)
            if m:
                used = _javacpp_bytes(m.group(1), m.group(2), True)
                asked = _javacpp_bytes(m.group(3), m.group(4), True)
                out.append(LimitRefusal(limit, used + asked, _javacpp_bytes(m.group(5), m.group(6), False), m.group(0)))
    return out


def stderr_tail(timeline: Timeline, lines: int = 3) -> list[str]:
    """The job's last few stderr lines (stack frames and the JVM's "Picked up JAVA_TOOL_OPTIONS" echo of
    the agent's option left out): why a job that never reached ND4J died."""
    stderr = timeline.run_dir / "stderr.log"
    if not stderr.exists():
        return []
    text = [ln.strip() for ln in stderr.read_text(errors="replace").splitlines()]
    return [ln for ln in text if ln and not ln.startswith(("at ", "Picked up "))][-lines:]


def _last(timeline: Timeline, name: str) -> float | None:
    values = timeline.series(name) if timeline.samples else np.array([])
    values = values[~np.isnan(values)]
    return float(values[-1]) if values.size else None


def _grow(peak: float | None, factor: float = 1.5, floor: int = 64 * MIB) -> int:
    """A limit with headroom over a measured peak, rounded up to whole MiB."""
    value = max(int((peak or 0) * factor), floor)
    return -(-value // MIB) * MIB


def _oom(t: Timeline) -> list[Finding]:
    texts = _error_texts(t)
    limits = t.limits()
    peaks = t.peaks()
    out: list[Finding] = []
    seen: set[str] = set()
    for text in texts:
        cls = python_class_for(["java.lang.OutOfMemoryError"], text)
        if cls is JavaCppOutOfMemoryError:
            prop = JavaCppOutOfMemoryError(text).limit_property
            physical = prop.endswith("maxphysicalbytes")
            kind = "oom-javacpp-maxphysicalbytes" if physical else "oom-javacpp-maxbytes"
            if kind in seen:
                continue
            seen.add(kind)
            limit = limits["javacpp_max_physical" if physical else "javacpp_max"]
            used = peaks["javacpp_physical" if physical else "javacpp_total"]
            new = _grow(max(used or 0, limit or 0), 2.0)
            out.append(Finding(
                kind, "error",
                f"JavaCPP refused an off-heap allocation: {'maxPhysicalBytes' if physical else 'maxBytes'} reached",
                [f"error: {text[:300]}",
                 f"JavaCPP {'physicalBytes (process RSS)' if physical else 'totalBytes'} peaked at {human_bytes(used)} "
                 f"against the limit {human_bytes(limit)}"],
                f"raise -D{prop} (it bounds {'the whole process RSS JavaCPP sees' if physical else 'memory JavaCPP Pointers allocate'}; "
                f"-Xmx and -XX:MaxDirectMemorySize do not); if it keeps growing per iteration, look at the leak finding first",
                [f"-D{prop}={new}"], {"limit": limit, "peak": used},
            ))
        elif cls is DirectBufferOutOfMemoryError:
            if "oom-direct" in seen:
                continue
            seen.add("oom-direct")
            new = _grow(max(peaks["direct_used"] or 0, limits["max_direct"] or 0), 2.0)
            out.append(Finding(
                "oom-direct", "error", "NIO direct buffer memory exhausted",
                [f"error: {text[:300]}", f"direct buffers peaked at {human_bytes(peaks['direct_used'])} of {human_bytes(limits['max_direct'])}"],
                "raise -XX:MaxDirectMemorySize (NIO direct buffers only; ND4J arrays are bounded by JavaCPP's limits)",
                [f"-XX:MaxDirectMemorySize={jvm_size(new)}"], {"limit": limits["max_direct"], "peak": peaks["direct_used"]},
            ))
        elif cls is MetaspaceOutOfMemoryError:
            if "oom-metaspace" in seen:
                continue
            seen.add("oom-metaspace")
            out.append(Finding("oom-metaspace", "error", "Metaspace exhausted", [f"error: {text[:300]}"],
                               MetaspaceOutOfMemoryError.fix, ["-XX:MaxMetaspaceSize=512m"]))
        elif cls is JavaOutOfMemoryError:
            if "oom-heap" in seen:
                continue
            seen.add("oom-heap")
            live = peaks["heap_live"] or peaks["heap_used"]
            new = _grow(max(live or 0, limits["heap_max"] or 0), 2.0)
            out.append(Finding(
                "oom-heap", "error", "Java heap exhausted",
                [f"error: {text[:300]}",
                 f"heap used peaked at {human_bytes(peaks['heap_used'])} of -Xmx {human_bytes(limits['heap_max'])}; "
                 + (f"live heap after full collections reached {human_bytes(peaks['heap_live'])}" if peaks["heap_live"]
                    else "no full collection measured the live heap")],
                "raise -Xmx (ND4J array data is off-heap and does not need heap; the heap holds Java objects, "
                "INDArray wrappers and DataSets); if the live heap grows per iteration, look at the leak finding first",
                [f"-Xmx{jvm_size(new)}"], {"limit": limits["heap_max"], "peak": peaks["heap_used"]},
            ))
    code = t.exit_code
    signum = _signal_of(t)
    fatal = _fatal_error(t) if not out and code not in (None, 0) and not t.meta.get("interrupted") else None
    if fatal is not None:   # the JVM's own report: it aborted itself (134), no one killed it
        summary = fatal.summary()
        out.append(Finding("native-crash" if fatal.kind == "crash" else "native-memory", "error",
                           f"{summary[0].upper()}{summary[1:]} (exit status {code})", fatal.evidence(), fatal.fix(),
                           [], {"exit_status": code, "pid": fatal.pid}))
    elif not out and signum is not None and not t.meta.get("interrupted"):
        out.append(_killed(t, code, signum))
    elif not out and code not in (None, 0) and not t.meta.get("interrupted") \
            and not any(e.get("then") == "exit" for e in plan_refusals(t)):   # the plan-not-applied finding says why
        launcher = startup_error_in(t.run_dir)
        if launcher is not None:  # the JVM refused to start the job: a wrong class, jar or option
            out.append(Finding("crash", "error", f"The job did not start: {launcher.what} (exit code {code})",
                               [launcher.line], launcher.fix))
            return out
        msgs = [f"{e.get('class')}: {e.get('message')}" for e in t.errors] or stderr_tail(t)
        out.append(Finding("crash", "error", f"The job exited with code {code}", msgs or ["see stderr.log in the run directory"],
                           "read the job's stderr.log; no memory limit was reported as the cause"))
    return out


def _fatal_error(t: Timeline):
    """The JVM fatal error report of this lane's JVM in the run's output (any JVM's when the lane has no pid)."""
    from pyd4j.profile import fatal_error  # noqa: PLC0415

    found = fatal_error.find(t.run_dir) if t.run_dir is not None else []
    pid = t.jvm.pid if t.jvm is not None else None
    return next((f for f in found if pid is None or f.pid in (None, pid)), None)


def _signal_of(t: Timeline) -> int | None:
    """The signal that ended the job: recorded by the launcher, or read from a shell's 128 + N for SIGKILL
    (a launcher script whose JVM was killed exits 137 itself)."""
    code = t.exit_code
    if t.meta.get("signal"):
        return int(t.meta["signal"])
    if code is not None and code < 0:   # a run recorded before statuses were normalised
        return -code
    return signal.SIGKILL if code == 137 else None


def _memory_near(t: Timeline) -> list[str]:
    """Evidence that a kill came from an OOM killer: the job's RSS within KILL_NEAR of the container limit
    pyd4j runs in, of the memory the JVM itself saw (its own container's limit), or of the machine's RAM."""
    rss = t.peaks()["rss"] or 0
    last = _last(t, "rss") or 0
    near = []
    cgroup = t.limits()["cgroup"]
    jvm = t.start.get("memory_limit") if (t.start.get("memory_limit") or -1) > 0 else None
    ram = physical_bytes()
    for name, limit in (("the container memory limit", cgroup), ("the memory limit the JVM saw", jvm),
                        ("the machine's RAM", ram)):
        if limit and max(rss, last) >= KILL_NEAR * limit:
            near.append(f"RSS reached {human_bytes(max(rss, last))}, {max(rss, last) / limit:.0%} of {name} "
                        f"{human_bytes(limit)}")
    return near


def _killed(t: Timeline, code: int | None, signum: int) -> Finding:
    """A job a signal ended without a Java error: an OOM killer only when memory was near a limit."""
    name = signal_name(signum)
    rss = t.peaks()["rss"]
    cgroup = t.limits()["cgroup"]
    ram = physical_bytes()
    jvm = t.start.get("memory_limit") if (t.start.get("memory_limit") or -1) > 0 else None
    if jvm and jvm < ram and not cgroup:
        cgroup = jvm   # the JVM ran in a container of its own
    ended = f"exit status {code} ({name}, no Java error)"
    near = _memory_near(t) if signum == signal.SIGKILL else []
    if near:
        evidence = [f"{ended}: the kernel or container OOM killer ends a process with SIGKILL when it exceeds "
                    f"its memory limit", *near]
        budget = f"under {human_bytes(cgroup)}" if cgroup else "under the machine's memory"
        return Finding(
            "killed", "error", f"Killed by the container or kernel OOM killer ({ended})", evidence,
            f"set -Xmx plus -Dorg.bytedeco.javacpp.maxphysicalbytes so that heap + off-heap stay {budget}, "
            f"so the JVM fails with a Java error (or lives) instead of being killed; or raise the container limit",
            [], {"rss_peak": rss, "cgroup_limit": cgroup, "exit_status": code, "signal": signum})
    limits = f"container limit {human_bytes(cgroup)}" if cgroup else "no container memory limit"
    evidence = [f"{ended}",
                f"RSS peaked at {human_bytes(rss)} (last sample {human_bytes(_last(t, 'rss'))}); {limits}, RAM "
                f"{human_bytes(ram)}: no memory limit was near, so no OOM killer had a reason to act"]
    return Finding(
        "killed-signal", "error", f"Killed by a signal from outside ({name}, exit status {code}): not memory", evidence,
        f"something outside the job sent {name}: a user or script (kill), a scheduler's time limit, a supervisor or "
        f"CI timeout; find it there. Memory limits are not the cause, so no memory flag changes this",
        [], {"rss_peak": rss, "cgroup_limit": cgroup, "exit_status": code, "signal": signum})


# -- leaks -----------------------------------------------------------------------------------
#
# Growth is judged only on what is left after collections that can free it. Heap after young
# collections still holds old-generation garbage, and array buffers are freed only when the Java
# objects owning them are collected, so both grow in healthy jobs until an old or full collection.
# The agent writes a "live" point after every full collection (the job's own, or its own heap
# inspection, the same as `jcmd GC.class_histogram`), once the deallocators have freed what the
# collection released: live heap, libnd4j buffers, JavaCPP bytes. A leak is kept memory that rises
# with the iterations: Kendall's tau over the points (one-sided, exact for small samples) gives the
# confidence, the Theil-Sen slope the rate; both are robust to the odd point taken mid-iteration.


def plural(unit: str) -> str:
    """'iterations' for 'iteration'; 's' stays 's' (seconds: not "ss")."""
    return unit if unit == "s" else unit + "s"


@dataclass(frozen=True)
class Trend:
    """How a kept quantity moves with iterations (or seconds) over the live points."""

    slope: float          # bytes per x unit (Theil-Sen)
    intercept: float
    p_value: float        # one-sided: the quantity does not rise with x
    growth: float         # slope x span of x, bytes
    n: int                # points used
    span: float           # x span of the points used
    x_unit: str           # "iteration" or "s"
    last_x: float
    last_y: float

    @property
    def confidence(self) -> float:
        return 1.0 - self.p_value


def fit_trend(x: np.ndarray, y: np.ndarray, x_unit: str) -> Trend | None:
    """Robust slope and one-sided significance of y rising with x; None with fewer than 3 usable points."""
    from scipy import stats  # noqa: PLC0415

    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = np.asarray(x, float)[ok], np.asarray(y, float)[ok]
    if x.size < 3 or np.ptp(x) == 0:
        return None
    slope, intercept, _, _ = stats.theilslopes(y, x)
    if np.ptp(y) == 0:
        p = 1.0
    else:
        p = float(stats.kendalltau(x, y, alternative="greater").pvalue)
    span = float(np.ptp(x))
    return Trend(float(slope), float(intercept), p, float(slope) * span, int(x.size), span, x_unit,
                 float(x[-1]), float(y[-1]))


@dataclass(frozen=True)
class LeakVerdict:
    """For one kept quantity: leak, no leak, or not enough data (and why)."""

    status: str           # "leak" | "no-leak" | "not-enough-data"
    label: str
    trend: Trend | None
    reason: str


def _usable(t: Timeline, what: str) -> list[dict]:
    """Live points fit to judge `what` ("heap" or "offheap"): taken once the deallocators had freed
    what the collection released (before that, memory and the bookkeeping of dead arrays are still
    held). For the heap, only the agent's inspections when there are any: right after the job's own
    full collections, that bookkeeping is always still reachable."""
    points = sorted(t.live_points, key=lambda p: p["t"])
    if what == "heap" and any(p.get("trigger") == "inspection" for p in points):
        return [p for p in points if p.get("trigger") == "inspection" and p.get("heap_drained", True)]
    return [p for p in points if p.get(f"{what}_drained", True)]


def _training_end(t: Timeline) -> float:
    """Epoch ms of the first sample that saw the last iteration. On an iteration axis what the job holds
    after it has no x of its own: a job that returns from its training loop frees what the loop kept, a
    leak included, and the envelope must not read that as the rise levelling off."""
    last = t.iterations()
    return min((s["t"] for s in t.samples if (s.get("iterations") or 0) >= last), default=float("inf"))


def _live_axis(t: Timeline, what: str = "offheap") -> tuple[list[dict], np.ndarray, str]:
    """Usable live points after warm-up, and their x: iterations when the job reports them, else seconds."""
    points = _usable(t, what)
    if t.iterations() >= LEAK_MIN_ITERATIONS:
        # warm-up: before the first iteration, and the first point after it (updater state, workspaces learning)
        points = [p for p in points if (p.get("iterations") or 0) >= 1][1:]
        return points, np.array([p.get("iterations") or 0 for p in points], dtype=float), "iteration"
    points = points[1:]
    return points, np.array([(p["t"] - t.t0) / 1000.0 for p in points], dtype=float), "s"


def judge(x: np.ndarray, y: np.ndarray, unit: str, label: str, min_growth: float,
          min_relative: float = 0.0) -> LeakVerdict:
    """Leak when y rises with x at >= LEAK_CONFIDENCE and grows over the points by >= min_growth and
    >= min_relative of where it started."""
    need_span = LEAK_MIN_ITERATIONS if unit == "iteration" else LEAK_MIN_SECONDS
    ok = ~np.isnan(y)
    n, span = int(ok.sum()), float(np.ptp(x[ok])) if ok.any() else 0.0
    if n < LEAK_MIN_POINTS or span < need_span:
        return LeakVerdict("not-enough-data", label, None,
                           f"{n} live points after full collections over {span:.0f} {plural(unit)} after warm-up; "
                           f"a verdict needs {LEAK_MIN_POINTS} points over {need_span} {plural(unit)}")
    trend = fit_trend(x, y, unit)
    if trend is None:
        return LeakVerdict("not-enough-data", label, None, "no spread in the points")
    start = trend.intercept + trend.slope * float(np.nanmin(x[ok]))
    needed = max(min_growth, min_relative * max(start, 0.0))
    if trend.confidence >= LEAK_CONFIDENCE and trend.slope > 0 and trend.growth >= needed:
        return LeakVerdict("leak", label, trend, "")
    why = (f"grows {human_bytes(trend.growth)} at {trend.confidence:.1%} confidence "
           f"(a leak needs {LEAK_CONFIDENCE:.0%} and {human_bytes(needed)})")
    return LeakVerdict("no-leak", label, trend, why)


def _x_of(t: Timeline, times_ms: np.ndarray, unit: str) -> np.ndarray:
    """The x of events at epoch-ms `times_ms`: iterations completed by then (from the samples), or seconds."""
    if unit != "iteration":
        return (np.asarray(times_ms, float) - t.t0) / 1000.0
    marks = np.array([[s["t"], s.get("iterations") or 0] for s in t.samples], dtype=float)
    if not marks.size:
        return np.full(len(times_ms), np.nan)
    return np.floor(np.interp(np.asarray(times_ms, float), marks[:, 0], marks[:, 1]))


def envelope(t: Timeline, what: str, unit: str) -> tuple[np.ndarray, np.ndarray]:
    """The lower envelope of what the job holds, per window: for "offheap" the least libnd4j + JavaCPP
    bytes held over each ENVELOPE_SAMPLES samples (exact counters, every interval), for "heap" the least
    heap left by each ENVELOPE_GCS young collections. Garbage only adds to what is held, so this bounds
    what is kept from above at every window; with x at the window's lowest point. On an iteration axis,
    only while the job trains (see `_training_end`)."""
    if what == "offheap":
        rows = [(s["t"], _held(s)) for s in t.samples
                if s.get("nd4j_live") is not None or s.get("javacpp_total") is not None]
        size = ENVELOPE_SAMPLES
    else:
        rows = [(g["t"], g["heap_after"]) for g in t.gc_events
                if g.get("heap_after") is not None and g.get("kind") not in ("full", "cycle")]
        size = ENVELOPE_GCS
    if unit == "iteration":
        end = _training_end(t)
        rows = [r for r in rows if r[0] <= end]
    if len(rows) < size:
        return np.array([]), np.array([])
    data = np.array(rows, dtype=float)
    n = len(data) // size
    windows = data[len(data) - n * size:].reshape(n, size, 2)   # whole windows, ending at the last row
    low = windows[:, :, 1].argmin(axis=1)
    times = windows[np.arange(n), low, 0]
    return _x_of(t, times, unit), windows[np.arange(n), low, 1]


def _held(record: dict) -> float:
    """Off-heap bytes a sample or live point shows held: libnd4j buffers, JavaCPP bytes, ND4J workspaces."""
    return float((record.get("nd4j_live") or 0) + (record.get("javacpp_total") or 0) + (record.get("ws_bytes") or 0))


def _kept(points: list[dict], what: str) -> np.ndarray:
    """What a live point says is kept, in the envelope's measure (off-heap held, or heap usage)."""
    if what == "offheap":
        return np.array([_held(p) for p in points], dtype=float)
    return np.array([p["heap_after_gc"] if p.get("heap_after_gc") is not None else np.nan for p in points], dtype=float)


def judge_with_envelope(t: Timeline, what: str, points: list[dict], x: np.ndarray, y: np.ndarray, unit: str,
                        label: str, min_growth: float, min_relative: float = 0.0) -> LeakVerdict:
    """The live points' verdict (`judge`), tempered by the envelope of what is held between them:

    - a rise the points show is a leak only while it goes on: over the later half of the run the
      envelope must still rise at least LEAK_LATE_SHARE of the points' rate; memory that grew and
      then levelled off (caches filling, workspaces learning their size) is no leak;
    - with too few points for a verdict, the envelope can still prove there is none: kept memory is
      at most what is held, so if what is held never rose `needed` bytes over the first point after
      warm-up, across LEAK_MIN_ITERATIONS or more, kept memory did not either."""
    verdict = judge(x, y, unit, label, min_growth, min_relative)
    times = [p["t"] for p, value in zip(points, y) if not np.isnan(value)]
    if verdict.status == "leak" and times and (max(times) - min(times)) / 1000.0 < LEAK_MIN_SECONDS:
        # a rise shorter than that is a cache filling or a workspace learning its size as often as a leak
        return LeakVerdict("not-enough-data", label, None,
                           f"kept memory rose over {(max(times) - min(times)) / 1000.0:.0f} s of training; a leak "
                           f"verdict needs the rise to last {LEAK_MIN_SECONDS} s")
    ex, ey = envelope(t, what, unit)
    if verdict.status == "leak" and ex.size:
        trend = verdict.trend
        needed = max(min_growth, min_relative * max(float(np.nanmin(y)), 0.0))
        # Kept memory is never released, so all of it is in what is held at every later moment. Where the
        # job later held less than a point had counted as kept (by half a leak's growth or more), the
        # points caught memory it releases later; and where, past the middle of the points, it held less
        # than a leak adding `needed` at a steady rate over them would keep by then, there is no such leak.
        ok = ~np.isnan(y)
        px, py = x[ok], y[ok]
        order = np.argsort(px, kind="stable")
        px, most = px[order], np.maximum.accumulate(py[order])
        before = np.searchsorted(px, ex, side="right")          # points at or before each window
        counted = np.where(before > 0, most[np.maximum(before - 1, 0)], -np.inf)   # the most any of them counted
        first_x = float(px[0])
        share = (ex - first_x) / max(trend.last_x - first_x, 1e-9)
        refuted = (counted - ey >= needed / 2) & (share >= 0.5) & (share <= 1) & (ey < needed * share)
        if refuted.any():
            i = int(np.flatnonzero(refuted)[np.argmin(ey[refuted])])
            return LeakVerdict("no-leak", label, trend,
                               f"the live points rose {human_bytes(trend.growth)}, but at {unit} {ex[i]:.0f} the job held "
                               f"{human_bytes(ey[i])} in all (an upper bound of what it keeps), after a point had counted "
                               f"{human_bytes(counted[i])} as kept, and where a leak adding {human_bytes(needed)} over the "
                               f"points at a steady rate would keep {human_bytes(needed * share[i])}: the points caught "
                               f"memory the job releases later")
        end = max(float(np.nanmax(ex)), trend.last_x)
        late = ex >= (first_x + end) / 2
        late_trend = fit_trend(ex[late], ey[late], unit) if late.sum() >= 3 else None
        if late_trend is not None and late_trend.slope < LEAK_LATE_SHARE * trend.slope:
            return LeakVerdict("no-leak", label, trend,
                               f"grew {human_bytes(trend.growth)} and then levelled off: over the later half of the run "
                               f"what is held rose {human_bytes(max(late_trend.slope, 0))}/{unit}, under "
                               f"{LEAK_LATE_SHARE:.0%} of the earlier {human_bytes(trend.slope)}/{unit} (a cache "
                               f"filling or a workspace learning its size, not a leak)")
        return verdict
    if verdict.status != "not-enough-data" or not ex.size:
        return verdict
    kept = _kept(points, what)
    ok = ~np.isnan(kept)
    if not ok.any():
        return verdict
    first = int(np.argmax(ok))
    x0, k0 = float(x[first]), float(kept[first])
    after = ex > x0
    if not after.any() or float(np.nanmax(ex[after])) - x0 < (LEAK_MIN_ITERATIONS if unit == "iteration" else LEAK_MIN_SECONDS):
        return verdict
    rose = float(np.nanmax(ey[after])) - k0
    needed = max(min_growth, min_relative * max(k0, 0.0))
    if rose < needed:
        span = float(np.nanmax(ex[after])) - x0
        return LeakVerdict("no-leak", label, None,
                           f"what is held (an upper bound of what is kept) rose at most {human_bytes(max(rose, 0))} "
                           f"over {span:.0f} {plural(unit)} after the live point at {unit} {x0:.0f}; a leak needs {human_bytes(needed)}")
    return verdict


def leak_verdicts(t: Timeline) -> list[LeakVerdict]:
    """Heap and off-heap verdicts over the usable live points (see `_usable`): the bookkeeping of
    arrays that just died (ND4J's reference objects and ids, JavaCPP's deallocators) inflates the heap
    by an amount that depends on how much garbage came before, so points taken before the
    deallocators caught up could fake a trend."""
    heap_points, hx, hunit = _live_axis(t, "heap")
    points, x, unit = _live_axis(t, "offheap")

    def col(name: str, pts: list[dict] | None = None) -> np.ndarray:
        return np.array([float(p[name]) if p.get(name) is not None else np.nan for p in (points if pts is None else pts)],
                        dtype=float)

    # the heap less ND4J's and JavaCPP's deallocation bookkeeping (from the histogram's classes): it
    # churns with every array made, and how much a histogram catches depends on how many just died;
    # kept arrays show in the off-heap verdict, the job's own objects stay in this one
    heap = col("heap_live", heap_points) - np.nan_to_num(col("heap_bookkeeping", heap_points))
    out = [judge_with_envelope(t, "heap", heap_points, hx, heap, hunit, "live heap", LEAK_MIN_GROWTH_HEAP,
                               LEAK_MIN_RELATIVE_HEAP)]
    nd4j, javacpp = col("nd4j_live"), col("javacpp_total")
    if (~np.isnan(nd4j)).any():
        kept = np.where(np.isnan(javacpp), 0, javacpp) + nd4j + np.nan_to_num(col("ws_bytes"))
        verdict = judge_with_envelope(t, "offheap", points, x, kept, unit,
                                      "off-heap arrays kept (libnd4j buffers + JavaCPP Pointers + workspaces)",
                                      LEAK_MIN_GROWTH)
    else:
        # no allocation counters (the agent's hooks are off): JavaCPP's own count only
        verdict = judge_with_envelope(t, "offheap", points, x, javacpp, unit, "JavaCPP Pointers kept (totalBytes)",
                                      LEAK_MIN_GROWTH)
    out.append(verdict)
    return out


def _leaks(t: Timeline) -> list[Finding]:
    verdicts = leak_verdicts(t)
    out = [_leak_finding(t, v) for v in verdicts if v.status == "leak"]
    unknown = [v for v in verdicts if v.status == "not-enough-data"]
    if unknown and not out:
        out.append(Finding(
            "not-enough-data", "info", "Not enough data to judge memory leaks",
            [f"{v.label}: {v.reason}" for v in unknown],
            "leaks are judged on memory left after full collections, over iterations; the agent measures it "
            "as often as a verdict needs (about 6 points in the first minute of training; in a JVM that does not "
            f"train, such as a Spark driver, points over {LEAK_MIN_SECONDS} s after its first, so it must live about half "
            "a minute): let the job train longer, and check that the agent's live points were not switched off "
            "(-Dpyd4j.agent=live=0); "
            "no leak is reported without that evidence",
            [], {"live_points": len(t.live_points), "iterations": t.iterations()},
        ))
    return out


def _iteration_rate(t: Timeline) -> float | None:
    """Iterations per second over the last third of the run (the rate a leak keeps going at)."""
    marks = [(s["t"], s["iterations"]) for s in t.samples if s.get("iterations")]
    if len(marks) < 2:
        return None
    cut = marks[0][0] + (marks[-1][0] - marks[0][0]) * 2 / 3
    recent = [m for m in marks if m[0] >= cut] or marks
    (t0, n0), (t1, n1) = (recent[0], recent[-1]) if len(recent) >= 2 else (marks[0], marks[-1])
    return (n1 - n0) / ((t1 - t0) / 1000.0) if t1 > t0 and n1 > n0 else None


@dataclass(frozen=True)
class _Limit:
    name: str
    limit: float | None
    level: float | None      # where the leaking quantity stands against the limit now
    slope: float             # how fast that quantity moves toward it, per x unit
    what: str


def _limit_for(t: Timeline, verdict: LeakVerdict, kind: str) -> _Limit:
    """The limit a leak runs into, the quantity that limit compares, its level and slope."""
    limits = t.limits()
    points, x, unit = _live_axis(t, "offheap")

    def trend_of(name: str) -> Trend | None:
        y = np.array([float(p[name]) if p.get(name) is not None else np.nan for p in points], dtype=float)
        return fit_trend(x, y, unit)

    if kind == "leak-heap":
        # -Xmx bounds what the collector counts (whole regions for large arrays), not the objects' bytes
        used = trend_of("heap_after_gc")
        if used is not None and used.n >= LEAK_MIN_POINTS - 1 and used.slope > 0:
            return _Limit("-Xmx", limits["heap_max"], used.last_y, used.slope, "heap in use after full collections")
        return _Limit("-Xmx", limits["heap_max"], verdict.trend.last_y, verdict.trend.slope, "live heap")
    nd4j, javacpp = trend_of("nd4j_live"), trend_of("javacpp_total")
    if javacpp is not None and javacpp.slope > (nd4j.slope if nd4j else 0):
        return _Limit("JavaCPP maxbytes", limits["javacpp_max"], javacpp.last_y, javacpp.slope,
                      "JavaCPP totalBytes after full collections")
    candidates = [("maxphysicalbytes (JavaCPP checks RSS against it at its next Pointer allocation)",
                   limits["javacpp_max_physical"]), ("the container memory limit", limits["cgroup"])]
    name, limit = min(((n, v) for n, v in candidates if v), key=lambda c: c[1], default=("", None))
    rss = trend_of("rss")
    return _Limit(name, limit, rss.last_y if rss else None, verdict.trend.slope, "process RSS")


def leak_sites(t: Timeline, kind: str) -> list[dict]:
    """Sites holding the kept memory at the last live point (or at the end), largest first. A snapshot in
    which nothing is held is passed over: the end snapshot is taken while the JVM shuts down, and the job's
    arrays may already be freed by then (a leak kept in the job's own list was, at random)."""
    snapshots = [s for s in t.site_snapshots if s.get("reason") in ("live", "end")
                 and any(x.get("live_bytes", 0) > 0 for x in s.get("sites", ()))]
    if not snapshots:
        return []
    last = max(snapshots, key=lambda s: s["t"])
    sites = [s for s in last.get("sites", ()) if s.get("live_bytes", 0) > 0]
    return sorted(sites, key=lambda s: -s["live_bytes"])


def _leak_finding(t: Timeline, verdict: LeakVerdict) -> Finding:
    trend = verdict.trend
    kind = "leak-heap" if verdict.label == "live heap" else "leak-offheap"
    per = f"{human_bytes(trend.slope)}/{trend.x_unit}"
    evidence = [f"{verdict.label} grows {per} over {trend.n} points after full collections "
                f"(+{human_bytes(trend.growth)} over {trend.span:.0f} {plural(trend.x_unit)}; "
                f"Kendall tau p = {trend.p_value:.2g}, confidence {trend.confidence:.1%})"]
    numbers: dict[str, float | int | None] = {
        "slope_bytes_per_unit": trend.slope, "confidence": trend.confidence, "p_value": trend.p_value,
        "growth_bytes": trend.growth, "points": trend.n}
    lim = _limit_for(t, verdict, kind)
    limit_name, limit, level, level_what = lim.name, lim.limit, lim.level, lim.what
    if limit and level is not None and lim.slope > 0:
        left = max(0.0, (limit - level) / lim.slope)
        numbers.update(limit_bytes=limit, units_to_limit=left)
        when = f"about {left:,.0f} more {plural(trend.x_unit)}"
        if trend.x_unit == "iteration":
            numbers["limit_at_iteration"] = trend.last_x + left
            rate = _iteration_rate(t)
            if rate:
                numbers["seconds_to_limit"] = left / rate
                when += f" (~{left / rate:,.0f} s at {rate:.2f} iterations/s), around iteration {trend.last_x + left:,.0f}"
        else:
            numbers["seconds_to_limit"] = left
        evidence.append(f"{level_what} is {human_bytes(level)} of {limit_name} {human_bytes(limit)}: "
                        f"at this rate it is reached in {when}")
    workspaces = _growing_workspaces(t, verdict) if kind == "leak-offheap" else None
    sites = leak_sites(t, kind) if kind == "leak-offheap" and workspaces is None else []
    if workspaces is not None:
        count, held, first_count, site = workspaces
        evidence.append(f"ND4J workspaces hold {human_bytes(held)} in {count} workspaces (from {first_count} at the "
                        f"first point): workspaces opened and never destroyed"
                        + (f", created at {site}" if site else ""))
        if site:
            sites = [{"site": site, "user": True, "live_bytes": held}]
    user_sites = [s for s in sites if s.get("user")] or sites
    if user_sites:
        top = user_sites[0]
        numbers["site"] = top["site"]
    if user_sites and workspaces is None:
        evidence.append(f"allocated at {top['site']}" + (f" (via {top['via']})" if top.get("via") else "")
                        + f": {human_bytes(top['live_bytes'])} still held, estimated from sampled allocations")
        for s in user_sites[1:3]:
            evidence.append(f"also held: {human_bytes(s['live_bytes'])} from {s['site']}")
    if kind == "leak-heap":
        classes = _growing_classes(t)
        if classes:
            evidence.append("growing classes: " + ", ".join(f"{c} +{human_bytes(b)}" for c, b in classes))
    fix = ("the job keeps references to ND4J arrays (or JavaCPP Pointers) every iteration: a growing list, a cache, "
           "arrays detached from a workspace (detach()/leverage), or outputs kept from fit/output. Close or drop them "
           "at the line named above, or run the loop in a workspace; raising limits only delays the OOM"
           if kind == "leak-offheap" else
           "Java objects accumulate every iteration (a growing collection, listeners, DataSets kept). "
           "Drop the references; raising -Xmx only delays the OOM")
    if workspaces is not None:
        fix = ("the job opens ND4J workspaces and never destroys them (a new workspace id per batch, or "
               "createNewWorkspace without destroyWorkspace): reuse one id per loop, or call "
               "Nd4j.getWorkspaceManager().destroyWorkspace(ws) when done; raising limits only delays the OOM")
    where = f" at {user_sites[0]['site']}" if user_sites else ""
    return Finding(kind, "error", f"Memory leak: {verdict.label} grows every {trend.x_unit}{where}", evidence, fix, [],
                   numbers)


def _growing_workspaces(t: Timeline, verdict: LeakVerdict) -> tuple[int, int, int, str | None] | None:
    """When most of an off-heap leak is ND4J workspaces (their memory is neither a libnd4j buffer nor a
    JavaCPP Pointer, so no allocation site holds it): (workspaces now, bytes they hold, workspaces at the
    first point, the user's line that created most of them); else None."""
    points = [p for p in sorted(t.live_points, key=lambda p: p["t"]) if p.get("ws_bytes") is not None]
    if len(points) < 2 or verdict.trend is None:
        return None
    grown = points[-1]["ws_bytes"] - points[0]["ws_bytes"]
    if grown < 0.5 * verdict.trend.growth:
        return None
    last = next((s for s in reversed(t.samples) if s.get("ws")), None)
    first = next((s for s in t.samples if s["t"] >= points[0]["t"] and s.get("ws")), None)
    if last is None:
        return None
    by_site: dict[str, int] = {}
    for w in last["ws"]:
        if w.get("site"):
            by_site[w["site"]] = by_site.get(w["site"], 0) + int(w.get("size") or 0)
    site = max(by_site, key=by_site.get) if by_site else None
    def count(sample: dict | None) -> int:
        return int(sample.get("ws_count") or len(sample["ws"])) if sample else 0

    held = int(last.get("ws_bytes") or sum(w.get("size") or 0 for w in last["ws"]))
    return count(last), held, count(first), site


def _growing_classes(t: Timeline, top: int = 3) -> list[tuple[str, int]]:
    """Classes whose live bytes grew most between the first and last heap inspection."""
    inspected = [p for p in sorted(t.live_points, key=lambda p: p["t"]) if p.get("classes")]
    if len(inspected) < 2:
        return []
    first = {c["name"]: c["bytes"] for c in inspected[0]["classes"]}
    last = {c["name"]: c["bytes"] for c in inspected[-1]["classes"]}
    grown = sorted(((name, b - first.get(name, 0)) for name, b in last.items()), key=lambda g: -g[1])
    return [(name, int(g)) for name, g in grown[:top] if g > 0]


# -- GC pressure -----------------------------------------------------------------------------

def gc_share(t: Timeline) -> tuple[float, float]:
    """(overall GC time share, worst share over a GC_WINDOW_S window)."""
    if len(t.samples) < 2:
        return 0.0, 0.0
    times = t.times()
    _, millis = t.gc_totals()
    # full collections made to measure the live set (the agent's inspections, jcmd's) are not the job's pressure
    # (when the collector's counters include each: the collection's end)
    measuring = [(g["t"] + (g.get("duration_ms") or 0), g.get("duration_ms") or 0) for g in t.gc_events
                 if g.get("cause") in MEASURING_GC_CAUSES]
    if measuring:
        at = (np.array([m[0] for m in measuring], dtype=float) - t.t0) / 1000.0
        spent = np.cumsum([m[1] for m in measuring], dtype=float)
        idx = np.searchsorted(at, times, side="right")
        millis = millis - np.where(idx > 0, spent[np.maximum(idx - 1, 0)], 0.0)
    wall = times[-1] - times[0]
    overall = (millis[-1] - millis[0]) / 1000.0 / wall if wall > 0 else 0.0
    worst = 0.0
    j = 0
    for i in range(len(times)):
        while times[i] - times[j] > GC_WINDOW_S:
            j += 1
        span = times[i] - times[j]
        if span >= GC_WINDOW_S * 0.8:
            worst = max(worst, (millis[i] - millis[j]) / 1000.0 / span)
    return float(overall), float(worst)


def _gc_pressure(t: Timeline) -> list[Finding]:
    overall, worst = gc_share(t)
    if overall < GC_SHARE_WARN and worst < GC_WINDOW_WARN:
        return []
    peaks, limits = t.peaks(), t.limits()
    live = peaks["heap_live"] or peaks["heap_used"]
    new = _grow(max(live or 0, 1) * 3, 1.0)
    return [Finding(
        "gc-pressure", "warning", f"GC pressure: {overall:.0%} of the run spent in GC",
        [f"GC time share {overall:.1%} overall, {worst:.1%} in the worst {GC_WINDOW_S:.0f} s window",
         f"live heap after GC up to {human_bytes(live)} of -Xmx {human_bytes(limits['heap_max'])}"],
        "give the heap room: about 3x the live heap; reuse DataSets/INDArrays instead of creating them per iteration",
        [f"-Xmx{jvm_size(max(new, limits['heap_max'] or 0))}"] if (limits["heap_max"] or 0) < new else [],
        {"gc_share": overall, "gc_share_worst_window": worst},
    )]


# -- workspaces ------------------------------------------------------------------------------

def _spills(t: Timeline) -> list[Finding]:
    out = []
    # the first iterations spill by design (FIRST_LOOP learning sizes the workspace from them)
    trained = t.series("iterations") >= 2 if t.samples else np.array([], dtype=bool)
    for key, cols in t.workspace_series().items():
        spilled = np.nan_to_num(cols["spilled"]) + np.nan_to_num(cols["pinned"])
        present = ~np.isnan(cols["size"]) & trained
        n_present = int(present.sum())
        n_spill = int((spilled[present] > 0).sum())
        if n_present == 0 or n_spill < SPILL_MIN_SAMPLES or n_spill / n_present < SPILL_MIN_SHARE:
            continue
        spilled = np.where(present, spilled, 0)
        need = np.nanmax(cols["max_cycle"] + np.nan_to_num(cols["spilled"]), initial=0)
        size = np.nanmax(cols["size"], initial=0)
        suggested = _grow(max(need, size) * 1.3, 1.0, floor=MIB)
        name = key.split("@")[0]
        out.append(Finding(
            "workspace-spill", "warning", f"Workspace {name} keeps spilling",
            [f"{key}: spilled or pinned memory in {n_spill} of {n_present} samples "
             f"(up to {human_bytes(float(np.nanmax(spilled)))}); size {human_bytes(size)}, largest cycle {human_bytes(need)}"],
            f"give {name} a larger initial size: WorkspaceConfiguration.builder().initialSize({suggested}L)"
            f".policyLearning(LearningPolicy.NONE) (spilled allocations are plain off-heap allocations made every cycle)",
            [], {"spill_samples": n_spill, "samples": n_present, "suggested_initial_size": suggested},
        ))
    return out


# A peak this close to its limit is a warning (and `tune` does not call such a run verified). Tune sizes
# limits at the measured need plus DEFAULT_HEADROOM (15%), so the line sits inside that headroom:
# at 10% a tuned job at its own measured need plus a little uncollected garbage was flagged.
NEAR_LIMIT_FRACTION = 0.95


def _near_limits(t: Timeline) -> list[Finding]:
    if t.exit_code not in (0, None):
        return []
    peaks, limits = t.peaks(), t.limits()
    out = []
    # Garbage-collected memory fills up to its limit between collections by design: what must fit is what is
    # live. The heap: the live heap. JavaCPP's totalBytes counts Pointers not yet collected too, and JavaCPP
    # collects them (System.gc) before it refuses: what must fit is the largest Pointer and what stayed after
    # full collections (the sampled peak only when neither was measured).
    live = [p["javacpp_total"] for p in t.live_points if p.get("javacpp_total") is not None]
    javacpp_needed = max([*live, peaks["javacpp_largest"] or 0]) or peaks["javacpp_total"]
    for label, peak, limit, flag in (
        ("live heap", peaks["heap_live"], limits["heap_max"], "-Xmx"),
        ("JavaCPP physicalBytes", peaks["javacpp_physical"], limits["javacpp_max_physical"], "-Dorg.bytedeco.javacpp.maxphysicalbytes"),
        ("JavaCPP totalBytes held", javacpp_needed, limits["javacpp_max"], "-Dorg.bytedeco.javacpp.maxbytes"),
    ):
        if peak and limit and peak > NEAR_LIMIT_FRACTION * limit:
            margin = round(100 * (1 - NEAR_LIMIT_FRACTION))
            out.append(Finding("near-limit", "warning", f"{label} came within {margin}% of its limit",
                               [f"{label} peaked at {human_bytes(peak)} of {human_bytes(limit)}"],
                               f"raise {flag} before a larger batch or dataset tips it over", [],
                               {"peak": peak, "limit": limit}))
    return out
