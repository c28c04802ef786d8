"""Do pyd4j's Spark settings hold DL4J-on-Spark training, and how close is the executor model?

For each cluster shape (--shapes picks some): estimate the network at its batch per worker, generate the
Spark settings (pyd4j.memory.flags.spark_flags), start a loopback standalone cluster whose workers (nodes)
are memory cgroups of exactly the generated executor container (memory + memoryOverhead, plus the worker
daemon's own allowance), and train the example job (org.pyd4j.examples.spark.TrainOnSpark, synthetic data)
with pyd4j's agent on the driver and every executor. Per executor, from its own timeline:

  heap        predicted live heap (DL4J's and Spark's objects) vs measured: the largest heap left after a GC
  off-heap    predicted memory outside the heap (ND4J for every concurrent task + JVM and Spark native)
              vs measured: peak of (RSS - resident heap)                                     (goal +-20%)
  budget      generated container / measured need (peak RSS)                                  (goal <= 1.3)

  sound need  the heap Spark makes the executor take (spark.executor.memory: the JVM may fill it before a
              full collection) + measured off-heap: the least a container can soundly hold; the generated
              container over it shows pyd4j's own headroom, apart from Spark's 480 MiB heap floor

Negative control: one shape again (--control; the first one run) with the executor's container at a
fraction of the generated one (0.5 first, then lower until it fails): each worker's cgroup is that
container (plus the worker daemon's allowance), JavaCPP's maxphysicalbytes is that container,
memoryOverhead is what is left of it over the heap (the heap stays at Spark's minimum, which the worker
must still offer). It must fail, and pyd4j must diagnose it as that executor's memory, both from the
workers' logs and executor stderr (pyd4j.memory.container) and from the driver's log alone, as `pyd4j
profile` does (pyd4j.profile.spark_executors).

Tune: `pyd4j tune -- spark-submit ...` on the 2-worker cluster, the job at Spark's default executor
settings (1 GiB heap, no JavaCPP limits), with --tune-examples (32768: a job of about a minute; tune cannot
verify one whose driver lives under about 30 s, too short for a leak verdict): the recommendation from the
worst executor, the re-run, and the per-executor before/after table (benchmarks/README.md).

Shapes: the small job (LeNet at batch 128 per worker: 2x1, 1x2), whose executor is mostly Spark's 480 MiB
heap floor and the JVM's own memory, and a large one (2x1-b2048: LeNet at batch 2048 per worker, 2
iterations per worker) whose ND4J memory outweighs that floor, as in jobs that train real networks.

Writes benchmarks/results/spark.json. Usage: python benchmarks/spark.py [--shapes 2x1,1x2] [--control 2x1]
[--fractions 0.5] [--no-tune] [--merge]; --merge keeps the file's results for what this run does not
repeat. Needs a writable memory cgroup (root, or a delegated cgroup). The machine may be shared: times are
not figures here.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from harness import RESULTS, ROOT, Recorder
from pyd4j.memory.container import ContainerResult, diagnose
from pyd4j.memory.estimate import HEAP_GC_FACTOR, Estimate, estimate
from pyd4j.memory.flags import SparkFlags, SparkShape, spark_flags
from pyd4j.profile.timeline import Timeline
from pyd4j.spark.cluster import LocalCluster
from pyd4j.profile.spark_executors import classify, driver_log_lines, exit_code  # noqa: E402
from pyd4j.spark.job import MAIN_CLASS, job_classpath_conf, run_example, with_agent  # noqa: E402

MiB = 1024**2
NETWORK = ROOT / "examples" / "networks" / "lenet.json"
DEFAULT_EXAMPLES = 2048
TUNE_EXAMPLES = 32768


class Shape(NamedTuple):
    key: str  # what --shapes and --control take
    name: str
    workers: int
    cores: int  # per worker = per executor
    batch: int  # per worker
    examples: int | None = None  # None: --examples


SHAPES = [
    Shape("2x1", "2 executors x 1 core", 2, 1, 128),
    Shape("1x2", "1 executor x 2 cores", 1, 2, 128),
    # ND4J memory (~2 GiB predicted) dominates the executor; 2 x workers x batch examples: with averaging every
    # 2 minibatches, one split in which every worker fits 2 minibatches, then one averaging
    Shape("2x1-b2048", "2 executors x 1 core, batch 2048", 2, 1, 2048, 2 * 2 * 2048),
]
SHAPE_KEYS = {s.key: s for s in SHAPES}
DEFAULT_SHAPES = ("2x1", "1x2")


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


def driver_diagnoses(driver_log: str) -> list[dict]:
    """How each lost executor ended, from the driver's log alone (what `pyd4j profile -- spark-submit` reads)."""
    out = []
    for eid, lines in driver_log_lines(driver_log).items():
        kind, memory, why = classify(lines, exit_code(lines))
        out.append({"executor": eid, "kind": kind, "memory_exhausted": memory, "diagnosis": f"executor {eid}: {why}",
                    "lines": lines[:3]})
    return out


