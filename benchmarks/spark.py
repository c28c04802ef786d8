"""Do pyd4j's Spark settings hold DL4J-on-Spark training, and how close is the executor model?

For each cluster shape: estimate the network at its batch per worker, generate the Spark settings
(pyd4j.memory.flags.spark_flags), start a loopback standalone cluster whose workers (nodes) are memory
cgroups of exactly the generated executor container (memory + memoryOverhead, plus the worker daemon's
own allowance), and train the example job (org.pyd4j.examples.spark.TrainOnSpark, synthetic data) with
pyd4j's agent on the driver and every executor. Per executor, from its own timeline:

  heap        predicted live heap (DL4J's and Spark's objects) vs measured: the largest heap left after a GC
  off-heap    predicted memory outside the heap (ND4J for every concurrent task + JVM and Spark native)
              vs measured: peak of (RSS - resident heap)                                     (goal +-20%)
  budget      generated container / measured need (peak RSS)                                  (goal <= 1.3)

Negative control: the first shape again with each worker's memory at half the generated executor
container and settings generated from half the executor estimate (the heap kept at Spark's minimum):
it must fail, and pyd4j must diagnose it as that executor's memory (kernel OOM kill in its worker's
cgroup, or a Java/JavaCPP OutOfMemoryError in its log).

Writes benchmarks/results/spark.json. Usage: python benchmarks/spark.py [--examples 2048]. Needs a writable
memory cgroup (root, or a delegated cgroup). The machine may be shared: times are not figures here.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pyd4j.memory.container import ContainerResult, diagnose  # noqa: E402
from pyd4j.memory.estimate import HEAP_GC_FACTOR, Estimate, estimate  # noqa: E402
from pyd4j.memory.flags import SparkFlags, SparkShape, spark_flags  # noqa: E402
from pyd4j.profile.timeline import Timeline  # noqa: E402
from pyd4j.spark.cluster import LocalCluster  # noqa: E402
from pyd4j.spark.job import run_example, with_agent  # noqa: E402

MiB = 1024**2
NETWORK = ROOT / "examples" / "networks" / "lenet.json"
# (name, workers, cores per worker = per executor, batch per worker)
SHAPES = [("2 executors x 1 core", 2, 1, 128), ("1 executor x 2 cores", 1, 2, 128)]


def predicted_live_heap(exec_est: Estimate) -> int:
    """The live heap the executor model implies: its heap terms less Spark's reserve, without the GC room."""
    return int(sum(t.bytes_at(exec_est.batch) for t in exec_est.terms
                   if t.region == "heap" and t.name != "spark_reserved_heap") / HEAP_GC_FACTOR)


def job_args(examples: int, batch: int, workers: int) -> list[str]:
    return ["--conf", str(NETWORK), "--data", f"synthetic:{examples}", "--features", "784", "--labels", "10",
            "--batch-per-worker", str(batch), "--averaging", "2", "--epochs", "1", "--workers", str(workers)]


def executor_diagnoses(cluster: LocalCluster, app_id: str | None, limit: int) -> list[dict]:
    """How each executor of the app ended, read as pyd4j reads any limited JVM (pyd4j.memory.container)."""
    kills = cluster.oom_kills()
    out = []
    for e in cluster.executor_exits():
        if app_id and e.app_id != app_id:
            continue
        result = ContainerResult(command=("executor", e.executor_id), limit_bytes=limit, cgroup_version=0,
                                 exit_code=e.exit_status, oom_kill_count=kills[e.worker] if e.killed else 0, failcnt=0,
                                 peak_bytes=None, seconds=0.0, stderr=e.stderr_tail(200_000))
        d = diagnose(result)
        kind = d.kind
        if e.state == "KILLED" and e.exit_status == 143:
            kind, memory = "ok", False  # ended by the application's end
        else:
            memory = d.memory_exhausted
        out.append({"worker": e.worker, "executor": e.executor_id, "state": e.state, "exit_status": e.exit_status,
                    "worker_oom_kills": kills[e.worker], "kind": kind, "memory_exhausted": memory,
                    "diagnosis": (f"executor {e.executor_id} on worker {e.worker}: {d.message}" if kind != "ok"
                                  else f"executor {e.executor_id} on worker {e.worker}: ended with the application")})
    return out


