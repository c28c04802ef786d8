"""`pyd4j tune`: profile a job once, compute JVM flags from what it really used, run it again with
them, and compare. The flags come from pyd4j.memory.flags (the one flag generator), fed with the
measured peaks through `measured_estimate`; `measured_need` below is the only arithmetic here:
which measured number stands for which need.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pyd4j.memory.flags import DEFAULT_HEADROOM, FlagSet, flags, measured_estimate
from pyd4j.output import human_bytes
from pyd4j.profile.command import MEMORY_FLAG_PREFIXES, JobCommand
from pyd4j.profile.diagnose import Finding, diagnose
from pyd4j.profile.launch import DEFAULT_INTERVAL_MS, JobRun, check_run_dir, default_run_dir, profile_job
from pyd4j.profile.signals import Stopped
from pyd4j.profile.timeline import Timeline
from pyd4j.units import SizeError, parse_bytes

TUNE_DOC = "tune.json"  # the tune's document, next to its before/ and after/ runs (the reports read it)

MIB = 1 << 20
HEAP_PER_LIVE = 3.0          # heap = 3x the live set after GC: room for young collections
MIN_HEAP = 256 * MIB


@dataclass(frozen=True)
class MeasuredNeed:
    """What the job needs, read off a timeline (bytes), and where each number came from."""

    offheap: int
    heap: int
    native: int
    why: dict[str, str] = field(default_factory=dict)


def measured_need(t: Timeline, findings: list[Finding] | None = None) -> MeasuredNeed:
    """Peaks -> needs. A run that died at a limit only shows a lower bound: the need is then at
    least what the finding's fix asks for."""
    peaks, limits = t.peaks(), t.limits()
    findings = diagnose(t) if findings is None else findings
    offheap = max(peaks["native"] or 0, peaks["javacpp_total"] or 0)
    why = {"offheap": f"peak native memory outside the JVM's areas ({offheap} B) or JavaCPP totalBytes, whichever is larger"}
    live = peaks["heap_live"]
    if live:
        heap = max(int(live * HEAP_PER_LIVE), MIN_HEAP)
        why["heap"] = f"{HEAP_PER_LIVE:g}x the largest live heap after GC ({live} B), at least {MIN_HEAP >> 20} MiB"
    else:
        heap = max(peaks["heap_used"] or 0, MIN_HEAP)
        why["heap"] = "no GC happened: the largest heap used, at least 256 MiB"
    native = peaks["nonheap_used"] or 0
    why["native"] = "peak metaspace + code cache"
    kinds = {f.kind: f for f in findings}
    if "oom-heap" in kinds:
        heap = max(heap, 2 * (limits["heap_max"] or 0))
        why["heap"] += "; the run died of heap OOM, so at least twice the old -Xmx"
    for kind in ("oom-javacpp-maxbytes", "oom-javacpp-maxphysicalbytes", "killed"):
        if kind in kinds:
            offheap = 2 * offheap
            why["offheap"] += f"; the run died ({kind}), so twice the measured peak"
            break
    return MeasuredNeed(offheap=int(offheap), heap=int(heap), native=int(native), why=why)


def recommend(t: Timeline, total: str | int | None = None, headroom: float = DEFAULT_HEADROOM) -> tuple[FlagSet, MeasuredNeed]:
    """Flags for the measured run, from the flag generator."""
    need = measured_need(t)
    est = measured_estimate(need.offheap, need.heap, need.native, model=t.name)
    return flags(est, total=parse_bytes(total, "budget") if total is not None else None, headroom=headroom), need


def _side(run: JobRun) -> dict:
    t = run.timeline
    # what the job's JVM really got (its command line and JAVA_TOOL_OPTIONS), else the command pyd4j ran
    args = t.start.get("jvm_args") or run.command
    return {
        "run_dir": str(run.run_dir), "exit_code": run.returncode, "interrupted": run.interrupted,
        "stopped_by": run.stopped_by, "wall_s": round(run.wall_s, 2), "iterations": t.iterations(),
        "iterations_per_s": t.iterations_per_second(), "limits": t.limits(), "peaks": t.peaks(),
        "findings": [f.kind for f in diagnose(t)], "jvms": len(run.lanes),
        "jvm_memory_flags": [a for a in args if a.startswith(MEMORY_FLAG_PREFIXES)],
    }


