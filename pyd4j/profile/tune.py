"""`pyd4j tune`: profile a job once, compute JVM flags from what it really used, run it again with
them, and compare. The flags come from pyd4j.memory.flags (the one flag generator), fed with the
measured peaks through `measured_estimate`; `measured_need` below is the only arithmetic here:
which measured number stands for which need.

Outcomes (and the command's exit codes): verified (0), not verified (3: a run leaks, comes near a
limit, or was not measured well enough to rule a leak out: the findings decide, not the re-run's exit
alone), re-run failed (4: the re-run with the recommended flags failed, even after new recommendations
read from its errors, MAX_RERUNS re-runs in all). A first run that cannot be tuned (no measurements, or
it died before training for a reason other than memory) is refused before any recommendation (1).

A limit is never set below what the job was shown to need: when the first run did not complete, it
showed only what the job used until it died, so every limit it did not die at keeps the value the job
ran with.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from pyd4j.schemas import TUNE_SCHEMA
from pyd4j.memory.flags import DEFAULT_HEADROOM, FlagSet, flags, measured_estimate
from pyd4j.output import human_bytes
from pyd4j.profile.command import MEMORY_FLAG_PREFIXES, JobCommand
from pyd4j.profile.diagnose import Finding, LimitRefusal, diagnose, gc_share, limit_refusals
from pyd4j.profile.launch import DEFAULT_INTERVAL_MS, JobRun, check_run_dir, default_run_dir, profile_job
from pyd4j.profile.signals import Stopped
from pyd4j.profile.timeline import Timeline
from pyd4j.units import SizeError, jvm_size, parse_bytes

TUNE_DOC = "tune.json"  # the tune's document, next to its before/ and after/ runs (the reports read it)

MIB = 1 << 20
HEAP_PER_LIVE = 3.0          # heap = 3x the live set after full collections: room for young collections
MIN_HEAP = 256 * MIB
MAX_RERUNS = 3               # re-runs with recommended flags at most: the first, then again from each failure

EXIT_VERIFIED = 0
EXIT_ERROR = 1
EXIT_NOT_VERIFIED = 3
EXIT_RERUN_FAILED = 4
# Findings in the re-run that mean the flags are not shown to hold the job.
NOT_VERIFIED_KINDS = ("leak-heap", "leak-offheap", "gc-pressure", "near-limit", "no-data", "no-iterations",
                      "not-enough-data")
# GC pressure in the re-run counts against the flags only where GC took a clearly larger share of the
# re-run than of the first run (the job's own flags): over GC_WORSE x the first run's share plus GC_SLACK.
# A job that spends the same share in GC with either heap allocates that fast; the heap is not holding it.
GC_WORSE = 1.25
GC_SLACK = 0.02
# A leak the first run showed stays true with any flags: raising limits only delays the failure.
LEAK_KINDS = ("leak-heap", "leak-offheap")
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
    native_rss = peaks["native"] or 0
    nd4j = peaks["nd4j"] or 0
    offheap = max(native_rss - javacpp, nd4j, 0)
    why["offheap"] = (f"off-heap memory JavaCPP does not count: the larger of native memory outside the JVM's areas "
                      f"({human_bytes(native_rss)}) less JavaCPP's peak, and libnd4j buffers at their peak ({human_bytes(nd4j)})")
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


def _larger(a: MeasuredNeed, b: MeasuredNeed) -> MeasuredNeed:
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


def completed(t: Timeline) -> bool:
    """The run ended by itself with exit 0: its peaks are what the job needs (else only a lower bound)."""
    return t.exit_code == 0 and not t.meta.get("interrupted")


def keep_unshown_limits(flagset: FlagSet, t: Timeline, findings: list[Finding]) -> FlagSet:
    """After a run that did not complete, no limit below what the job ran with, except the one it died at
    (whose new value is raised from the failure anyway): the job may need more after the point it
    died at, and a tune that lowered a limit it never saw the job reach would make the re-run fail there."""
    if completed(t):
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
                        reason=f"kept at the job's own {human_bytes(limit)}: the first run ended (exit "
                               f"{t.exit_code}) before showing what the rest of the job needs, and measured "
                               f"only {human_bytes(f.bytes)} with headroom until then")
            changed[f.name] = int(limit)
        new_flags.append(f)
    if not changed:
        return flagset
    physical = changed.get("org.bytedeco.javacpp.maxphysicalbytes", flagset.maxphysicalbytes)
    container = max(flagset.container_bytes, physical + (flagset.container_bytes - flagset.maxphysicalbytes))
    note = (f"the first run did not complete (exit {t.exit_code}): limits it did not die at keep the values the job ran "
            f"with ({', '.join(changed)}); a completed re-run shows what they can be lowered to")
    return replace(flagset, flags=tuple(new_flags), heap_bytes=changed.get("-Xmx", flagset.heap_bytes),
                   max_direct_bytes=changed.get("-XX:MaxDirectMemorySize", flagset.max_direct_bytes),
                   maxbytes=changed.get("org.bytedeco.javacpp.maxbytes", flagset.maxbytes),
                   maxphysicalbytes=physical, container_bytes=container, notes=(*flagset.notes, note))


def recommend(t: Timeline, total: str | int | None = None, headroom: float = DEFAULT_HEADROOM) -> tuple[FlagSet, MeasuredNeed]:
    """Flags for the measured run, from the flag generator."""
    findings = diagnose(t)
    need = measured_need(t, findings)
    return keep_unshown_limits(flags_for(need, t.name, total, headroom), t, findings), need


def _side(run: JobRun, spark: bool = False) -> dict:
    t = run.timeline
    # what the job's JVM really got (its command line and JAVA_TOOL_OPTIONS), else the command pyd4j ran
    args = t.start.get("jvm_args") or run.command
    findings = diagnose(t)
    if spark:
        return _spark_side(run, findings, args)
    return {
        "run_dir": str(run.run_dir), "exit_code": run.returncode, "interrupted": run.interrupted,
        "stopped_by": run.stopped_by, "wall_s": round(run.wall_s, 2), "iterations": t.iterations(),
        "iterations_per_s": t.iterations_per_second(), "limits": t.limits(), "peaks": t.peaks(),
        "allocators": t.allocators(), "findings": [f.kind for f in findings],
        "finding_titles": [f.title for f in findings], "jvms": len(run.lanes),
        "jvm_memory_flags": [a for a in args if a.startswith(MEMORY_FLAG_PREFIXES)],
        "gc_share": round(gc_share(t)[0], 4),
    }


def _spark_side(run: JobRun, findings: list[Finding], args: list[str]) -> dict:
    """A spark-submit run's side: the driver's and every executor's findings, iterations of all of them
    (executors train; the driver of a cluster run only averages), and one row per executor."""
    from pyd4j.profile.spark_executors import mark_exit_codes, outcomes  # noqa: PLC0415
    from pyd4j.profile.spark_tuning import spark_side  # noqa: PLC0415

    mark_exit_codes(run.lanes, outcomes(run.run_dir, run.lanes))
    workers = [lane for lane in run.lanes if lane.jvm is not None and lane.jvm.role == "job"]
    iterations = sum(lane.iterations() for lane in workers)
    kinds: list[str] = []
    titles: list[str] = []
    for lane in workers:
        for f in (findings if lane is run.timeline else diagnose(lane)):
            if f.kind == "no-iterations" and iterations:
                continue   # a cluster driver runs no iteration itself
            if f.kind not in kinds:
                kinds.append(f.kind)
                titles.append(f"{lane.jvm.label}: {f.title}")
    t = run.timeline
    spark = spark_side(run)
    return {
        "run_dir": str(run.run_dir), "exit_code": run.returncode, "interrupted": run.interrupted,
        "stopped_by": run.stopped_by, "wall_s": round(run.wall_s, 2), "iterations": iterations,
        "iterations_per_s": round(iterations / run.wall_s, 3) if iterations and run.wall_s else None,
        "limits": t.limits(), "peaks": t.peaks(), "allocators": t.allocators(), "findings": kinds,
        "finding_titles": titles, "jvms": len(run.lanes),
        "jvm_memory_flags": [a for a in args if a.startswith(MEMORY_FLAG_PREFIXES)], "spark": spark,
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
        (out / TUNE_DOC).write_text(json.dumps({"schema": TUNE_SCHEMA, **doc}, indent=2, default=str))
    except OSError:
        pass  # the document is still printed; only the reports' before/after section is lost


class JobFailedError(RuntimeError):
    """The first run gives nothing to tune: it died before its first iteration for a reason other
    than memory, or it recorded no measurements. `doc` holds what the first run showed."""

    def __init__(self, message: str, doc: dict) -> None:
        super().__init__(message)
        self.doc = doc


def _plan_job(run: JobRun, policy: str, path: Path) -> dict:
    """The plan for the network the profiled run trained (the agent describes each network at its
    first iteration; a job that trains several is planned for the last). Its opaque steps are
    probed as pyd4j.train.fit probes them, on the network built from the described configuration
    in this process's JVM (`pyd4j.dl4j.probe`)."""
    from pyd4j.jvm.errors import JavaError  # noqa: PLC0415
    from pyd4j.dl4j.probe import of_configuration  # noqa: PLC0415
    from pyd4j.dl4j.plan_file import plan_for_job  # noqa: PLC0415

    described = [e["network"] for e in run.timeline.network_events if e["type"] == "network" and e.get("network")]
    if not described:
        raise JobFailedError(f"the job trained no DL4J network the agent could describe (see {run.run_dir}): "
                             "there is nothing to plan", {"out_dir": str(path.parent), "before": _side(run)})
    # the network the job trained last; the agent's trainer has the backend's offload tier
    try:
        return plan_for_job(described[-1], path, policy, offload=True,
                            probe=of_configuration(described[-1]["conf"], "the job's network"))
    except (ValueError, JavaError) as err:   # refused by the planner (naming the layer), or by DL4J's probe
        raise JobFailedError(f"the job's network cannot be planned: {err}", {"out_dir": str(path.parent),
                                                                             "before": _side(run)}) from None


