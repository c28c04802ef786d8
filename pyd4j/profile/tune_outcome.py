"""How the runs of `pyd4j tune` ended, and what that makes of the tune: each run as the tune's document
keeps it (`side_of`), whether the first run can be tuned from (`untunable`), and the outcome of a
verifying re-run (`outcome`, `not_verified_because`) with the throughput before and after.

A run ended at its measurement window or at --timeout is a part of the job, never a failure: a re-run
ended so verifies the flags for what it measured (`verified_for`).
"""

from __future__ import annotations

import statistics

from pyd4j.output import human_bytes
from pyd4j.profile.command import MEMORY_FLAG_PREFIXES
from pyd4j.profile.diagnose import diagnose
from pyd4j.profile.finding import Finding
from pyd4j.profile.flatness import sizing_scope
from pyd4j.profile.gc_pressure import gc_share
from pyd4j.profile.launch import JobRun
from pyd4j.units import SizeError, parse_bytes

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


def side_of(run: JobRun, spark: bool = False) -> dict:
    """One run of the tune as its document keeps it: how it ended (a window or --timeout is no failure),
    what it measured, and for what its peaks size flags (`scope`)."""
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
        "gc_share": round(gc_share(t)[0], 4), **_ended(run),
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
        "jvm_memory_flags": [a for a in args if a.startswith(MEMORY_FLAG_PREFIXES)], "spark": spark, **_ended(run),
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




def _ended(run: JobRun) -> dict:
    """How a run ended when pyd4j ended it as asked, and for what its peaks size flags."""
    t = run.timeline
    return {"stopped_as_asked": run.stopped_as_asked, "window": t.meta.get("window"),
            "scope": sizing_scope(t).to_dict()}


def untunable(before: JobRun, side: dict) -> str | None:
    """Why the first run cannot be tuned from, or None when it can."""
    t = before.timeline
    if not t.samples:
        return (f"the first run recorded no measurements (0 samples; exit code {side['exit_code']}): there is nothing "
                f"to size flags from; see {side['run_dir']}/stderr.log, then tune again")
    ended_normally = side["exit_code"] == 0 and not side["interrupted"]
    if not side["iterations"] and not ended_normally and not any(memory_failure(k) for k in side["findings"]):
        evidence = [e for f in diagnose(t) if f.kind in ("crash", "no-iterations") for e in f.evidence]
        how = (f"was stopped at the {side['stopped_by']}" if side.get("stopped_as_asked") else "was stopped"
               if side["interrupted"] else f"exited with code {side['exit_code']}")
        return (f"the job {how} "
                f"before its first iteration, not for lack of memory ({'; '.join(evidence)}); what it used while "
                f"starting is not what training needs: fix the java command (see {side['run_dir']}/stderr.log) and tune again")
    return None


def memory_failure(kind: str) -> bool:
    """An out-of-memory error or an OOM kill (a signal from outside with no limit near is not one)."""
    return kind.startswith("oom") or kind == "killed"


def outcome(side: dict, first: dict | None = None) -> str:
    """verified, not-verified or rerun-failed: a run ended at its window or at --timeout did not fail."""
    if side.get("plan_not_applied"):   # the job did not train under the plan: nothing was shown
        return "not-verified"
    ended_badly = not side.get("stopped_as_asked") and (side["exit_code"] != 0 or side["interrupted"])
    if ended_badly or any(k.startswith(("oom", "killed", "crash")) for k in side["findings"]):
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
    if side.get("stopped_as_asked") and first and side["iterations"] < first["iterations"]:
        why.append(f"re-run: ended at the {side['stopped_by']} after {side['iterations']} iterations, before the "
                   f"{first['iterations']} the flags were sized from")
    scope = (first or {}).get("scope") or {}
    if scope.get("ended") in ("window", "timeout") and not scope.get("whole_job") \
            and not any(k in LEAK_KINDS for k in first["findings"]):
        why.append(f"first run: not sized for the whole job: {scope['why']}")
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


def verified_for(side: dict) -> str:
    """What a verifying re-run covered: the whole job, or the part its window or --timeout measured."""
    if not side.get("stopped_as_asked"):
        return "the whole job"
    trained = ((side.get("window") or {}).get("decision") or {}).get("trained_s")
    at = f", {trained:.0f} s of training" if trained else ""
    return f"the {side['stopped_by']}: {side['iterations']} iterations{at}"