def flags_not_taken(run: JobRun, recommended: list[str]) -> list[str]:
    """Notes for each job JVM of the tuned run that did not get a recommended limit: a launcher's
    JVMs get the flags through JAVA_TOOL_OPTIONS, and a JVM's own command-line options win there."""
    notes = []
    for t in run.lanes:
        if t.jvm is None or t.jvm.role != "job" or not t.start:
            continue
        for arg in recommended:
            got, want = _limit_got(t.start, arg)
            if want is not None and got is not None and abs(got - want) > 0.1 * want:
                name = "-Xmx" if arg.startswith("-Xmx") else arg.split("=", 1)[0]
                notes.append(f"JVM pid {t.start.get('pid')} ({t.name}) ran with {name} {human_bytes(got)}, not the "
                             f"recommended {arg}: its own command line sets it, and command-line options win over "
                             f"JAVA_TOOL_OPTIONS; change it where that JVM is started")
    return notes


def _limit_got(start: dict, arg: str) -> tuple[float | None, float | None]:
    """(what the JVM reported, what `arg` asks for), in bytes, for the limits a start line shows."""
    try:
        if arg.startswith("-Xmx"):
            return start.get("heap_max"), parse_bytes(arg[4:])
        if arg.startswith("-XX:MaxDirectMemorySize="):
            return start.get("max_direct"), parse_bytes(arg.split("=", 1)[1])
        for prop in ("maxbytes", "maxphysicalbytes"):
            if arg.startswith(f"-Dorg.bytedeco.javacpp.{prop}="):
                got = start.get(f"javacpp_{prop}_prop")
                return (parse_bytes(got) if got else None), parse_bytes(arg.split("=", 1)[1])
    except SizeError:
        pass
    return None, None


