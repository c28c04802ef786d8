"""`pyd4j tune --speed`: find the settings that slow a DL4J job, try each as a change its code
does not see, keep only what a noise-aware A/B (pyd4j.profile.ab) proves faster.

One run of the job as it is (the probe) says what to try (pyd4j.profile.speed_candidates): OpenMP/BLAS
threads against the cores, ND4J's periodic GC, the heap where GC time shows, DL4J's workspaces where the
network turns them off, an async prefetcher where the training thread waits for data, the job's own
System.gc() calls, the nd4j-native build for this CPU and MKL where their jars are at hand. The
candidates are tried largest expected gain first, each compared with the job as it is in an A/B that
stops once it decides, or once more runs cannot make the change worth keeping, all within a total
budget of runs or minutes (pyd4j.profile.speed_search); every run after the probe ends at a
measurement window learnt from the probe (pyd4j.profile.window). The changes proved faster are
combined greedily, best first, each verified again on top of those already kept, and the final
combination is compared with the job as it is once more when it holds more than one change. A
change that breaks the job is reported and dropped. Nothing is kept on a guess: no verified change
is the answer (exit 3) when none is proved.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from pyd4j.profile import ab, fatal_error, spark_speed
from pyd4j.profile.command import JobCommand, JobCommandError
from pyd4j.profile.launch import default_run_dir, profile_job
from pyd4j.profile.signals import Stopped, stopped_as_asked
from pyd4j.profile.startup import stderr_tail
from pyd4j.profile.speed_report import print_speed, speed_doc as _speed_doc  # noqa: F401 (print_speed: the CLI's)
from pyd4j.profile.speed_candidates import (  # noqa: F401 (what to try: named here for callers)
    DATA_SHARE, GC_SHARE, MAX_PREFETCH, THREAD_VARIABLES, _mkl, _native_build, candidates, cores, prefetch_candidate,
    prefetch_depth)
from pyd4j.profile.speed_search import Budget, by_expected_gain, change_of, greedy, search  # noqa: F401
from pyd4j.profile.speed_setup import QUIET_AGENT, Change, Probe, Setup  # noqa: F401 (the tune's changes, named here)
from pyd4j.profile.timeline import Timeline
from pyd4j.profile.timesplit import time_split
from pyd4j.profile.window import SpeedWindows, WindowSpec

EXIT_VERIFIED = 0
EXIT_NOTHING = 1        # the probe run trained nothing: nothing to measure
EXIT_NO_CHANGE = 3      # no verified change
RUN_TIMEOUT_MIN_S = 120.0   # the least time a run after the first gets when the user gave no --timeout


# -- one run --------------------------------------------------------------------------------------

Runner = Callable[[Setup, str], "Measured"]


@dataclass
class Measured:
    iterations_per_s: float | None
    ok: bool
    why: str
    timeline: Timeline | None = None
    run_dir: str | None = None
    no_progress: bool = False     # finished cleanly, too few iterations to measure a speed
    per_executor: list[float | None] = field(default_factory=list)   # a Spark cluster job: each executor's rate


def job_runner(job: list[str], out_dir: Path, interval_ms: int = 100, timeout_s: float | None = None,
               base_jvm: Sequence[str] = (), base_spark: dict[str, str] | None = None,
               window: WindowSpec | None = None, base_env: dict[str, str] | None = None) -> Runner:
    """Runs the job once per call under the agent with a setup, each run in its own directory.
    `base_jvm`: memory flags (the memory tune's) that replace the job's own on every run, both sides
    of every A/B (a setup's own -Xmx follows and wins), with `base_env`, the environment they assume.
    `base_spark`: the same for a spark-submit job, Spark settings, its own memory flags dropped; on a
    cluster it gets the setup as executor settings, measured on its executors (profile.spark_speed).
    Without `timeout_s`, every run after the first is stopped at 5x the first run's wall time (at
    least RUN_TIMEOUT_MIN_S): a change that hangs the job costs a bounded time. `window`
    (pyd4j.profile.window.SpeedWindows): the probe ends once its rate is steady, every later run after
    the probe's warm-up and a measured stretch, its speed taken after the warm-up (not on a Spark cluster)."""
    counter = [0]
    limit = [timeout_s]
    command = JobCommand.parse(job)
    java = command.java
    cluster = spark_speed.cluster_submit(job)
    windows = SpeedWindows(window if cluster is None else None)
    if base_jvm and command.kind == "spark-submit":
        raise JobCommandError("memory flags cannot be given to a spark-submit job as JVM options; the memory tune "
                              "of a Spark job gives Spark settings (base_spark)")

    def run(setup: Setup, side: str) -> Measured:
        counter[0] += 1
        run_dir = out_dir / f"run-{counter[0]:03d}-{side}"
        opts = setup.jvm_options()
        drop = setup.drop_memory_flags()
        per_executor: list[float | None] = []
        if cluster is not None:
            # the setup reaches the executors; the driver (spark-submit's JVM) gets the quiet agent alone
            result = profile_job(job, run_dir, interval_ms=interval_ms, timeout_s=limit[0],
                                 extra_jvm_options=["-Dpyd4j.agent=" + ",".join(QUIET_AGENT)],
                                 spark_conf=spark_speed.merged(base_spark or {}, spark_speed.executor_conf(setup.env(), opts)),
                                 drop_memory_flags=bool(base_spark))
            ips, lanes, per_executor = spark_speed.executor_speed(result.lanes)
            t = lanes[0] if lanes else result.timeline
            notes = [lane.nd4j_settings() for lane in lanes]
        else:
            if base_jvm:
                opts, drop = [*base_jvm, *opts], True
            elif drop and java is not None:
                kept = [f for f in java.memory_flags() if not f.startswith(("-Xmx", "-Xms"))]
                opts = kept + opts
            w = windows.next()
            result = profile_job(job, run_dir, interval_ms=interval_ms, extra_jvm_options=opts,
                                 drop_memory_flags=drop or bool(base_spark), timeout_s=limit[0],
                                 env_changes={**(base_env or {}), **setup.env()} or None,
                                 spark_conf=base_spark or None, window=w)
            t = result.timeline
            ips = windows.rate(t, w)
            windows.learn(t)
            notes = [t.nd4j_settings()]
        if limit[0] is None:
            limit[0] = max(RUN_TIMEOUT_MIN_S, 5 * result.wall_s)

        def measured(ok: bool, why: str, no_progress: bool = False) -> Measured:
            return Measured(ips, ok, why, t, str(run_dir), no_progress, per_executor)
        # a change that did not take: what ran was another build or BLAS, and its speed says nothing of this one
        for note in (n for n in notes if n is not None):
            if setup.build() and f"/{setup.build()}/" not in note.get("native_library", ""):
                return measured(False, f"ND4J loaded {note.get('native_library') or 'no native library it reported'}, "
                                       f"not the {setup.build()} build")
            if setup.blas() and note.get("blas") != setup.blas():
                return measured(False, f"ND4J's BLAS calls went to {note.get('blas') or 'a BLAS it did not report'} "
                                       f"({note.get('blas_library') or '?'}), not {setup.blas()}")
        if stopped_as_asked(result.stopped_by) and ips:
            return measured(True, f"stopped at the {result.stopped_by}")
        if not result.ok:
            fatal = fatal_error.find(run_dir)   # a JVM that crashed says why on stdout, not in its last stderr lines
            tail = [fatal[0].summary()] if fatal else stderr_tail((result.timeline if cluster is not None else t).run_dir)
            return measured(False, f"exit code {result.returncode}" + (f" ({result.stopped_by})" if result.stopped_by else "")
                            + (f": {' | '.join(tail)}" if tail else ""))
        if not ips:
            if cluster is not None:
                return measured(False, spark_speed.no_executor_lane(result.lanes))
            # exited cleanly: too slow to measure in the job's run (a fixed-time job), not broken
            return measured(False, f"trained {t.iterations()} iteration(s), too few to measure a speed", no_progress=True)
        return measured(True, "")
    run.windows = windows   # type: ignore[attr-defined]  (the tune's document says what they were)
    return run


def probe_of(m: Measured) -> Probe:
    """The probe's evidence from its timeline."""
    p = Probe(m.iterations_per_s, m.ok, m.why, run_dir=m.run_dir)
    t = m.timeline
    if t is None:
        return p
    p.nd4j = t.nd4j_settings() or {}
    p.iterator = next((n["iterator"] for n in t.notes if isinstance(n.get("iterator"), dict)), {})
    _, gc_ms = t.gc_totals()
    marks = sorted([(s["t"], s["iterations"]) for s in t.samples if s.get("iterations")]
                   + [(e["t"], e["n"]) for e in t.iter_events])
    if marks and marks[-1][0] > marks[0][0]:
        inside = [(s["t"], g) for s, g in zip(t.samples, gc_ms) if marks[0][0] <= s["t"] <= marks[-1][0]]
        if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
            p.gc_share = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
        explicit = sum(e.get("duration_ms", 0) for e in t.gc_events
                       if e.get("cause") == "System.gc()" and marks[0][0] <= e.get("t", 0) <= marks[-1][0])
        p.explicit_gc_share = explicit / (marks[-1][0] - marks[0][0])
    p.heap_max = t.limits().get("heap_max")
    p.time_split = time_split(t)
    return p


# -- the tune -------------------------------------------------------------------------------------

def _side(runner: Runner, setup: Setup, side: str, record: list[dict], budget: Budget | None = None
          ) -> Callable[[], float]:
    """One run of one side as the A/B wants it. A run that fails is run again, once per setup: one
    failure (a native crash now and then, a stall on a busy machine) stays in the run log and in the
    tune's `failed_runs`, printed; a second failure of the same setup (counted in the run log) means it
    breaks the job. A clean run too slow to measure (a fixed-time job on a busy machine) ends as
    NoProgress: slower."""
    def run() -> float:
        label = setup.label()
        while True:
            began = time.monotonic()
            m = runner(setup, side)
            if budget is not None:
                budget.ran(time.monotonic() - began)
            record.append(_logged(side, setup, m))
            if m.ok and m.iterations_per_s:
                return m.iterations_per_s
            if sum(1 for r in record if r["setup"] == label and r["side"] != "probe" and not r["ok"]) > 1:
                break
        if m.no_progress:
            raise ab.NoProgress(m.why)
        raise ab.RunFailed(f"{label}: {m.why or 'no speed measured'}")
    return run


def _logged(side: str, setup: Setup, m: Measured) -> dict:
    """A run as the run log keeps it."""
    row = {"side": side, "setup": setup.label(), "iterations_per_s": m.iterations_per_s, "ok": m.ok, "why": m.why,
           "run_dir": m.run_dir}
    if m.per_executor:
        row["executors_iterations_per_s"] = m.per_executor
    return row


def tune_speed(job: list[str], out_dir: Path | str | None = None, interval_ms: int = 100,
               timeout_s: float | None = None, min_runs: int = ab.MIN_RUNS, max_runs: int = ab.MAX_RUNS,
               runner: Runner | None = None, env: dict[str, str] | None = None, n_cores: int | None = None,
               ram_bytes: int | None = None, only: set[str] | None = None, base_jvm: Sequence[str] = (),
               features: tuple[str, ...] | None = None, base_spark: dict[str, str] | None = None,
               window: WindowSpec | None = None, budget: Budget | None = None, futility: bool = True,
               base_env: dict[str, str] | None = None) -> dict:
    """Probe the job, try the candidates (largest expected gain first), combine what is proved; the
    `speed` document. `base_jvm`: memory flags every run gets (`pyd4j tune --speed --memory`: the memory
    tune's), with `base_env`, the environment those assume; `base_spark`: its Spark settings, for a
    spark-submit job. `only`: try only these kinds of setting (threads, omp_wait_policy, nd4j.periodic_gc,
    workspace_mode, prefetch, explicit_gc, heap, nd4j_build, blas). `features`: the CPU's flags (default:
    this machine's). `window`: each run's measurement window (None: the whole job); `budget`: the runs or
    minutes the whole tune may spend;
    `futility`: an A/B also stops once more runs cannot make its change worth keeping. On Ctrl-C or
    SIGTERM, Stopped carries the partial document (`partial`: true) in `.doc`."""
    started = time.monotonic()
    command = JobCommand.parse(job)
    cluster = spark_speed.cluster_submit(job)
    out = Path(out_dir) if out_dir else default_run_dir(command.title + "-speed")
    out.mkdir(parents=True, exist_ok=True)
    runner = runner or job_runner(job, out, interval_ms, timeout_s, base_jvm, base_spark, window, base_env)
    budget = budget or Budget()
    runs: list[dict] = []
    trials: list[dict] = []
    doc: dict = {"command": list(job), "out": str(out), "partial": False, "base_jvm_options": list(base_jvm),
                 "base_environment": dict(base_env or {}),
                 "base_spark_conf": dict(base_spark or {})}

    def compare(a: Setup, b: Setup) -> ab.Comparison:
        return ab.compare(_side(runner, a, "before", runs, budget), _side(runner, b, "after", runs, budget),
                          min_runs, max_runs, futility=futility, out_of_budget=budget.out)

    def speed_doc(final: ab.Comparison | None, rows: list[dict], verdict: str, kept: Setup | None = None,
                  note: str | None = None) -> dict:
        d = _speed_doc(final, rows, trials, verdict, runs, started, kept=kept, note=note)
        if cluster is not None:
            changes = kept.changes if kept else ()
            conf = spark_speed.executor_conf(Setup(changes).env(), [o for c in changes for o in c.jvm])
            # what the executors need is Spark settings, not this shell's environment or JVM options
            d["paste"].update(environment={}, jvm_options=[], spark_conf=conf, spark_submit=spark_speed.paste(conf))
        return d

    try:
        first = runner(Setup(), "probe")
        runs.append(_logged("probe", Setup(), first))
        probe = probe_of(first)
        cands = _probe_doc(doc, probe, first, cluster, env, n_cores, ram_bytes, features, base_jvm, base_spark, only)
        doc["window"] = getattr(runner, "windows", SpeedWindows(None)).describe()
        if not probe.ok or not probe.iterations_per_s:
            doc["speed"] = speed_doc(None, [], "nothing to measure", note="the job as it is did not train; nothing was compared")
            doc["error"] = (f"the job as it is did not train ({probe.why}); tune --speed needs a job that runs DL4J "
                            f"training iterations (fit()) and exits cleanly")
            doc["exit_code"] = EXIT_NOTHING
            return _with_budget(doc, budget)
        if not cands:
            doc["speed"] = speed_doc(None, [], "no verified change", note="nothing in the probe run points at a setting pyd4j can change")
            doc["exit_code"] = EXIT_NO_CHANGE
            return _with_budget(doc, budget)
        cands, doc["expected_gain"] = by_expected_gain(cands, probe)
        try:
            kept, rows, final, untried = _search(cands, compare, trials)
        except ab.RunFailed as err:
            doc["speed"] = speed_doc(None, [], "no verified change", note=f"a run failed twice during the comparison ({err.why}); no change can be verified")
            doc["exit_code"] = EXIT_NO_CHANGE
            return _with_budget(doc, budget)
        doc["speed"] = speed_doc(final if kept.changes else None, rows, "verified" if kept.changes else "no verified change",
                                 kept=kept)
        doc["exit_code"] = EXIT_VERIFIED if kept.changes else EXIT_NO_CHANGE
        return _with_budget(doc, budget, untried)
    except Stopped as err:
        doc.update(partial=True, stopped_by=err.name, stopped_in="the probe" if not runs else "an A/B run",
                   exit_code=err.exit_code)
        doc["speed"] = speed_doc(None, [], "stopped", note=f"stopped by {err.name}: the job and everything it started were "
                                                           f"ended; no change is recommended from an unfinished comparison")
        err.doc = _with_budget(doc, budget)
        raise


def _search(cands: list[Change], compare: Callable[[Setup, Setup], ab.Comparison], trials: list[dict]
            ) -> tuple[Setup, list[dict], ab.Comparison | None, list[str]]:
    """The greedy search; the kept combination of more than one change compared with the job as it is
    once more. Where the budget ends that check, only the best change proved on its own is kept."""
    found = search(cands, compare, trials)
    kept, rows, final = found.kept, found.rows, found.against_base
    if len(kept.changes) > 1:
        check = compare(Setup(), kept)
        trials.append({"setting": "all kept", "after": kept.label(), "on_top_of": Setup().label(), **check.to_dict()})
        if check.verdict == "faster":
            final = check
        elif check.budget_spent:
            kept, rows = Setup(kept.changes[:1]), rows[:1]
        else:
            kept, rows = Setup(), []
    return kept, rows, final, found.untried


def _with_budget(doc: dict, budget: Budget, untried: list[str] = ()) -> dict:
    doc["budget"] = {**budget.to_dict(), "untried": list(untried)}
    return doc


def _probe_doc(doc: dict, probe: Probe, first: Measured, cluster, env: dict[str, str] | None, n_cores: int | None,
               ram_bytes: int | None, features: tuple[str, ...] | None, base_jvm: Sequence[str],
               base_spark: dict[str, str] | None, only: set[str] | None) -> list[Change]:
    """What the probe says, into the document (and why a candidate was not tried); the candidates."""
    env = dict(os.environ if env is None else env)
    n_cores = n_cores or cores()
    if ram_bytes is None:
        import psutil  # noqa: PLC0415

        from pyd4j.memory.machine import cgroup_limit_bytes  # noqa: PLC0415

        ram_bytes = min(x for x in (cgroup_limit_bytes(), psutil.virtual_memory().total) if x)
    if cluster is not None:
        # the executors train: their environment is the job's spark.executorEnv.* with every run's base
        # settings over it (a candidate the base already sets would be an A/B of two equal setups), their cores Spark's
        env = spark_speed.executor_env(cluster, base_spark)
        lane = first.timeline
        n_cores = (lane.jvm.cores if lane is not None and lane.jvm is not None and lane.jvm.cores else None) or n_cores
    doc.update({"cores": n_cores, "spark_cluster": None if cluster is None else {
                    "master": cluster.master, "executor_cores": n_cores, "executor_environment": env,
                    "speed": "the sum of the executors' iterations per second"},
                "probe": {"iterations_per_s": probe.iterations_per_s, "nd4j": probe.nd4j, "gc_share": probe.gc_share,
                          "explicit_gc_share": probe.explicit_gc_share, "time_split": probe.time_split,
                          "heap_max": probe.heap_max, "iterator": probe.iterator or None, "run_dir": probe.run_dir}})
    if features is None:
        from pyd4j.memory.machine import cpu_features  # noqa: PLC0415

        features = cpu_features()
    for key, (_, note) in (("prefetch_not_tried", prefetch_candidate(probe)), ("build_not_tried", _native_build(probe, features)),
                           ("mkl_not_tried", _mkl(probe))):
        if note:
            doc["probe"][key] = note
    if not probe.ok or not probe.iterations_per_s:
        return []
    cands = candidates(probe, env, n_cores, ram_bytes, features)
    if cluster is not None and any(c.replaces_memory_flags for c in cands):
        cands = [c for c in cands if not c.replaces_memory_flags]
        doc["probe"]["heap_not_tried"] = (
            f"GC took {probe.gc_share:.0%} of the executors' training time, but an executor's heap is "
            f"spark.executor.memory, which the workers must offer (else the application waits for resources): "
            f"size it with `pyd4j tune` (the memory tune), then tune the speed again")
    if (base_jvm or base_spark) and any(c.setting == "explicit_gc" for c in cands):
        cands = [c for c in cands if c.setting != "explicit_gc"]
        doc["probe"]["explicit_gc_not_tried"] = (
            f"collections the job asked for (System.gc()) took {probe.explicit_gc_share:.0%} of the training time, "
            f"but -XX:+DisableExplicitGC also turns off the collection JavaCPP asks for at maxphysicalbytes, which "
            f"holds the memory tune's limits (an array's memory is freed only once its Java object is collected): "
            f"remove the job's own System.gc() calls instead")
    return [c for c in cands if c.setting.split("=")[0] in only] if only is not None else cands