def run_shape(name: str, workers: int, cores: int, batch: int, examples: int, sf: SparkFlags, node_memory: int,
              conf_extra: dict | None = None, offer: int | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="pyd4j-spark-bench-") as tmp:
        tmp = Path(tmp)
        with LocalCluster(workers=workers, cores=cores, memory=node_memory, directory=tmp / "cluster",
                          limit_memory=True, offer=offer) as cluster:
            conf = with_agent({**cluster.app_properties(), **sf.conf(), **(conf_extra or {})}, tmp / "timelines",
                              options=AGENT_OPTIONS)
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
            "sound_need_bytes": sf.executor_memory_bytes + meas_off,
            "budget_ratio_vs_sound_need": round(sf.executor_container_bytes / (sf.executor_memory_bytes + meas_off), 3),
            "threads": tl.peak("threads"),
        })
    driver = timelines.get("driver")
    return {"shape": name, "workers": workers, "cores_per_executor": cores, "batch_per_worker": batch,
            "examples": examples, "ok": result.ok, "returncode": result.returncode, "seconds": result.seconds,
            "scores": result.scores(), "conf": {**sf.conf(), **(conf_extra or {})}, "worker_cgroup_bytes": node_memory,
            "executor_breakdown": sf.executor_estimate.breakdown(), "executors": executors, "exits": diagnoses,
            "driver_log_diagnoses": driver_diagnoses(result.stderr),
            "driver": {"measured_live_heap_bytes": driver.live_heap_peak(), "measured_peak_rss_bytes": driver.peak("rss"),
                       "predicted_live_heap_bytes": predicted_live_heap(sf.driver_estimate),
                       "predicted_offheap_bytes": sf.driver_estimate.offheap_bytes + sf.driver_estimate.native_bytes,
                       "measured_offheap_bytes": int(np.nanmax(driver.series("rss") - driver.heap_resident())),
                       "generated_container_bytes": sf.driver.container_bytes} if driver and driver.samples else None,
            "stderr_tail": "" if result.ok else result.stderr[-3000:]}


CONTROL_FRACTIONS = (0.5, 0.4, 0.3, 0.2, 0.15)
# The agent measures the live heap after full collections; its own inspections are at most every 5 s and 0.5% of
# the run by default, too few in a one-minute job to catch the peak: here every second, up to 5% of the run.
AGENT_OPTIONS = "live=1,live_share=0.05"