def run_shape(name: str, workers: int, cores: int, batch: int, examples: int, sf: SparkFlags, node_memory: int,
              conf_extra: dict | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="pyd4j-spark-bench-") as tmp:
        tmp = Path(tmp)
        with LocalCluster(workers=workers, cores=cores, memory=node_memory, directory=tmp / "cluster",
                          limit_memory=True) as cluster:
            conf = with_agent({**cluster.app_properties(), **sf.conf(), **(conf_extra or {})}, tmp / "timelines")
            result = run_example(conf, job_args(examples, batch, workers * cores), tmp / "app.properties",
                                 env=cluster.env(), timeout=1500)
            diagnoses = executor_diagnoses(cluster, result.app_id, cluster.worker_limit_bytes)
        timelines = {p.stem: Timeline.load(p) for p in sorted((tmp / "timelines").glob("*.jsonl"))}
    executors = []
    pred_heap = predicted_live_heap(sf.executor_estimate)
    pred_off = sf.executor_estimate.offheap_bytes + sf.executor_estimate.native_bytes
    for key, tl in timelines.items():
        if not key.startswith("executor-") or not tl.samples:
            continue
        outside = tl.series("rss") - tl.heap_resident()
        meas_off = int(np.nanmax(outside))
        meas_heap = tl.live_heap_peak()
        need = tl.peak("rss")
        executors.append({
            "executor": key.rsplit("-", 1)[-1], "samples": len(tl.samples), "iterations": tl.iterations(),
            "predicted_live_heap_bytes": pred_heap, "measured_live_heap_bytes": meas_heap,
            "heap_error": round(pred_heap / meas_heap - 1, 3) if meas_heap else None,
            "measured_peak_heap_used_bytes": tl.peak("heap_used"),
            "predicted_offheap_bytes": pred_off, "measured_offheap_bytes": meas_off,
            "offheap_error": round(pred_off / meas_off - 1, 3) if meas_off > 0 else None,
            "measured_nd4j_and_native_bytes": tl.peaks()["native"],
            "generated_container_bytes": sf.executor_container_bytes, "measured_need_bytes": need,
            "budget_ratio": round(sf.executor_container_bytes / need, 3) if need else None,
            "threads": tl.peak("threads"),
        })
    driver = timelines.get("driver")
    return {"shape": name, "workers": workers, "cores_per_executor": cores, "batch_per_worker": batch,
            "examples": examples, "ok": result.ok, "returncode": result.returncode, "seconds": result.seconds,
            "scores": result.scores(), "conf": sf.conf(), "worker_cgroup_bytes": node_memory,
            "executor_breakdown": sf.executor_estimate.breakdown(), "executors": executors, "exits": diagnoses,
            "driver": {"measured_live_heap_bytes": driver.live_heap_peak(), "measured_peak_rss_bytes": driver.peak("rss"),
                       "predicted_live_heap_bytes": predicted_live_heap(sf.driver_estimate),
                       "predicted_offheap_bytes": sf.driver_estimate.offheap_bytes + sf.driver_estimate.native_bytes,
                       "measured_offheap_bytes": int(np.nanmax(driver.series("rss") - driver.heap_resident())),
                       "generated_container_bytes": sf.driver.container_bytes} if driver and driver.samples else None,
            "stderr_tail": "" if result.ok else result.stderr[-3000:]}


def scaled(est: Estimate, factor: float) -> Estimate:
    terms = tuple(replace(t, fixed_bytes=int(t.fixed_bytes * factor), per_sample_bytes=int(t.per_sample_bytes * factor))
                  for t in est.terms)
    return replace(est, terms=terms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2048)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "spark.json"))
    args = parser.parse_args()
    runs = []
    for name, workers, cores, batch in SHAPES:
        est = estimate(NETWORK, batch)
        sf = spark_flags(est, SparkShape(executors=workers, executor_cores=cores, worker_memory=8 * 1024 * MiB))
        r = run_shape(name, workers, cores, batch, args.examples, sf, sf.executor_container_bytes)
        runs.append(r)
        for x in r["executors"]:
            print(f"{name}: executor {x['executor']} heap pred {x['predicted_live_heap_bytes'] / MiB:.0f} meas "
                  f"{(x['measured_live_heap_bytes'] or 0) / MiB:.0f} MiB ({x['heap_error']}); off-heap pred "
                  f"{x['predicted_offheap_bytes'] / MiB:.0f} meas {x['measured_offheap_bytes'] / MiB:.0f} MiB "
                  f"({x['offheap_error']}); budget {x['generated_container_bytes'] / MiB:.0f} need "
                  f"{x['measured_need_bytes'] / MiB:.0f} MiB ratio {x['budget_ratio']}", flush=True)
        print(f"{name}: ok={r['ok']} scores {r['scores']} exits {[e['kind'] for e in r['exits']]}", flush=True)

    # negative control: half the generated executor memory
    name, workers, cores, batch = SHAPES[0]
    est = estimate(NETWORK, batch)
    shape = SparkShape(executors=workers, executor_cores=cores, worker_memory=8 * 1024 * MiB)
    full = spark_flags(est, shape)
    half_est = scaled(est, 0.5)
    half = spark_flags(half_est, shape)
    control = run_shape(f"{name}, half memory", workers, cores, batch, args.examples, half,
                        full.executor_container_bytes // 2, conf_extra={"spark.task.maxFailures": "1"})
    failed = [e for e in control["exits"] if e["kind"] != "ok"]
    control.update(generated_container_bytes=full.executor_container_bytes,
                   failed_as_expected=not control["ok"],
                   diagnosed_as_executor_memory=bool(failed) and all(e["memory_exhausted"] for e in failed))
    print(f"negative control: ok={control['ok']}, {[e['diagnosis'][:160] for e in control['exits']]}", flush=True)

    execs = [x for r in runs if r["ok"] for x in r["executors"]]
    heap_err = [abs(x["heap_error"]) for x in execs if x["heap_error"] is not None]
    off_err = [abs(x["offheap_error"]) for x in execs if x["offheap_error"] is not None]
    ratios = [x["budget_ratio"] for x in execs if x["budget_ratio"]]
    summary = {
        "network": NETWORK.name, "runs": len(runs), "runs_ok": sum(r["ok"] for r in runs),
        "executors": len(execs),
        "executor_oom_or_kill": sum(1 for r in runs for e in r["exits"] if e["kind"] != "ok"),
        "heap_error_abs_max": max(heap_err, default=None), "heap_within_20pct": sum(e <= 0.2 for e in heap_err),
        "offheap_error_abs_max": max(off_err, default=None), "offheap_within_20pct": sum(e <= 0.2 for e in off_err),
        "budget_ratio_min": min(ratios, default=None), "budget_ratio_max": max(ratios, default=None),
        "negative_control_failed": control["failed_as_expected"],
        "negative_control_diagnosed_as_executor_memory": control["diagnosed_as_executor_memory"],
        "note": "measured on a 2-core machine shared with other work; times are not compared",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"summary": summary, "runs": runs, "negative_control": control}, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