def _plan_not_applied(run: JobRun) -> str | None:
    """Why the re-run did not train under its plan (the agent refused it, or never met a network to
    apply it to), or None when it did."""
    from pyd4j.profile.diagnose import plan_refusals  # noqa: PLC0415

    refused = plan_refusals(run.timeline)
    if refused:
        return (refused[-1].get("result") or {}).get("reason") or "the agent refused it without a reason"
    if not any(e.get("type") == "plan" for e in run.timeline.network_events):
        return "the agent applied it to no network (the re-run trained none through fit())"
    return None


def _untunable(before: JobRun, side: dict) -> str | None:
    """Why the first run cannot be tuned from, or None when it can."""
    t = before.timeline
    if not t.samples:
        return (f"the first run recorded no measurements (0 samples; exit code {side['exit_code']}): there is nothing "
                f"to size flags from; see {side['run_dir']}/stderr.log, then tune again")
    ended_normally = side["exit_code"] == 0 and not side["interrupted"]
    if not side["iterations"] and not ended_normally and not any(_memory_failure(k) for k in side["findings"]):
        evidence = [e for f in diagnose(t) if f.kind in ("crash", "no-iterations") for e in f.evidence]
        return (f"the job {'was stopped' if side['interrupted'] else 'exited with code ' + str(side['exit_code'])} "
                f"before its first iteration, not for lack of memory ({'; '.join(evidence)}); what it used while "
                f"starting is not what training needs: fix the java command (see {side['run_dir']}/stderr.log) and tune again")
    return None