def save_tune_doc(out: Path, doc: dict) -> None:
    """tune.json next to the runs, so each run's report (now or later) shows the before/after."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / TUNE_DOC).write_text(json.dumps(doc, indent=2, default=str))
    except OSError:
        pass  # the document is still printed; only the reports' before/after section is lost


class JobFailedError(RuntimeError):
    """The job died before its first iteration for a reason other than memory: there is nothing
    to tune, and no point in a second run. `doc` holds what the first run showed."""

    def __init__(self, message: str, doc: dict) -> None:
        super().__init__(message)
        self.doc = doc


def _plan_job(run: JobRun, policy: str, path: Path) -> dict:
    """The plan for the network the profiled run trained (the agent describes each network at its
    first iteration; a job that trains several is planned for the last)."""
    from pyd4j.sched.training_plan import plan_for_job  # noqa: PLC0415

    described = [e["network"] for e in run.timeline.network_events if e["type"] == "network" and e.get("network")]
    if not described:
        raise JobFailedError(f"the job trained no DL4J network the agent could describe (see {run.run_dir}): "
                             "there is nothing to plan", {"out_dir": str(path.parent), "before": _side(run)})
    return plan_for_job(described[-1], path, policy)   # the network the job trained last


def _failed_before_first_iteration(before: JobRun, side: dict) -> str | None:
    """Why the first run never trained (its crash evidence), or None when it did or ran out of memory."""
    if side["exit_code"] in (0, None) or side["interrupted"] or side["iterations"] or "crash" not in side["findings"]:
        return None
    evidence = [e for f in diagnose(before.timeline) if f.kind == "crash" for e in f.evidence]
    return (f"the job exited with code {side['exit_code']} before its first iteration, not for lack of memory "
            f"({'; '.join(evidence)}); fix the java command (see {side['run_dir']}/stderr.log) and tune again")


def tune_job(argv: list[str], out_dir: Path | str | None = None, interval_ms: int = DEFAULT_INTERVAL_MS,
             total: str | int | None = None, headroom: float = DEFAULT_HEADROOM, verify: bool = True,
             on_sample: Callable[[dict], None] | None = None, timeout_s: float | None = None,
             plan_policy: str | None = None) -> dict:
    """Profile, recommend, re-run with the recommendation; everything as one JSON-able document
    (also saved as tune.json in the tune's directory). The job is any command profile_job takes;
    the recommended flags reach its JVMs the way the agent does. On Ctrl-C/SIGTERM the Stopped
    exception carries the partial document in `.doc` (with "partial": true).

    With `plan_policy`, the second run keeps the job's own flags and trains its network under a
    pyd4j plan of that policy instead (planned training through the agent): before/after shows
    what the plan saves."""
    command = JobCommand.parse(argv)
    out = Path(out_dir) if out_dir else default_run_dir(command.title + "-tune")
    for side in ("before", "after") if verify else ("before",):
        check_run_dir(out / side)  # refuse before running anything, not after the first run
    doc: dict = {"out_dir": str(out), "command": list(argv), "partial": False}
    try:
        before = profile_job(argv, out / "before", interval_ms=interval_ms, on_sample=on_sample, timeout_s=timeout_s,
                             describe=plan_policy is not None)
    except Stopped as err:
        _stopped(err, out, doc, "before")
        raise
    first = _side(before)
    failure = _failed_before_first_iteration(before, first)
    if failure:
        raise JobFailedError(failure, {"out_dir": str(out), "before": first})
    flagset, need = recommend(before.timeline, total=total, headroom=headroom)
    doc.update({"before": first, "recommended": flagset.args(),
                "reasons": {f.arg: f.reason for f in flagset.flags}, "measured_need": need.__dict__,
                "container_bytes": flagset.container_bytes, "notes": list(flagset.notes)})
    if verify:
        planned = plan_policy is not None
        if planned:  # same flags, the job's network under a plan
            doc["plan"] = _plan_job(before, plan_policy, out / "plan.json")
        try:
            if planned:
                after = profile_job(argv, out / "after", interval_ms=interval_ms, on_sample=on_sample,
                                    timeout_s=timeout_s, plan=doc["plan"]["path"])
            else:
                after = profile_job(argv, out / "after", interval_ms=interval_ms, extra_jvm_options=flagset.args(),
                                    drop_memory_flags=True, on_sample=on_sample, timeout_s=timeout_s)
        except Stopped as err:
            doc["verified"] = False
            _stopped(err, out, doc, "after")
            raise
        if planned:
            doc["plan"]["agent"] = [e for e in after.timeline.network_events if e["type"] != "network"]
        doc["after"] = _side(after)
        if not planned:
            passed = command.tool_options(flagset.args()) if command.java is None else flagset.args()
            doc["notes"] += [f"{arg} is not passed to a launcher's JVMs (JAVA_TOOL_OPTIONS): a JVM whose own command "
                             f"line sets a smaller -Xmx would refuse to start; set it where the job's JVM is started"
                             for arg in flagset.args() if arg not in passed]
            doc["notes"] += flags_not_taken(after, passed)
        b, a = doc["before"]["iterations_per_s"], doc["after"]["iterations_per_s"]
        doc["speedup"] = (a / b) if a and b else None
        doc["verified"] = after.ok and not any(k.startswith(("oom", "killed", "leak")) for k in doc["after"]["findings"])
    save_tune_doc(out, doc)
    return doc


def _stopped(err: Stopped, out: Path, doc: dict, side: str) -> None:
    """Keep what the tune had when it was stopped: the partial run, marked so, in err.doc and tune.json."""
    doc.update(partial=True, stopped_by=err.name, stopped_in=side)
    if err.run is not None:
        doc[side] = _side(err.run)
    save_tune_doc(out, doc)
    err.doc = doc
