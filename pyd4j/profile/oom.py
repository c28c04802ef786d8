"""How a profiled job ran out of memory, or otherwise ended badly, told apart from the evidence.

OOM kinds: Java heap, JavaCPP maxbytes, JavaCPP maxphysicalbytes, NIO direct buffers, metaspace, and
a SIGKILL by the container's or the kernel's OOM killer (RSS near a memory limit), using the error the
agent caught, the job's stderr and its exit status; a signal with no memory limit near is a kill from
outside, not memory. A job that ended with an error but no OutOfMemoryError is a crash: the JVM's own
fatal error report, the launcher's refusal, or its exit code.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

import numpy as np

from pyd4j.jvm.errors import (
    DirectBufferOutOfMemoryError,
    JavaCppOutOfMemoryError,
    JavaOutOfMemoryError,
    MetaspaceOutOfMemoryError,
    python_class_for,
)
from pyd4j.memory.machine import physical_bytes
from pyd4j.output import human_bytes
from pyd4j.profile.finding import Finding, grow_limit
from pyd4j.profile.plan_refusal import plan_refusals
from pyd4j.profile.signals import signal_name
from pyd4j.profile.startup import startup_error_in, stderr_tail
from pyd4j.profile.timeline import Timeline
from pyd4j.units import jvm_size

KILL_NEAR = 0.9               # a SIGKILL is an OOM kill when RSS came this close to a memory limit

_OOM_LINE = re.compile(r"(?:java\.lang\.)?OutOfMemoryError:?\s*(.*)")
# JavaCPP's refusals name what was in use, what was asked for, and the limit (formatBytes: K/M/G/T, truncated)
_SIZE = r"(\d+)([KMGT]?)"
_JAVACPP_LIMITS = (
    ("maxbytes", re.compile(rf"totalBytes \({_SIZE} \+ {_SIZE}\) > maxBytes \({_SIZE}\)")),
    ("maxphysicalbytes", re.compile(rf"physicalBytes \({_SIZE}(?: \+ {_SIZE})?\) > maxPhysicalBytes \({_SIZE}\)")),
)


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


def _last(timeline: Timeline, name: str) -> float | None:
    values = timeline.series(name) if timeline.samples else np.array([])
    values = values[~np.isnan(values)]
    return float(values[-1]) if values.size else None


def oom_findings(t: Timeline) -> list[Finding]:
    """What ended the job: each kind of OutOfMemoryError it shows (once each); without one, the JVM's
    fatal error report, a signal, the launcher's refusal or a crash."""
    return _out_of_memory(t) or _ended_otherwise(t)


def _out_of_memory(t: Timeline) -> list[Finding]:
    """One finding per kind of OutOfMemoryError in the agent's errors and the job's stderr."""
    limits, peaks = t.limits(), t.peaks()
    out: list[Finding] = []
    seen: set[str] = set()
    for text in _error_texts(t):
        finding = _oom_finding(python_class_for(["java.lang.OutOfMemoryError"], text), text, limits, peaks)
        if finding is not None and finding.kind not in seen:
            seen.add(finding.kind)
            out.append(finding)
    return out


def _oom_finding(cls: type, text: str, limits: dict, peaks: dict) -> Finding | None:
    """The finding for one OutOfMemoryError text, by the Python class its message maps to."""
    if cls is JavaCppOutOfMemoryError:
        return _javacpp_oom(text, limits, peaks)
    if cls is DirectBufferOutOfMemoryError:
        new = grow_limit(max(peaks["direct_used"] or 0, limits["max_direct"] or 0), 2.0)
        return Finding(
            "oom-direct", "error", "NIO direct buffer memory exhausted",
            [f"error: {text[:300]}", f"direct buffers peaked at {human_bytes(peaks['direct_used'])} of {human_bytes(limits['max_direct'])}"],
            "raise -XX:MaxDirectMemorySize (NIO direct buffers only; ND4J arrays are bounded by JavaCPP's limits)",
            [f"-XX:MaxDirectMemorySize={jvm_size(new)}"], {"limit": limits["max_direct"], "peak": peaks["direct_used"]},
        )
    if cls is MetaspaceOutOfMemoryError:
        return Finding("oom-metaspace", "error", "Metaspace exhausted", [f"error: {text[:300]}"],
                       MetaspaceOutOfMemoryError.fix, ["-XX:MaxMetaspaceSize=512m"])
    if cls is JavaOutOfMemoryError:
        return _heap_oom(text, limits, peaks)
    return None