def _memory_failure(kind: str) -> bool:
    """An out-of-memory error or an OOM kill (a signal from outside with no limit near is not one)."""
    return kind.startswith("oom") or kind == "killed"


def _outcome(side: dict, first: dict | None = None) -> str:
    if side.get("plan_not_applied"):   # the job did not train under the plan: nothing was shown
        return "not-verified"
    if side["exit_code"] != 0 or side["interrupted"] or any(k.startswith(("oom", "killed", "crash")) for k in side["findings"]):
        return "rerun-failed"
    if side.get("spark") and side["spark"]["executor_memory_failures"]:
        return "rerun-failed"
    return "not-verified" if not_verified_because(side, first) else "verified"


def not_verified_because(side: dict, first: dict | None = None) -> list[str]:
    """Why a re-run that finished does not verify the flags: its own findings (a leak, a limit near, GC
    pressure, not measured well enough to rule a leak out), settings the JVMs did not get, or a leak the
    first run showed (no flag holds a job that keeps memory: it only moves the failure later)."""
    why = [f"re-run: {title}" for kind, title in zip(side["findings"], side.get("finding_titles") or side["findings"])
           if kind in NOT_VERIFIED_KINDS and not (kind == "gc-pressure" and gc_pressure_not_from_flags(side, first))]
    why += [f"settings not held: {s}" for s in side.get("settings_not_held") or []]
    if first:
        why += [f"first run: {title}" for kind, title in zip(first["findings"], first.get("finding_titles") or first["findings"])
                if kind in LEAK_KINDS and kind not in side["findings"]]
    return why