def run_control(name: str, workers: int, cores: int, batch: int, examples: int, full: SparkFlags,
                fraction: float) -> dict:
    """The first shape with the executor container at `fraction` of the generated one."""
    budget = int(full.executor_container_bytes * fraction) // MiB * MiB
    heap = full.executor_memory_bytes
    conf = dict(full.conf())
    conf["spark.executor.memoryOverhead"] = f"{max(budget - heap, 0) // MiB}m"
    conf["spark.executor.extraJavaOptions"] = " ".join(
        f"-Dorg.bytedeco.javacpp.maxphysicalbytes={budget}" if w.startswith("-Dorg.bytedeco.javacpp.maxphysicalbytes=")
        else w for w in conf["spark.executor.extraJavaOptions"].split())
    control = run_shape(f"{name}, {fraction:g} of the generated container", workers, cores, batch, examples, full,
                        budget, conf_extra={**conf, "spark.task.maxFailures": "1"}, offer=max(budget, heap))
    failed = [e for e in control["exits"] if e["kind"] != "ok"]
    said = [d for d in control["driver_log_diagnoses"] if d["kind"] != "ok"]
    control.update(fraction=fraction, control_container_bytes=budget,
                   generated_container_bytes=full.executor_container_bytes, failed_as_expected=not control["ok"],
                   diagnosed_as_executor_memory=bool(failed) and all(e["memory_exhausted"] for e in failed),
                   driver_log_says_executor_memory=bool(said) and all(d["memory_exhausted"] for d in said))
    control["control_of"] = name
    return control


def control_of(control: dict) -> str:
    """The shape a control run repeats (results written before the field existed: from its name)."""
    return control.get("control_of") or control["shape"].rsplit(", ", 1)[0]


def shape_summary(runs: list[dict], controls: list[dict]) -> dict:
    """The goals over these runs' executors, and the negative control's outcome over these controls."""
    execs = [x for r in runs if r["ok"] for x in r["executors"]]
    heap_err = [abs(x["heap_error"]) for x in execs if x["heap_error"] is not None]
    off_err = [abs(x["offheap_error"]) for x in execs if x["offheap_error"] is not None]
    ratios = [x["budget_ratio"] for x in execs if x["budget_ratio"]]
    out = {
        "runs": len(runs), "runs_ok": sum(r["ok"] for r in runs), "executors": len(execs),
        "executor_oom_or_kill": sum(1 for r in runs for e in r["exits"] if e["kind"] != "ok"),
        "heap_error_abs_max": max(heap_err, default=None), "heap_within_20pct": sum(e <= 0.2 for e in heap_err),
        "offheap_error_abs_max": max(off_err, default=None), "offheap_within_20pct": sum(e <= 0.2 for e in off_err),
        "budget_ratio_min": min(ratios, default=None), "budget_ratio_max": max(ratios, default=None),
        "sound_need_ratio_min": min((x["budget_ratio_vs_sound_need"] for x in execs), default=None),
        "sound_need_ratio_max": max((x["budget_ratio_vs_sound_need"] for x in execs), default=None),
    }
    if controls:
        control = controls[-1]
        out.update({
            "negative_control_fractions_tried": [c["fraction"] for c in controls],
            "negative_control_fraction": control["fraction"],
            "negative_control_failed": control["failed_as_expected"],
            "negative_control_diagnosed_as_executor_memory": control["diagnosed_as_executor_memory"],
            "negative_control_driver_log_says_executor_memory": control["driver_log_says_executor_memory"],
            "negative_control_half_failed": controls[0]["failed_as_expected"] if controls[0]["fraction"] == 0.5
            else None,
        })
    return out


