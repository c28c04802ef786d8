"""What `pyd4j tune --speed` tries, from the probe's evidence: each candidate a change the job's code does
not see (pyd4j.profile.speed_setup.Change), with why, and why a setting was not tried.

OpenMP/BLAS threads against the cores, OMP_WAIT_POLICY, ND4J's periodic GC, DL4J's workspaces, an async
prefetcher where the training thread waits for data (its depth from the loader's slow batches), the job's
own System.gc() calls, the heap where GC time shows, the nd4j-native build for this CPU and MKL.
"""

from __future__ import annotations

import math
import os

from pyd4j.profile.speed_setup import Change, Probe

GC_SHARE = 0.05         # GC time over this share of the training time makes the heap a candidate
DATA_SHARE = 0.10      # data wait over this share of the training thread's time makes prefetch a candidate
MAX_PREFETCH = 8        # batches held by the prefetch queue at most
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


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
    from pyd4j.profile import nd4j_build  # noqa: PLC0415

    library = probe.nd4j.get("native_library")
    if not library:
        return None, None
    build = nd4j_build.build_of(library)
    if build is None:
        return None, f"ND4J loaded {library}, not a build pyd4j can tell: the nd4j-native build was not tried"
    version, current = build
    better = [c for c in nd4j_build.CLASSIFIERS[nd4j_build.CLASSIFIERS.index(current) + 1:] if not nd4j_build.needs(c) - set(features)]
    if not better:
        return None, None
    target = better[-1]
    if version is None:
        return None, (f"this CPU runs the {target} build, but the ND4J version of {library} is unknown: "
                      f"the nd4j-native build was not tried")
    jar = nd4j_build.find_jar(target, version, [])
    if jar is None:
        return None, (f"this CPU runs the {target} build, but {nd4j_build.ARTIFACT}-{version}-{target}.jar is not in the "
                      f"local Maven repository: fetch it with `mvn dependency:get -Dartifact={nd4j_build.GROUP}:"
                      f"{nd4j_build.ARTIFACT}:{version}:jar:{target}` and tune again")
    flags = ", ".join(sorted(nd4j_build.needs(target)))
    return Change("nd4j_build", current, target,
                  f"the job loads the {current} build of nd4j-native {version} on a CPU with {flags}",
                  agent=(f"native_jar={jar}",), build=target, maven=nd4j_build.maven_snippet(target, version),
                  paste=f"the {target} classifier of {nd4j_build.ARTIFACT} beside the job's own (JavaCPP loads the most "
                        f"specific build it finds); or the agent option native_jar={jar}"), None


def _mkl(probe: Probe) -> tuple[Change | None, str | None]:
    """MKL for ND4J's BLAS calls where the job runs OpenBLAS and MKL's jar for its JavaCPP version is at
    hand (JavaCPP's loading property org.bytedeco.openblas.load=mkl_rt links MKL in OpenBLAS's place);
    else None and why not (None, None where the job runs no OpenBLAS)."""
    from pyd4j.profile import nd4j_build  # noqa: PLC0415

    if probe.nd4j.get("blas") != "openblas":
        return None, None
    library = str(probe.nd4j.get("blas_library", ""))
    javacpp = nd4j_build.javacpp_version(library)
    if javacpp is None:
        return None, f"ND4J calls OpenBLAS from {library}, of a JavaCPP version pyd4j cannot tell: MKL was not tried"
    jar = nd4j_build.find_mkl(javacpp)
    if jar is None:
        return None, (f"MKL for JavaCPP {javacpp} is not in the local Maven repository: fetch it with "
                      f"`mvn dependency:get -Dartifact={nd4j_build.mkl_artifact(javacpp)}` and tune again")
    return Change("blas", "OpenBLAS", f"MKL {jar.parent.name.rsplit('-', 1)[0]}",
                  f"ND4J's matrix products (dense layers, convolutions as im2col) go to OpenBLAS "
                  f"(JavaCPP {javacpp}); MKL is the other BLAS JavaCPP can load in its place",
                  jvm=(nd4j_build.MKL_OPTION,), agent=(f"native_jar={jar}",), blas="mkl", maven=nd4j_build.mkl_snippet(jar),
                  paste=f"{nd4j_build.MKL_OPTION} with MKL's redist jar on the class path; or the agent option "
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
