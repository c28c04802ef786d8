"""What each benchmark measures and about how long it takes at its defaults on the project's 2-core
machine (from the wall time its results record where they do, else from its runs and settings), and
the results file it writes by default. `python -m benchmarks.harness` prints it, with the seconds the
last recorded run of that file took."""

from __future__ import annotations

import json
from typing import NamedTuple

from .record import RESULTS


class Benchmark(NamedTuple):
    measures: str
    takes: str
    results: str


CATALOG: dict[str, Benchmark] = {
    "agent_gpu": Benchmark("side-agent on a GPU: copy bandwidth, overlap, planned training under a budget", "10 min (GPU)", "agent_gpu.json"),
    "agent_overhead": Benchmark("profiling agent's slowdown of a DL4J job, paired runs with and without it", "10 min", "agent_overhead.json"),
    "backends": Benchmark("`pyd4j nd4j-build`: every nd4j-native build ranked, then measured again", "10 min", "backends.json"),
    "batchnorm_backlog": Benchmark("memory BatchNormalization leaves to the collector per iteration", "15 min", "batchnorm_backlog.json"),
    "buffer_pool": Benchmark("planned trainer's buffer pool on and off: peak memory and speed", "1 h", "buffer_pool.json"),
    "calibration": Benchmark("planner's cost model against published K40c img/s", "2 min", "calibration.json"),
    "cli_golden": Benchmark("estimate/flags/batch/plan JSON on the example networks against another commit (needs --base)", "10 min", "cli_golden.json"),
    "collector_choice": Benchmark("Serial against G1: resident memory and speed of fit()", "30 min", "collector_choice.json"),
    "cpu_profile": Benchmark("DL4J layers timed with ND4J: the planner's CPU device profile", "5 min", "cpu_profile.json"),
    "depth": Benchmark("SuperNeurons planner on the K40c profile: zoo peaks, budget sweep, deepest ResNet", "10 min", "depth.json"),
    "examples_flags": Benchmark("`pyd4j flags` on deeplearning4j-examples jobs in a cgroup (needs a checkout)", "30 min", "examples_flags.json"),
    "examples_speed": Benchmark("`pyd4j tune --speed` on deeplearning4j-examples jobs (needs a checkout)", "20 min", "examples_speed.json"),
    "explicit_gc_limits": Benchmark("memory limits with -XX:+DisableExplicitGC against without", "5 min", "explicit_gc_limits.json"),
    "flags_accuracy": Benchmark("generated JVM flags hold real training in their container; estimate error", "20 min", "flags_accuracy.json"),
    "inference_footprint": Benchmark("predicted against measured footprint of served models", "35 min", "inference_footprint.json"),
    "interop": Benchmark("numpy <-> INDArray: zero-copy, copies, the Py4J gateway's throughput", "5 min", "interop.json"),
    "jit_cap": Benchmark("JIT compiler memory of long jobs with and without C2's node limit", "1 h", "jit_cap.json"),
    "leak_corpus": Benchmark("diagnosis and tune verdicts on jobs with known endings", "15 min", "leak_corpus.json"),
    "live_heap": Benchmark("live heap the profiler reports against jcmd's class histogram", "5 min", "live_heap.json"),
    "lstm_steps": Benchmark("LSTM working memory glibc keeps, against the memory model", "30 min", "lstm_steps.json"),
    "malloc_env": Benchmark("one glibc malloc setting's effect on fit(): memory and speed", "20 min", "malloc_arenas.json"),
    "memory_model": Benchmark("`pyd4j estimate` against fit()'s measured peak, examples and zoo", "2 h", "memory_model.json"),
    "network_generator": Benchmark("1,000 generated DL4J networks: planned, or refused by name, and exact against fit()", "1 h", "network_generator.json"),
    "plan_speed": Benchmark("`pyd4j plan` end to end and every policy on 10,000+ layers", "5 min", "plan_speed.json"),
    "planned_training": Benchmark("planned training against fit(): peak, speed, largest batch in a cgroup", "2 h", "planned_training.json"),
    "prefetch": Benchmark("Python-fed training with async prefetch against an in-JVM iterator", "5 min", "prefetch.json"),
    "prefetch_depth": Benchmark("the prefetch depth tune --speed chooses against every other depth", "10 min", "prefetch_depth.json"),
    "reader_fuzz": Benchmark("every document reader on generated bad documents: uncaught errors", "25 min", "reader_fuzz.json"),
    "serve_fuzz": Benchmark("schemathesis against a running `pyd4j serve`: server errors", "2 min", "serve_fuzz.json"),
    "serve_slices": Benchmark("`serve --slice-rows auto`: workspace saved, speed kept", "20 min", "serve_slices.json"),
    "serving": Benchmark("several models under a memory budget: latency, evictions, soak", "45 min", "serving.json"),
    "sigterm": Benchmark("serve and tune stopped by SIGTERM: processes left behind", "5 min", "sigterm.json"),
    "sliced_exactness": Benchmark("sliced steps (two-pass batch norm, activations) against DL4J and float64 on zoo models", "40 min", "sliced_exactness.json"),
    "spark": Benchmark("per-executor flags on a loopback Spark cluster, negative control, tune", "30 min", "spark.json"),
    "spark_leak_verdicts": Benchmark("leak verdicts on Spark executors against what they kept", "15 min", "spark_leak_verdicts.json"),
    "speed_tuning": Benchmark("`pyd4j tune --speed` on jobs with one bad setting or none", "50 min", "speed_tuning.json"),
    "sweeps": Benchmark("planner policies, checkpointing, DTR and the MILP across budgets", "20 min", "sweeps.json"),
    "tiers": Benchmark("offload tiers (disk, pinned host): throughput and copy hidden behind compute", "3 min", "tiers.json"),
    "tuned_rerun": Benchmark("tuned flags hold jobs for 3x the iterations tune watched", "30 min", "tuned_rerun.json"),
    "windowed_tune": Benchmark("tunes ended at a measurement window against full-length tunes", "1 h", "windowed_tune.json"),
    "workspaces": Benchmark("workspace mode ENABLED against NONE on the digits examples", "5 min", "workspaces.json"),
    "zoo_coverage": Benchmark("planned training on every zoo model: accepted, exact, peak", "4 h", "zoo_coverage.json"),
    "zoo_speed": Benchmark("planned training against fit() on zoo models, interleaved in one JVM", "1 h", "zoo_speed.json"),
}


def last_seconds(results: str) -> float | None:
    """The wall time of the last measured run that wrote `results` (None: not recorded)."""
    try:
        run = json.loads((RESULTS / results).read_text()).get("run") or {}
    except (OSError, ValueError):
        return None
    return None if run.get("reconstructed") else run.get("seconds")


def listing() -> str:
    rows = [("benchmark", "measures", "takes (defaults)", "last run", "writes")]
    for name, b in CATALOG.items():
        s = last_seconds(b.results)
        rows.append((name, b.measures, "about " + b.takes, f"{s / 60:.0f} min" if s else "-", f"results/{b.results}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