def run_tune(examples: int, full: SparkFlags) -> dict:
    """`pyd4j tune -- spark-submit ...` on the 2-worker cluster, from Spark's default executor settings."""
    from pyd4j.profile.tune import tune_job  # noqa: PLC0415
    from pyd4j.spark.install import spark_script, write_properties  # noqa: PLC0415
    from pyd4j.profile.spark_tuning import before_after_rows  # noqa: PLC0415

    _, name, workers, cores, batch, _ = SHAPES[0]
    with tempfile.TemporaryDirectory(prefix="pyd4j-spark-tune-") as tmp:
        tmp = Path(tmp)
        with LocalCluster(workers=workers, cores=cores, memory=full.executor_container_bytes, directory=tmp / "cluster",
                          limit_memory=True) as cluster:
            saved = {k: os.environ.get(k) for k in cluster.env() if k.startswith("SPARK")}
            os.environ.update({k: v for k, v in cluster.env().items() if k.startswith("SPARK")})
            try:
                props = write_properties(tmp / "app.properties", {
                    **cluster.app_properties(), **job_classpath_conf(), "spark.ui.enabled": "false",
                    "spark.cores.max": str(workers * cores), "spark.executor.cores": str(cores),
                    # Spark's defaults otherwise; this one is needed with any MaxDirectMemorySize under 200 MiB
                    "spark.network.maxRemoteBlockSizeFetchToMem": "32m"})
                jar = job_classpath_conf()["spark.driver.extraClassPath"].split(os.pathsep)[0]
                argv = [spark_script("spark-submit"), "--properties-file", str(props), "--class", MAIN_CLASS, jar,
                        *job_args(examples, batch, workers * cores)]
                doc = tune_job(argv, tmp / "tune", timeout_s=1500)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            doc["worker_oom_kills"] = cluster.oom_kills()
        doc = without_local_paths(doc, {str(tmp): "<tmp>"})
    headers, rows = before_after_rows(doc)
    doc["table"] = {"headers": headers, "rows": rows}
    print(f"tune: {doc['outcome']}; recommended {doc.get('spark_conf')}", flush=True)
    for row in rows:
        print("  " + " | ".join(row), flush=True)
    return doc


def without_local_paths(doc: dict, extra: dict[str, str]) -> dict:
    """The document with this checkout's and the run's temporary paths written relative to the
    repository (results are committed; paths of one machine say nothing elsewhere)."""
    text = json.dumps(doc, default=str)
    for path, name in {**extra, str(ROOT) + os.sep: ""}.items():
        text = text.replace(path, name)
    return json.loads(text)


def shape_flags(shape: Shape) -> SparkFlags:
    return spark_flags(estimate(NETWORK, shape.batch), SparkShape(executors=shape.workers, executor_cores=shape.cores,
                                                                  worker_memory=8 * 1024 * MiB))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=DEFAULT_EXAMPLES,
                    help="training examples, for the shapes that do not set their own")
    ap.add_argument("--shapes", default=",".join(DEFAULT_SHAPES),
                    help=f"shapes to run, comma-separated, of: {', '.join(SHAPE_KEYS)}")
    ap.add_argument("--control", default=None,
                    help="the shape the negative control repeats (default: the first of --shapes; 'none': none)")
    ap.add_argument("--out", default=str(RESULTS / "spark.json"))
    ap.add_argument("--fractions", default=",".join(map(str, CONTROL_FRACTIONS)),
                    help="negative control: fractions of the generated container to try, until one fails")
    ap.add_argument("--no-tune", action="store_true", help="skip `pyd4j tune -- spark-submit` (small job, 2x1)")
    ap.add_argument("--tune-examples", type=int, default=TUNE_EXAMPLES,
                    help="training examples of the tuned job (long enough for tune's leak verdicts)")
    ap.add_argument("--merge", action="store_true",
                    help="keep --out's runs, controls and tune for the shapes (and tune) this run does not repeat")
    return ap


def shape_runs(shapes: list[Shape], examples: int) -> list[dict]:
    runs = []
    for shape in shapes:
        sf = shape_flags(shape)
        r = run_shape(shape.name, shape.workers, shape.cores, shape.batch, shape.examples or examples, sf,
                      sf.executor_container_bytes)
        runs.append(r)
        for x in r["executors"]:
            print(f"{shape.name}: executor {x['executor']} heap pred {x['predicted_live_heap_bytes'] / MiB:.0f} meas "
                  f"{(x['measured_live_heap_bytes'] or 0) / MiB:.0f} MiB ({x['heap_error']}); off-heap pred "
                  f"{x['predicted_offheap_bytes'] / MiB:.0f} meas {x['measured_offheap_bytes'] / MiB:.0f} MiB "
                  f"({x['offheap_error']}); budget {x['generated_container_bytes'] / MiB:.0f} need "
                  f"{x['measured_need_bytes'] / MiB:.0f} MiB ratio {x['budget_ratio']}", flush=True)
        print(f"{shape.name}: ok={r['ok']} in {r['seconds']} s, scores {r['scores']} exits "
              f"{[e['kind'] for e in r['exits']]}", flush=True)
    return runs