def _javacpp_oom(text: str, limits: dict, peaks: dict) -> Finding:
    """JavaCPP refused an allocation at maxbytes or maxphysicalbytes: the property to raise, and to what."""
    prop = JavaCppOutOfMemoryError(text).limit_property
    physical = prop.endswith("maxphysicalbytes")
    kind = "oom-javacpp-maxphysicalbytes" if physical else "oom-javacpp-maxbytes"
    limit = limits["javacpp_max_physical" if physical else "javacpp_max"]
    used = peaks["javacpp_physical" if physical else "javacpp_total"]
    new = grow_limit(max(used or 0, limit or 0), 2.0)
    return Finding(
        kind, "error",
        f"JavaCPP refused an off-heap allocation: {'maxPhysicalBytes' if physical else 'maxBytes'} reached",
        [f"error: {text[:300]}",
         f"JavaCPP {'physicalBytes (process RSS)' if physical else 'totalBytes'} peaked at {human_bytes(used)} "
         f"against the limit {human_bytes(limit)}"],
        f"raise -D{prop} (it bounds {'the whole process RSS JavaCPP sees' if physical else 'memory JavaCPP Pointers allocate'}; "
        f"-Xmx and -XX:MaxDirectMemorySize do not); if it keeps growing per iteration, look at the leak finding first",
        [f"-D{prop}={new}"], {"limit": limit, "peak": used},
    )


def _heap_oom(text: str, limits: dict, peaks: dict) -> Finding:
    """The Java heap ran out: -Xmx from the live heap (or the heap used) with room."""
    live = peaks["heap_live"] or peaks["heap_used"]
    new = grow_limit(max(live or 0, limits["heap_max"] or 0), 2.0)
    return Finding(
        "oom-heap", "error", "Java heap exhausted",
        [f"error: {text[:300]}",
         f"heap used peaked at {human_bytes(peaks['heap_used'])} of -Xmx {human_bytes(limits['heap_max'])}; "
         + (f"live heap after full collections reached {human_bytes(peaks['heap_live'])}" if peaks["heap_live"]
            else "no full collection measured the live heap")],
        "raise -Xmx (ND4J array data is off-heap and does not need heap; the heap holds Java objects, "
        "INDArray wrappers and DataSets); if the live heap grows per iteration, look at the leak finding first",
        [f"-Xmx{jvm_size(new)}"], {"limit": limits["heap_max"], "peak": peaks["heap_used"]},
    )


def _ended_otherwise(t: Timeline) -> list[Finding]:
    """A job that failed without an OutOfMemoryError: the JVM's fatal error report, a signal (an OOM
    killer only when memory was near a limit), the launcher's refusal, or its exit code."""
    code = t.exit_code
    interrupted = t.meta.get("interrupted")
    fatal = _fatal_error(t) if code not in (None, 0) and not interrupted else None
    if fatal is not None:   # the JVM's own report: it aborted itself (134), no one killed it
        summary = fatal.summary()
        return [Finding("native-crash" if fatal.kind == "crash" else "native-memory", "error",
                        f"{summary[0].upper()}{summary[1:]} (exit status {code})", fatal.evidence(), fatal.fix(),
                        [], {"exit_status": code, "pid": fatal.pid})]
    signum = _signal_of(t)
    if signum is not None and not interrupted:
        return [_killed(t, code, signum)]
    if code in (None, 0) or interrupted or any(e.get("then") == "exit" for e in plan_refusals(t)):
        return []   # a plan the agent refused ended the job: the plan-not-applied finding says why
    launcher = startup_error_in(t.run_dir)
    if launcher is not None:  # the JVM refused to start the job: a wrong class, jar or option
        return [Finding("crash", "error", f"The job did not start: {launcher.what} (exit code {code})",
                        [launcher.line], launcher.fix)]
    msgs = [f"{e.get('class')}: {e.get('message')}" for e in t.errors] or stderr_tail(t.run_dir)
    return [Finding("crash", "error", f"The job exited with code {code}", msgs or ["see stderr.log in the run directory"],
                    "read the job's stderr.log; no memory limit was reported as the cause")]


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