def gc_pressure_not_from_flags(side: dict, first: dict | None) -> str | None:
    """Why the re-run's GC pressure is not the recommended flags' doing (None: it may be): the first run,
    with the job's own heap, spent about the same share of its time in GC."""
    a, b = side.get("gc_share"), (first or {}).get("gc_share")
    if "gc-pressure" not in side["findings"] or a is None or b is None or a > b * GC_WORSE + GC_SLACK:
        return None
    return (f"GC took {a:.1%} of the re-run and {b:.1%} of the first run (the job's own heap): the job allocates "
            f"that fast with either heap, so it does not count against the flags")


def throughput(before: list[float | None], after: list[float | None]) -> dict:
    """Iterations/s before and after as median with min-max, the speedup of the medians, and a
    warning when the runs vary more than the difference they are meant to show."""
    def stats(values: list[float | None]) -> dict | None:
        v = [x for x in values if x]
        if not v:
            return None
        return {"median": statistics.median(v), "min": min(v), "max": max(v), "runs": len(v), "values": v}

    b, a = stats(before), stats(after)
    doc: dict = {"before": b, "after": a, "speedup": (a["median"] / b["median"]) if a and b else None, "warning": None}
    if a and b:
        spread = max(b["max"] - b["min"], a["max"] - a["min"])
        difference = abs(a["median"] - b["median"])
        if b["runs"] < 2 or a["runs"] < 2:
            doc["warning"] = ("one run per side: the noise is unknown, so the difference may be noise; "
                              "use --repeat 3 or more to measure it")
        elif spread > difference:
            doc["warning"] = (f"the runs vary by up to {spread:.3g} iterations/s, more than the {difference:.3g} "
                              f"iterations/s between the medians: the speed difference is within the noise")
    return doc


