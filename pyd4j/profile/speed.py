"""`pyd4j tune --speed`: find the settings that slow a DL4J job, try each as a change its code
does not see, keep only what a noise-aware A/B (pyd4j.profile.ab) proves faster.

One run of the job as it is (the probe) says what to try, cheapest and most often wrong first:
OpenMP/BLAS threads against the cores (ND4J's own count, reported by the agent), ND4J's periodic
GC (the agent reports the job's setting at its first fit() and can turn it off at every fit()),
the heap where GC time shows, DL4J's workspaces where the network turns them off, an async prefetcher around the
iterator fit() receives where the time split shows the training thread waiting for data, the
nd4j-native build for this CPU (avx2, avx512) where the job runs the generic one and the build's jar
is at hand, MKL for ND4J's BLAS calls where the job runs OpenBLAS and MKL's jar is at hand. Each candidate is compared with the job as it is; the ones proved
faster are combined greedily, best first, each verified again on top of those already kept, and
the final combination is compared with the job as it is once more when it holds more than one
change. A change that breaks the job is reported and dropped. Nothing is kept on a guess: no
verified change is the answer (exit 3) when none is proved.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from pyd4j.profile import ab, fatal_error, spark_speed
from pyd4j.profile.command import JobCommand, JobCommandError
from pyd4j.profile.diagnose import stderr_tail
from pyd4j.profile.launch import default_run_dir, profile_job
from pyd4j.profile.signals import Stopped, stopped_as_asked
from pyd4j.profile.speed_report import print_speed, speed_doc as _speed_doc  # noqa: F401 (print_speed: the CLI's)
from pyd4j.profile.speed_search import Budget, by_expected_gain, change_of, greedy, search  # noqa: F401
from pyd4j.profile.speed_setup import QUIET_AGENT, Change, Probe, Setup  # noqa: F401 (the tune's changes, named here)
from pyd4j.profile.timeline import Timeline
from pyd4j.profile.timesplit import time_split
from pyd4j.profile.window import SpeedWindows, WindowSpec

EXIT_VERIFIED = 0
EXIT_NOTHING = 1        # the probe run trained nothing: nothing to measure
EXIT_NO_CHANGE = 3      # no verified change
GC_SHARE = 0.05         # GC time over this share of the training time makes the heap a candidate
DATA_SHARE = 0.10      # data wait over this share of the training thread's time makes prefetch a candidate
MAX_PREFETCH = 8        # batches held by the prefetch queue at most
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
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
               window: WindowSpec | None = None) -> Runner:
    """Runs the job once per call under the agent with a setup, each run in its own directory.
    `base_jvm`: memory flags (the memory tune's) that replace the job's own on every run, both sides
    of every A/B; a setup's own -Xmx follows them and so wins. `base_spark`: the same for a spark-submit
    job, Spark settings (the memory tune's), the job's own memory flags dropped. A spark-submit job on a cluster gets
    the setup as executor settings and is measured on its executors (pyd4j.profile.spark_speed).
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
                                 drop_memory_flags=drop or bool(base_spark), timeout_s=limit[0], env_changes=setup.env(),
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
            tail = [fatal[0].summary()] if fatal else stderr_tail(result.timeline if cluster is not None else t)
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


# -- what to try ----------------------------------------------------------------------------------

def prefetch_depth(data_ms: float, compute_ms: float, slowest_ms: float | None = None) -> int:
    """Batches for the prefetch queue, from the loader's time per batch (mean, and its slow batches:
    the p90 of the data wait, so that slow batches count when they are a pattern, one in ten or more,
    not a one-off such as a collection or the JIT) and the compute time per iteration.

    One loader thread fills the queue. When it is slower than the training step on average
    (data >= compute), the queue is empty all the time: two batches (one being trained, one being made,
    DL4J's own depth) give all the overlap there is, and a deeper queue only holds memory. When it keeps
    up on average but some batches take longer (a file boundary, a large image), the queue must hold
    enough batches to train through the slowest: 1 + ceil(slowest / compute), at most MAX_PREFETCH
    batches, memory the queue holds. `benchmarks/prefetch_depth.py` compares the depth with others."""
    if compute_ms <= 0:
        return MAX_PREFETCH
    if data_ms >= compute_ms:
        return 2
    slowest = max(data_ms, slowest_ms or 0.0)
    return max(2, min(MAX_PREFETCH, 1 + math.ceil(slowest / compute_ms)))


def prefetch_candidate(probe: Probe) -> tuple[Change | None, str | None]:
    """The prefetch candidate where the training thread waits for data; else None and why not
    (None, None when the data wait is not a real share)."""
    split = probe.time_split or {}
    share = (split.get("share") or {}).get("data", 0.0)
    per = split.get("ms_per_iteration") or {}
    if share < DATA_SHARE or not probe.iterator:
        return None, None
    data = per.get("data", 0.0)
    quantiles = split.get("data_ms_quantiles") or {}
    compute = sum(per.get(k, 0.0) for k in ("forward", "backward", "updater", "outside"))
    it = probe.iterator
    if it.get("prefetch", -1) > 0 or str(it.get("action", "")).startswith("already"):
        return None, (f"the data wait is {share:.0%} of the training thread's time although {it.get('class')} is "
                      f"already prefetched ({it.get('action')}): its loader is slower per batch than the "
                      f"training step; a queue does not make one loader thread faster")
    bound = (data + compute) / max(data, compute) if max(data, compute) > 0 else 1.0
    if it.get("async_supported"):
        # behind fit()'s queue of 2 the wait is the stall, not the loader's time: a stall in most
        # iterations is a loader slower than the step; stalls in a few are slow batches a deeper
        # queue trains through (fit()'s 2 batches, and one more for every compute time the p90 stall lasts)
        typical, slowest = quantiles.get("p50", data), quantiles.get("p90", data)
        depth = 2 if typical > 0.1 * compute or compute <= 0 else min(MAX_PREFETCH, 2 + math.ceil(slowest / compute))
        if depth <= 2:
            return None, (f"the data wait is {share:.0%} of the training thread's time, but fit() already prefetches "
                          f"{it.get('class')} (asyncSupported() true) with a queue of 2, and training waits in most "
                          f"iterations ({typical:.1f} ms typical vs {compute:.1f} ms of compute): its next() is slower "
                          f"than the training step, and a deeper queue does not make one loader thread faster")
        before = "fit()'s own prefetch, queue of 2 (asyncSupported() true)"
        why = (f"the training thread waits for data {share:.0%} of its time although fit() prefetches 2 batches, in a "
               f"few iterations (one in ten {slowest:.1f} ms or more, typically {typical:.1f} ms, vs {compute:.1f} ms of compute): "
               f"a queue of {depth} trains through the slow batches")
    else:
        depth = prefetch_depth(data, compute, quantiles.get("p90"))
        slow = (f"; one batch in ten takes {quantiles['p90']:.1f} ms or more (p90), so the queue holds {depth}"
                if depth > 2 and "p90" in quantiles else "")
        before = "none: asyncSupported() false, fit() calls next() on the training thread"
        why = (f"the training thread waits for data {share:.0%} of its time ({data:.1f} ms a batch vs {compute:.1f} ms "
               f"of compute) and fit() does not prefetch {it.get('class')} (asyncSupported() false); "
               f"overlapping them can be up to {bound:.2f}x faster{slow}")
    return Change("prefetch", before, f"async prefetch, queue of {depth}", why, agent=(f"prefetch={depth}",),
                  paste=f"net.fit(new AsyncDataSetIterator(iterator, {depth}, true));  // or the agent option "
                        f"prefetch={depth}; AsyncMultiDataSetIterator for a MultiDataSetIterator"), None


def _native_build(probe: Probe, features: tuple[str, ...]) -> tuple[Change | None, str | None]:
    """The most specific nd4j-native build this CPU runs, where the job loaded a less specific one and
    that build's jar (of the job's ND4J version) is at hand; else None and why not (None, None when
    the job already runs the best build or its backend is not ND4J's CPU one)."""
    from pyd4j.profile import backend  # noqa: PLC0415

    library = probe.nd4j.get("native_library")
    if not library:
        return None, None
    build = backend.build_of(library)
    if build is None:
        return None, f"ND4J loaded {library}, not a build pyd4j can tell: the nd4j-native build was not tried"
    version, current = build
    better = [c for c in backend.CLASSIFIERS[backend.CLASSIFIERS.index(current) + 1:] if not backend.needs(c) - set(features)]
    if not better:
        return None, None
    target = better[-1]
    if version is None:
        return None, (f"this CPU runs the {target} build, but the ND4J version of {library} is unknown: "
                      f"the nd4j-native build was not tried")
    jar = backend.find_jar(target, version, [])
    if jar is None:
        return None, (f"this CPU runs the {target} build, but {backend.ARTIFACT}-{version}-{target}.jar is not in the "
                      f"local Maven repository: fetch it with `mvn dependency:get -Dartifact={backend.GROUP}:"
                      f"{backend.ARTIFACT}:{version}:jar:{target}` and tune again")
    flags = ", ".join(sorted(backend.needs(target)))
    return Change("nd4j_build", current, target,
                  f"the job loads the {current} build of nd4j-native {version} on a CPU with {flags}",
                  agent=(f"native_jar={jar}",), build=target, maven=backend.maven_snippet(target, version),
                  paste=f"the {target} classifier of {backend.ARTIFACT} beside the job's own (JavaCPP loads the most "
                        f"specific build it finds); or the agent option native_jar={jar}"), None


def _mkl(probe: Probe) -> tuple[Change | None, str | None]:
    """MKL for ND4J's BLAS calls where the job runs OpenBLAS and MKL's jar for its JavaCPP version is at
    hand (JavaCPP's loading property org.bytedeco.openblas.load=mkl_rt links MKL in OpenBLAS's place);
    else None and why not (None, None where the job runs no OpenBLAS)."""
    from pyd4j.profile import backend  # noqa: PLC0415

    if probe.nd4j.get("blas") != "openblas":
        return None, None
    library = str(probe.nd4j.get("blas_library", ""))
    javacpp = backend.javacpp_version(library)
    if javacpp is None:
        return None, f"ND4J calls OpenBLAS from {library}, of a JavaCPP version pyd4j cannot tell: MKL was not tried"
    jar = backend.find_mkl(javacpp)
    if jar is None:
        return None, (f"MKL for JavaCPP {javacpp} is not in the local Maven repository: fetch it with "
                      f"`mvn dependency:get -Dartifact={backend.mkl_artifact(javacpp)}` and tune again")
    return Change("blas", "OpenBLAS", f"MKL {jar.parent.name.rsplit('-', 1)[0]}",
                  f"ND4J's matrix products (dense layers, convolutions as im2col) go to OpenBLAS "
                  f"(JavaCPP {javacpp}); MKL is the other BLAS JavaCPP can load in its place",
                  jvm=(backend.MKL_OPTION,), agent=(f"native_jar={jar}",), blas="mkl", maven=backend.mkl_snippet(jar),
                  paste=f"{backend.MKL_OPTION} with MKL's redist jar on the class path; or the agent option "
                        f"native_jar={jar}"), None


def cores() -> int:
    """CPUs this process may run on (affinity and cgroup cpusets included)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def candidates(probe: Probe, env: dict[str, str], n_cores: int, ram_bytes: int | None = None,
               features: tuple[str, ...] = ()) -> list[Change]:
    """The changes worth a run, cheapest and most often wrong first, each with the evidence.
    `features`: the CPU's flags (pyd4j.memory.machine.cpu_features), for the nd4j-native build."""
    out: list[Change] = []
    threads = probe.nd4j.get("max_threads")
    set_vars = {v: env[v] for v in THREAD_VARIABLES if v in env}
    current = threads if isinstance(threads, int) and threads > 0 else None
    if current is None and "OMP_NUM_THREADS" in set_vars and set_vars["OMP_NUM_THREADS"].strip().isdigit():
        current = int(set_vars["OMP_NUM_THREADS"])
    before = ", ".join(f"{v}={x}" for v, x in set_vars.items()) or "unset"
    # all cores, and half of them (one per physical core where each has two hardware threads; on a
    # busy machine fewer threads than cores often wins, OpenMP threads spin while they wait)
    for n in sorted({n_cores, max(1, n_cores // 2)}, reverse=True):
        # unset is a setting of its own: OpenBLAS and ND4J then each pick their count
        if n == current and "OMP_NUM_THREADS" in set_vars and all(x.strip() == str(n) for x in set_vars.values()):
            continue
        env_change = tuple((v, str(n)) for v in ("OMP_NUM_THREADS", *[v for v in set_vars if v != "OMP_NUM_THREADS"]))
        why = (f"ND4J ran {current} threads on {n_cores} cores" if current else f"{before} on {n_cores} cores")
        out.append(Change(f"threads={n}", before, ", ".join(f"{v}={x}" for v, x in env_change), why, env=env_change,
                          paste=" ".join(f"export {v}={x}" for v, x in env_change)))
    # OpenMP threads that wait spin on their core; on a machine busy with other work (or with more
    # threads than cores) that spinning takes the time the job needs. PASSIVE makes them sleep.
    if (current or n_cores) > 1 and env.get("OMP_WAIT_POLICY", "").strip().upper() != "PASSIVE":
        out.append(Change("omp_wait_policy", env.get("OMP_WAIT_POLICY", "unset (OpenMP threads spin while they wait)"),
                          "OMP_WAIT_POLICY=PASSIVE", f"{current or 'several'} OpenMP threads on {n_cores} cores",
                          env=(("OMP_WAIT_POLICY", "PASSIVE"),), paste="export OMP_WAIT_POLICY=PASSIVE"))
    if probe.nd4j.get("periodic_gc") is True:
        window = probe.nd4j.get("gc_window_ms")
        out.append(Change("nd4j.periodic_gc", f"on, window {window} ms", "off",
                          f"the job turned ND4J's periodic GC on: a System.gc() every {window} ms",
                          agent=("nd4j_periodic_gc=false",),
                          paste="Nd4j.getMemoryManager().togglePeriodicGc(false);  // or the agent option nd4j_periodic_gc=false"))
    if probe.nd4j.get("training_workspace_mode") == "NONE":
        out.append(Change("workspace_mode", "NONE", "ENABLED",
                          "the network's configuration turns DL4J's training workspaces off (each iteration allocates anew)",
                          agent=("workspace_mode=ENABLED",),
                          paste=".trainingWorkspaceMode(WorkspaceMode.ENABLED)  // on the NeuralNetConfiguration.Builder; "
                                "or the agent option workspace_mode=ENABLED"))
    prefetch, _ = prefetch_candidate(probe)
    if prefetch is not None:
        out.append(prefetch)
    if probe.explicit_gc_share is not None and probe.explicit_gc_share > GC_SHARE:
        # The job's System.gc() calls become no-ops; ND4J's CPU arrays are still freed after the
        # ordinary collections (its deallocators follow reference queues, not System.gc()). So does
        # JavaCPP's at maxphysicalbytes: under memory limits (tune --speed --memory) it is not tried.
        out.append(Change("explicit_gc", "System.gc() honoured", "-XX:+DisableExplicitGC",
                          f"collections the job asked for (System.gc()) took {probe.explicit_gc_share:.0%} of the training "
                          f"time (JavaCPP's collection at maxphysicalbytes is turned off too: under memory limits, remove "
                          f"the job's System.gc() calls instead)",
                          jvm=("-XX:+DisableExplicitGC",), paste="-XX:+DisableExplicitGC"))
    if probe.gc_share is not None and probe.gc_share - (probe.explicit_gc_share or 0) > GC_SHARE and probe.heap_max:
        bigger = probe.heap_max * 4
        if ram_bytes:
            bigger = min(bigger, ram_bytes // 2)
        if bigger > probe.heap_max * 1.2:
            mib = bigger // (1 << 20)
            out.append(Change("heap", f"max heap {probe.heap_max // (1 << 20)} MiB", f"-Xmx{mib}m",
                              f"garbage collection took {probe.gc_share:.0%} of the training time",
                              jvm=(f"-Xmx{mib}m",), replaces_memory_flags=True, paste=f"-Xmx{mib}m"))
    for change, _ in (_native_build(probe, features), _mkl(probe)):
        if change is not None:
            out.append(change)
    return out


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
               window: WindowSpec | None = None, budget: Budget | None = None, futility: bool = True) -> dict:
    """Probe the job, try the candidates (largest expected gain first), combine what is proved; the
    `speed` document. `base_jvm`: memory flags every run gets (`pyd4j tune --speed --memory`: the memory
    tune's); `base_spark`: its Spark settings, for a spark-submit job. `only`: try only these kinds of
    setting (threads, omp_wait_policy, nd4j.periodic_gc, workspace_mode, prefetch, explicit_gc, heap,
    nd4j_build, blas). `features`: the CPU's flags (default: this machine's). `window`: each run's
    measurement window (None: the whole job); `budget`: the runs or minutes the whole tune may spend;
    `futility`: an A/B also stops once more runs cannot make its change worth keeping. On Ctrl-C or
    SIGTERM, Stopped carries the partial document (`partial`: true) in `.doc`."""
    started = time.monotonic()
    command = JobCommand.parse(job)
    cluster = spark_speed.cluster_submit(job)
    out = Path(out_dir) if out_dir else default_run_dir(command.title + "-speed")
    out.mkdir(parents=True, exist_ok=True)
    runner = runner or job_runner(job, out, interval_ms, timeout_s, base_jvm, base_spark, window)
    budget = budget or Budget()
    runs: list[dict] = []
    trials: list[dict] = []
    doc: dict = {"command": list(job), "out": str(out), "partial": False, "base_jvm_options": list(base_jvm),
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
