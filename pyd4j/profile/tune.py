"""`pyd4j tune`: profile a job once, compute JVM flags from what it really used, run it again with
them, and compare. What the job needs and the flags for it: pyd4j.profile.need; how each run ended
and what that makes of the tune: pyd4j.profile.tune_outcome.

Every run can be windowed (pyd4j.profile.window): it ends once it has what its verdict needs. Flags
from a windowed first run are sized for the whole job only when its memory is shown flat
(pyd4j.profile.flatness); a windowed re-run verifies them for its window (`verified_for`).

Outcomes (and the command's exit codes): verified (0), not verified (3: a run leaks, comes near a
limit, or was not measured well enough to rule a leak out, or the first run's window did not show
the memory flat: the findings decide, not the re-run's exit alone), re-run failed (4: the re-run
with the recommended flags failed, even after new recommendations read from its errors, MAX_RERUNS
re-runs in all; a run ended at its window or at --timeout never counts as failed). A first run that
cannot be tuned (no measurements, or it died before training for a reason other than memory) is
refused before any recommendation (1).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from pyd4j.memory.flags import DEFAULT_HEADROOM
from pyd4j.profile.command import JobCommand
from pyd4j.profile.diagnose import diagnose
from pyd4j.profile.launch import DEFAULT_INTERVAL_MS, JobRun, check_run_dir, default_run_dir, profile_job
from pyd4j.profile.need import LIMIT_FLAGS, environment_for, flags_for, keep_unshown_limits, larger, measured_need, raised_by  # noqa: F401
from pyd4j.profile.oom import limit_refusals
from pyd4j.profile.signals import Stopped
from pyd4j.profile.tune_outcome import (  # noqa: F401 (the tune's outcome rules, named here for callers)
    EXIT_ERROR, EXIT_NOT_VERIFIED, EXIT_RERUN_FAILED, EXIT_VERIFIED, LEAK_KINDS, gc_pressure_not_from_flags,
    flags_not_taken, memory_failure, not_verified_because, outcome, side_of, throughput, untunable, verified_for)
from pyd4j.profile.tune_doc import TUNE_DOC, save_tune_doc  # noqa: F401 (TUNE_DOC: named here for callers)
from pyd4j.profile.window import RunWindow, WindowSpec

MAX_RERUNS = 3               # re-runs with recommended flags at most: the first, then again from each failure


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
    from pyd4j.memory.planned_job import KEY, job_network_document  # noqa: PLC0415

    described = [e["network"] for e in run.timeline.network_events if e["type"] == "network" and e.get("network")]
    if not described:
        raise JobFailedError(f"the job trained no DL4J network the agent could describe (see {run.run_dir}): "
                             "there is nothing to plan", {"out_dir": str(path.parent), "before": side_of(run)})
    # the network the job trained last; the agent's trainer has the backend's offload tier
    network = described[-1]
    try:
        plan = plan_for_job(network, path, policy, offload=True,
                            probe=of_configuration(network["conf"], "the job's network"))
    except (ValueError, JavaError) as err:   # refused by the planner (naming the layer), or by DL4J's probe
        raise JobFailedError(f"the job's network cannot be planned: {err}", {"out_dir": str(path.parent),
                                                                             "before": side_of(run)}) from None
    # what the planned job holds off the heap: the figure `pyd4j plan` and fit()'s .plan show, with DL4J's
    # own fit() data pipeline, as `pyd4j estimate` assumes it (the job's iterator in DL4J's async queue of 2)
    plan[KEY] = job_network_document(plan["predicted_peak_bytes"], network["conf"], plan["input_shapes"],
                                     plan["dtype"])
    return plan


def _plan_not_applied(run: JobRun) -> str | None:
    """Why the re-run did not train under its plan (the agent refused it, or never met a network to
    apply it to), or None when it did."""
    from pyd4j.profile.plan_refusal import plan_refusals  # noqa: PLC0415

    refused = plan_refusals(run.timeline)
    if refused:
        return (refused[-1].get("result") or {}).get("reason") or "the agent refused it without a reason"
    if not any(e.get("type") == "plan" for e in run.timeline.network_events):
        return "the agent applied it to no network (the re-run trained none through fit())"
    return None


def tune_job(argv: list[str], out_dir: Path | str | None = None, interval_ms: int = DEFAULT_INTERVAL_MS,
             total: str | int | None = None, headroom: float = DEFAULT_HEADROOM, verify: bool = True,
             on_sample: Callable[[dict], None] | None = None, timeout_s: float | None = None,
             repeat: int = 1, plan_policy: str | None = None, window: WindowSpec | None = None,
             verify_full: bool = False) -> dict:
    """Profile, recommend, re-run with the recommendation (again from the error if the re-run is
    refused at a limit), and with `repeat` > 1 run both sides that many times for throughput;
    everything as one JSON-able document whose `outcome` and `exit_code` say how it ended (also
    saved as tune.json in the tune's directory). The job is any command profile_job takes; the
    recommended flags reach its JVMs the way the agent does. On Ctrl-C/SIGTERM the Stopped
    exception carries the partial document in `.doc` (with "partial": true).

    With `plan_policy`, the re-run keeps the job's own flags and trains its network under a pyd4j
    plan of that policy instead (planned training through the agent): before/after shows what
    the plan saves.

    `window` (pyd4j.profile.window; None: the whole job): every run ends once it has what its verdict
    needs; with `verify_full` the verifying re-run runs the whole job all the same."""
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
    doc: dict = {"out_dir": str(out), "command": list(argv), "partial": False, "notes": [],
                 "window": None if window is None or window.full else window.text()}
    if command.kind == "spark-submit" and window is not None and not window.full:
        doc["window"] = None
        doc["notes"].append(f"--window {window.text()} is not applied to a spark-submit job: its executors are "
                            f"processes of the cluster, which the agent cannot end cleanly; each run is the whole job")
    runs = _Runs(argv, out, doc, interval_ms, on_sample, timeout_s, planned, window if doc["window"] else None, verify_full)
    before = runs.run("before")
    first = runs.first = side_of(before, spark)
    failure = untunable(before, first)
    if failure:
        raise JobFailedError(failure, {"out_dir": str(out), "before": first, "outcome": "error", "exit_code": EXIT_ERROR})
    if spark:
        return _tune_spark(argv, out, doc, before, first, runs.run, headroom, verify, repeat)
    before_findings = diagnose(before.timeline)
    need = measured_need(before.timeline, before_findings)
    flagset = keep_unshown_limits(flags_for(need, before.timeline.name, total, headroom), before.timeline, before_findings)
    doc.update({"before": first, "recommended": flagset.args(),
                "recommended_environment": {} if planned else environment_for(first["findings"]),
                "reasons": {f.arg: f.reason for f in flagset.flags}, "measured_need": asdict(need),
                "container_bytes": flagset.container_bytes, "notes": doc["notes"] + list(flagset.notes)
                + window_notes(first)})
    if not verify:
        return recommended_only(doc, out, first)
    if planned:  # same flags, the job's network under a plan
        doc["plan"] = _plan_job(before, plan_policy, out / "plan.json")
    return _verify(command, runs, before, need, flagset, total, headroom, repeat)


@dataclass
class _Runs:
    """The runs of one tune: where each goes, its window, and the partial document if one is stopped."""

    argv: list[str]
    out: Path
    doc: dict
    interval_ms: int
    on_sample: Callable[[dict], None] | None
    timeout_s: float | None
    planned: bool
    window: WindowSpec | None
    verify_full: bool
    first: dict = field(default_factory=dict)

    def windowed(self, name: str) -> RunWindow | None:
        """The window of one run: the first runs' own; a re-run measures at least the first run's iterations."""
        if self.window is None or (self.verify_full and name.startswith("after")):
            return None
        least = self.first["iterations"] if name.startswith("after") and self.first.get("stopped_as_asked") else 0
        return RunWindow(self.window, "memory", min_iterations=least)

    def run(self, name: str, extra: list[str] = (), plan: str | None = None, spark_conf: dict | None = None,
            env: dict[str, str] | None = None) -> JobRun:
        try:
            return profile_job(self.argv, self.out / name, interval_ms=self.interval_ms, extra_jvm_options=list(extra),
                               drop_memory_flags=bool(extra or spark_conf), on_sample=self.on_sample, env_changes=env or None,
                               timeout_s=self.timeout_s, plan=plan, describe=self.planned and name == "before",
                               spark_conf=spark_conf, window=self.windowed(name))
        except Stopped as err:
            side = "before" if name.startswith("before") else "after"
            if side == "after":
                self.doc["verified"] = False
            _stopped(err, self.out, self.doc, side)
            raise


def _verify(command: JobCommand, runs: _Runs, before: JobRun, need, flagset, total, headroom: float,
            repeat: int) -> dict:
    """The re-runs: with the recommended flags (again from the numbers a failure at a limit the tune set
    names, MAX_RERUNS at most), or the job's own flags under the plan; then the outcome."""
    doc, first, planned = runs.doc, runs.first, runs.planned
    before_findings = diagnose(before.timeline)
    before_notes = list(flagset.notes) + window_notes(first)   # said again with the final recommendation

    def run_after(name: str) -> JobRun:
        """The re-run: the job's own flags under the plan, or the recommended flags and environment."""
        if planned:
            return runs.run(name, plan=doc["plan"]["path"])
        return runs.run(name, flagset.args(), env=doc["recommended_environment"])

    attempts = []
    doc["max_reruns"] = 1 if planned else MAX_RERUNS
    for attempt in range(doc["max_reruns"]):
        after = run_after("after" if attempt == 0 else f"after-{attempt + 1}")
        side = side_of(after)
        side["flags"] = [] if planned else flagset.args()
        side["environment"] = dict(doc["recommended_environment"])
        if planned:
            side["plan_not_applied"] = _plan_not_applied(after)
        attempts.append(side)
        failure = _own_limit_failure(side, flagset.args()) if not planned else None
        if outcome(side) != "rerun-failed" or failure is None:
            break
        doc.setdefault("own_limit_failures", []).append(failure)
        if attempt + 1 == doc["max_reruns"]:
            break
        if any(k in LEAK_KINDS for k in side["findings"] + first["findings"]):
            failure["stopped"] = "the job leaks: a larger limit only moves the failure later, so no new recommendation"
            break
        # the re-run failed at a limit this tune set: read the numbers its error names, recommend again
        refusals = limit_refusals(after.timeline)
        need = larger(need, measured_need(after.timeline, diagnose(after.timeline)))
        flagset = keep_unshown_limits(flags_for(need, before.timeline.name, total, headroom), before.timeline,
                                      before_findings)
        doc["rerecommended_after"] = [r.text for r in refusals] or [failure["said"]]
    if planned:
        doc["plan"]["agent"] = [e for e in after.timeline.network_events if e["type"] != "network"]
        doc["plan"]["applied"] = attempts[-1]["plan_not_applied"] is None
    doc.update(recommended=flagset.args(), reasons={f.arg: f.reason for f in flagset.flags},
               measured_need=asdict(need), container_bytes=flagset.container_bytes,
               notes=[n for n in doc["notes"] if n not in before_notes] + list(flagset.notes) + window_notes(first),
               after=attempts[-1], attempts=attempts)
    if not planned:
        passed = command.tool_options(flagset.args()) if command.java is None else flagset.args()
        doc["notes"] += [f"{arg} is not passed to a launcher's JVMs (JAVA_TOOL_OPTIONS): a JVM whose own command "
                         f"line sets a smaller -Xmx would refuse to start; set it where the job's JVM is started"
                         for arg in flagset.args() if arg not in passed]
        doc["notes"] += flags_not_taken(after, passed)
    return _conclude(doc, runs.out, first, attempts, repeat, lambda name: side_of(runs.run(name)),
                     lambda name: side_of(run_after(name)))


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
    if outcome(last, first) == "verified":
        used = len(attempts)
        for i in range(2, repeat + 1):
            before_speeds.append(before_side(f"before-{i}")["iterations_per_s"])
            after_speeds.append(after_side(f"after-{used + i - 1}")["iterations_per_s"])
    doc["throughput"] = throughput(before_speeds, after_speeds)
    doc["speedup"] = doc["throughput"]["speedup"]
    doc["outcome"] = outcome(last, first)
    doc["not_verified_because"] = not_verified_because(last, first) if doc["outcome"] == "not-verified" else []
    doc["gc_pressure_not_from_flags"] = gc_pressure_not_from_flags(last, first)
    doc["verified"] = doc["outcome"] == "verified"
    doc["verified_for"] = verified_for(last) if doc["verified"] else None
    if doc["verified"] and last.get("stopped_as_asked"):
        doc.setdefault("notes", []).append(f"the flags were verified for {doc['verified_for']}, not for the whole job; "
                                           f"`pyd4j tune --verify-full` re-runs the whole job with them")
    doc["exit_code"] = {"verified": EXIT_VERIFIED, "not-verified": EXIT_NOT_VERIFIED,
                        "rerun-failed": EXIT_RERUN_FAILED}[doc["outcome"]]
    save_tune_doc(out, doc)
    return doc


def window_notes(first: dict) -> list[str]:
    """What a first run ended at its window or --timeout could and could not show."""
    scope = first.get("scope") or {}
    if scope.get("ended") not in ("window", "timeout"):
        return []
    return [f"sized for the whole job: {scope['why']}" if scope["whole_job"] else f"not sized for the whole job: {scope['why']}",
            *scope.get("notes", []), *([scope["leak_resolution"]] if scope.get("leak_resolution") else [])]


def recommended_only(doc: dict, out: Path | None, first: dict) -> dict:
    """A recommendation no re-run verifies (--no-verify, --from): "recommended" (0) when the first run's
    peaks are the whole job's and it shows no leak; else "not-verified" (3) with what it could not show."""
    why = not_verified_because({"findings": [], "stopped_as_asked": False, "iterations": 0}, first)
    scope = first.get("scope") or {}
    if not scope.get("whole_job", True) and scope.get("ended") not in ("window", "timeout"):
        why.append(f"first run: not sized for the whole job: {scope['why']}")
    doc.update(outcome="not-verified" if why else "recommended", not_verified_because=why,
               exit_code=EXIT_NOT_VERIFIED if why else EXIT_VERIFIED)
    if out is not None:
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
               notes=doc["notes"] + ["Spark settings are given to the re-run as --conf; spark.executor.extraJavaOptions "
                                     "keeps the job's own options (less its memory flags) and carries pyd4j's agent"])
    if not verify:
        return recommended_only(doc, out, first)
    attempts = []
    for attempt in range(MAX_RERUNS):
        after = run("after" if attempt == 0 else f"after-{attempt + 1}", spark_conf=conf)
        side = side_of(after, True)
        side["flags"] = [f"{k}={v}" for k, v in conf.items()]
        side["settings_not_held"] = settings_held(after, conf)
        attempts.append(side)
        failures = side["spark"]["executor_memory_failures"]
        memory = failures or any(memory_failure(k) for k in side["findings"])
        if outcome(side) != "rerun-failed" or attempt == MAX_RERUNS - 1 or not memory:
            break
        # an executor (or the driver) ran out of memory with the recommended settings: recommend again from
        # the worst of both runs (the failed one counts with its raised need), once
        conf, sf, why = recommend([before, after], argv, headroom)
        doc.update(**recommended(conf, sf, why), rerecommended_after=failures or side["finding_titles"])
    doc.update(after=side, attempts=attempts)
    return _conclude(doc, out, first, attempts, repeat, lambda name: side_of(run(name), True),
                     lambda name: side_of(run(name, spark_conf=conf), True))


def _stopped(err: Stopped, out: Path, doc: dict, side: str) -> None:
    """Keep what the tune had when it was stopped: the partial run, marked so, in err.doc and tune.json."""
    doc.update(partial=True, stopped_by=err.name, stopped_in=side)
    if err.run is not None:
        doc[side] = side_of(err.run)
    save_tune_doc(out, doc)
    err.doc = doc