def tune_job(argv: list[str], out_dir: Path | str | None = None, interval_ms: int = DEFAULT_INTERVAL_MS,
             total: str | int | None = None, headroom: float = DEFAULT_HEADROOM, verify: bool = True,
             on_sample: Callable[[dict], None] | None = None, timeout_s: float | None = None,
             repeat: int = 1, plan_policy: str | None = None) -> dict:
    """Profile, recommend, re-run with the recommendation (again from the error if the re-run is
    refused at a limit), and with `repeat` > 1 run both sides that many times for throughput;
    everything as one JSON-able document whose `outcome` and `exit_code` say how it ended (also
    saved as tune.json in the tune's directory). The job is any command profile_job takes; the
    recommended flags reach its JVMs the way the agent does. On Ctrl-C/SIGTERM the Stopped
    exception carries the partial document in `.doc` (with "partial": true).

    With `plan_policy`, the re-run keeps the job's own flags and trains its network under a pyd4j
    plan of that policy instead (planned training through the agent): before/after shows what
    the plan saves."""
    if repeat < 1:
        raise ValueError(f"repeat {repeat}: give 1 or more runs per side")
    command = JobCommand.parse(argv)
    planned = plan_policy is not None
    spark = command.kind == "spark-submit" and not planned
    out = Path(out_dir) if out_dir else default_run_dir(command.title + "-tune")
    names = ["before"] + ([f"before-{i}" for i in range(2, repeat + 1)] if verify else [])
    if verify:
        names += ["after", *(f"after-{i}" for i in range(2, repeat + 2))]
    for name in names:
        check_run_dir(out / name)  # refuse before running anything, not after the first run
    doc: dict = {"out_dir": str(out), "command": list(argv), "partial": False}

    def run(name: str, extra: list[str] = (), plan: str | None = None, spark_conf: dict | None = None) -> JobRun:
        try:
            return profile_job(argv, out / name, interval_ms=interval_ms, extra_jvm_options=list(extra),
                               drop_memory_flags=bool(extra or spark_conf), on_sample=on_sample, timeout_s=timeout_s,
                               plan=plan, describe=planned and name == "before", spark_conf=spark_conf)
        except Stopped as err:
            side = "before" if name.startswith("before") else "after"
            if side == "after":
                doc["verified"] = False
            _stopped(err, out, doc, side)
            raise

    before = run("before")
    first = _side(before, spark)
    failure = _untunable(before, first)
    if failure:
        raise JobFailedError(failure, {"out_dir": str(out), "before": first, "outcome": "error", "exit_code": EXIT_ERROR})
    if spark:
        return _tune_spark(argv, out, doc, before, first, run, headroom, verify, repeat)
    before_findings = diagnose(before.timeline)
    need = measured_need(before.timeline, before_findings)
    flagset = keep_unshown_limits(flags_for(need, before.timeline.name, total, headroom), before.timeline, before_findings)
    doc.update({"before": first, "recommended": flagset.args(),
                "reasons": {f.arg: f.reason for f in flagset.flags}, "measured_need": asdict(need),
                "container_bytes": flagset.container_bytes, "notes": list(flagset.notes)})
    if not verify:
        doc.update(outcome="recommended", exit_code=EXIT_VERIFIED)
        save_tune_doc(out, doc)
        return doc

    def run_after(name: str) -> JobRun:
        """The re-run: the job's own flags under the plan, or the recommended flags."""
        return run(name, plan=doc["plan"]["path"]) if planned else run(name, flagset.args())

    if planned:  # same flags, the job's network under a plan
        doc["plan"] = _plan_job(before, plan_policy, out / "plan.json")
    attempts = []
    doc["max_reruns"] = 1 if planned else MAX_RERUNS
    for attempt in range(doc["max_reruns"]):
        after = run_after("after" if attempt == 0 else f"after-{attempt + 1}")
        side = _side(after)
        side["flags"] = [] if planned else flagset.args()
        if planned:
            side["plan_not_applied"] = _plan_not_applied(after)
        attempts.append(side)
        failure = _own_limit_failure(side, flagset.args()) if not planned else None
        if _outcome(side) != "rerun-failed" or failure is None:
            break
        doc.setdefault("own_limit_failures", []).append(failure)
        if attempt + 1 == doc["max_reruns"]:
            break
        if any(k in LEAK_KINDS for k in side["findings"] + first["findings"]):
            failure["stopped"] = "the job leaks: a larger limit only moves the failure later, so no new recommendation"
            break
        # the re-run failed at a limit this tune set: read the numbers its error names, recommend again
        refusals = limit_refusals(after.timeline)
        after_findings = diagnose(after.timeline)
        need = _larger(need, measured_need(after.timeline, after_findings))
        flagset = keep_unshown_limits(flags_for(need, before.timeline.name, total, headroom), before.timeline,
                                      before_findings)
        doc["rerecommended_after"] = [r.text for r in refusals] or [failure["said"]]
    if planned:
        doc["plan"]["agent"] = [e for e in after.timeline.network_events if e["type"] != "network"]
        doc["plan"]["applied"] = attempts[-1]["plan_not_applied"] is None
    doc.update(recommended=flagset.args(), reasons={f.arg: f.reason for f in flagset.flags},
               measured_need=asdict(need), container_bytes=flagset.container_bytes, notes=list(flagset.notes),
               after=attempts[-1], attempts=attempts)
    if not planned:
        passed = command.tool_options(flagset.args()) if command.java is None else flagset.args()
        doc["notes"] += [f"{arg} is not passed to a launcher's JVMs (JAVA_TOOL_OPTIONS): a JVM whose own command "
                         f"line sets a smaller -Xmx would refuse to start; set it where the job's JVM is started"
                         for arg in flagset.args() if arg not in passed]
        doc["notes"] += flags_not_taken(after, passed)
    return _conclude(doc, out, first, attempts, repeat, lambda name: _side(run(name)),
                     lambda name: _side(run_after(name)))


def _own_limit_failure(side: dict, flags: list[str]) -> dict | None:
    """When a re-run failed at a limit the tune itself set: which one, said so; None otherwise. An OOM
    kill is at a memory limit outside the JVM (the container's): said so, and recommended again too."""
    for kind in side["findings"]:
        if kind == "killed":
            return {"finding": kind, "flag": None,
                    "said": "the re-run was killed by the OOM killer (RSS near its memory limit), below the limits this "
                            "tune set: maxphysicalbytes did not stop it first"}
        prefix = LIMIT_FLAGS.get(kind)
        arg = next((a for a in flags if prefix and a.startswith(prefix)), None)
        if arg is not None:
            return {"finding": kind, "flag": arg,
                    "said": f"the re-run failed ({kind}) at {arg}, a limit this tune set"}
    return None