def negative_controls(shape: Shape, examples: int, fractions: list[float]) -> list[dict]:
    """The executor's container at a fraction of the generated one, until it fails."""
    controls = []
    full = shape_flags(shape)
    for fraction in fractions:
        control = run_control(shape.name, shape.workers, shape.cores, shape.batch, shape.examples or examples,
                              full, fraction)
        controls.append(control)
        print(f"negative control ({shape.name}) at {fraction:g}: ok={control['ok']} in "
              f"{control['seconds']} s, exits {[e['diagnosis'][:160] for e in control['exits']]}; driver log "
              f"{[d['diagnosis'][:160] for d in control['driver_log_diagnoses']]}", flush=True)
        for x in control["executors"]:
            print(f"  executor {x['executor']}: peak RSS {x['measured_need_bytes'] / MiB:.0f} MiB, off-heap "
                  f"{x['measured_offheap_bytes'] / MiB:.0f} MiB (container "
                  f"{control['control_container_bytes'] / MiB:.0f} MiB)", flush=True)
        if not control["ok"]:
            break
    return controls


def summarise(runs: list[dict], controls: list[dict], tune: dict | None) -> dict:
    order = {s.name: i for i, s in enumerate(SHAPES)}
    runs.sort(key=lambda r: order.get(r["shape"], len(order)))
    by_shape = {}
    for name in sorted({r["shape"] for r in runs} | {control_of(c) for c in controls},
                       key=lambda n: order.get(n, len(order))):
        by_shape[name] = shape_summary([r for r in runs if r["shape"] == name],
                                       [c for c in controls if control_of(c) == name])
    return {
        "network": NETWORK.name,
        **shape_summary(runs, []),
        "shapes": by_shape,
        "tune_outcome": tune["outcome"] if tune else None,
        "tune_worst_executor": tune.get("spark", {}).get("worst_executor") if tune else None,
        "tune_container_bytes": tune.get("container_bytes") if tune else None,
        "tune_after_executor_peak_rss": [r.get("peak_rss") for r in tune["after"]["spark"]["executors"]]
        if tune and tune.get("after") else None,
        "note": "measured on a 2-core machine shared with other work; times are not compared",
    }


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    try:
        shapes = [SHAPE_KEYS[k.strip()] for k in args.shapes.split(",") if k.strip()]
        control_shape = None if args.control == "none" else SHAPE_KEYS[args.control] if args.control else shapes[0]
    except (KeyError, IndexError) as e:
        ap.error(f"unknown or no shape {e}; known: {', '.join(SHAPE_KEYS)}")
    print(f"shapes: {[s.name for s in shapes]}; negative control on: {control_shape.name if control_shape else None}",
          flush=True)
    rec = Recorder("spark")
    runs = shape_runs(shapes, args.examples)
    controls = negative_controls(control_shape, args.examples, [float(f) for f in args.fractions.split(",")]) \
        if control_shape else []
    tune = None if args.no_tune else run_tune(args.tune_examples, shape_flags(SHAPES[0]))

    old = json.loads(Path(args.out).read_text()) if args.merge and Path(args.out).exists() else {}
    ran = {r["shape"] for r in runs}
    runs = [r for r in old.get("runs", []) if r["shape"] not in ran] + runs
    if controls:
        old_controls = [c for c in old.get("negative_controls", []) if control_of(c) != control_shape.name]
    else:
        old_controls = old.get("negative_controls", [])
    controls = old_controls + controls
    tune = tune if tune is not None else old.get("tune")
    summary = summarise(runs, controls, tune)
    # the first shape's control, as before shapes were selectable
    first = [c for c in controls if control_of(c) == SHAPES[0].name] or controls
    rec.doc.update({"summary": summary, "runs": runs, "negative_control": first[-1] if first else None,
                    "negative_controls": controls, "tune": tune})
    rec.write(args.out)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