def _conclude(doc: dict, out: Path, first: dict, attempts: list[dict], repeat: int,
              before_side: Callable[[str], dict], after_side: Callable[[str], dict]) -> dict:
    """The outcome of the last re-run, and with `repeat` > 1 (when verified) more runs of each side for
    throughput with its spread; the document saved and returned."""
    last = attempts[-1]
    before_speeds, after_speeds = [first["iterations_per_s"]], [last["iterations_per_s"]]
    if _outcome(last, first) == "verified":
        used = len(attempts)
        for i in range(2, repeat + 1):
            before_speeds.append(before_side(f"before-{i}")["iterations_per_s"])
            after_speeds.append(after_side(f"after-{used + i - 1}")["iterations_per_s"])
    doc["throughput"] = throughput(before_speeds, after_speeds)
    doc["speedup"] = doc["throughput"]["speedup"]
    doc["outcome"] = _outcome(last, first)
    doc["not_verified_because"] = not_verified_because(last, first) if doc["outcome"] == "not-verified" else []
    doc["gc_pressure_not_from_flags"] = gc_pressure_not_from_flags(last, first)
    doc["verified"] = doc["outcome"] == "verified"
    doc["exit_code"] = {"verified": EXIT_VERIFIED, "not-verified": EXIT_NOT_VERIFIED,
                        "rerun-failed": EXIT_RERUN_FAILED}[doc["outcome"]]
    save_tune_doc(out, doc)
    return doc


def _tune_spark(argv: list[str], out: Path, doc: dict, before: JobRun, first: dict, run, headroom: float,
                verify: bool, repeat: int) -> dict:
    """tune for spark-submit: Spark settings from the worst executor's measured peaks (pyd4j.profile.spark_tuning),
    given to the re-run as --conf; verified when the re-run ends well, no executor lost memory, and every
    executor (the driver in local mode) got the recommended heap and JavaCPP limit. When an executor of the
    re-run runs out of memory, the settings are recommended again from the worst executor of both runs
    and the job re-run once more."""
    from pyd4j.profile.spark_tuning import recommend, settings_held  # noqa: PLC0415

    def recommended(conf: dict, sf, why: dict) -> dict:
        return dict(recommended=[f"{k}={v}" for k, v in conf.items()], spark_conf=conf, reasons=why.pop("reasons"),
                    measured_need=why["worst_need"], spark=why, container_bytes=sf.executor_container_bytes)

    conf, sf, why = recommend(before, argv, headroom)
    doc.update(before=first, **recommended(conf, sf, why),
               notes=["Spark settings are given to the re-run as --conf; spark.executor.extraJavaOptions keeps the "
                      "job's own options (less its memory flags) and carries pyd4j's agent"])
    if not verify:
        doc.update(outcome="recommended", exit_code=EXIT_VERIFIED)
        save_tune_doc(out, doc)
        return doc
    attempts = []
    for attempt in range(MAX_RERUNS):
        after = run("after" if attempt == 0 else f"after-{attempt + 1}", spark_conf=conf)
        side = _side(after, True)
        side["flags"] = [f"{k}={v}" for k, v in conf.items()]
        side["settings_not_held"] = settings_held(after, conf)
        attempts.append(side)
        failures = side["spark"]["executor_memory_failures"]
        memory = failures or any(_memory_failure(k) for k in side["findings"])
        if _outcome(side) != "rerun-failed" or attempt == MAX_RERUNS - 1 or not memory:
            break
        # an executor (or the driver) ran out of memory with the recommended settings: recommend again from
        # the worst of both runs (the failed one counts with its raised need), once
        conf, sf, why = recommend([before, after], argv, headroom)
        doc.update(**recommended(conf, sf, why), rerecommended_after=failures or side["finding_titles"])
    doc.update(after=side, attempts=attempts)
    return _conclude(doc, out, first, attempts, repeat, lambda name: _side(run(name), True),
                     lambda name: _side(run(name, spark_conf=conf), True))


def _stopped(err: Stopped, out: Path, doc: dict, side: str) -> None:
    """Keep what the tune had when it was stopped: the partial run, marked so, in err.doc and tune.json."""
    doc.update(partial=True, stopped_by=err.name, stopped_in=side)
    if err.run is not None:
        doc[side] = _side(err.run)
    save_tune_doc(out, doc)
    err.doc = doc
