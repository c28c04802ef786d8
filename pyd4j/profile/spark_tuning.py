"""pyd4j tune for spark-submit jobs: Spark settings from the measured peaks of the worst executor.

Every executor of the profiled run has its own lane; each one's need is read the way pyd4j tune reads
any JVM (pyd4j.profile.need.measured_need). The worst executor (largest container need) sizes them all,
since Spark gives every executor the same settings. Its ND4J memory (JavaCPP's bytes and libnd4j's
buffers) was used by the tasks it ran at once, each training its own copy of the network, so it is
split per task and multiplied back by the concurrent tasks of the shape; the rest (Spark's and the
JVM's own) is per executor. In `local[N]` the driver is the executor and runs N tasks: its settings
go to spark.driver.*.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from pyd4j.memory.flags import DEFAULT_HEADROOM, SparkFlags, SparkShape, spark_measured_estimate, spark_measured_flags
from pyd4j.profile.spark_executors import driver_lane, executor_lanes, outcomes
from pyd4j.profile.spark_submit import SparkSubmit

if TYPE_CHECKING:
    from pyd4j.profile.launch import JobRun
    from pyd4j.profile.timeline import Timeline


def _total(need) -> int:
    return need.javacpp + need.offheap + need.heap + need.native


def _split(t: "Timeline", tasks: int, role: str):
    """(per-task estimate parts, need) of one lane: ND4J memory per task, the rest once."""
    from pyd4j.profile.need import measured_need  # noqa: PLC0415

    need = measured_need(t)
    nd4j = min(t.peaks()["nd4j"] or 0, need.offheap)
    est = spark_measured_estimate(need.javacpp // max(tasks, 1), nd4j // max(tasks, 1), need.offheap - nd4j,
                                  need.heap, need.native, tasks, model=t.name, role=role)
    return est, need


def executor_row(t: "Timeline") -> dict:
    """One executor's side of the before/after table."""
    peaks, limits = t.peaks(), t.limits()
    return {"executor": t.jvm.executor_id if t.jvm and t.jvm.spark == "executor" else "driver",
            "pid": t.jvm.pid if t.jvm else None, "lane": t.path.name if t.path else None, "samples": len(t.samples),
            "iterations": t.iterations(), "cores": t.jvm.cores if t.jvm else None,
            "peak_rss": peaks["rss"], "peak_heap_used": peaks["heap_used"], "live_heap": peaks["heap_live"],
            "native": peaks["native"], "nd4j": peaks["nd4j"], "javacpp": peaks["javacpp_total"],
            "heap_max": limits["heap_max"], "javacpp_max_physical": limits["javacpp_max_physical"]}


def spark_side(run: "JobRun") -> dict:
    """Per executor of a spark-submit run: peaks, limits and how it ended (the driver in local mode)."""
    found = {o.executor_id: o for o in outcomes(run.run_dir, run.lanes)}
    lanes = executor_lanes(run.lanes)
    rows = []
    for t in lanes:
        row = executor_row(t)
        o = found.get(t.jvm.executor_id)
        row.update(outcome=o.kind if o else "ok", diagnosis=o.diagnosis if o else "", exit_code=o.exit_code if o else None)
        rows.append(row)
    for eid, o in found.items():
        if not any(r["executor"] == eid for r in rows):  # lost before its agent wrote anything
            rows.append({"executor": eid, "samples": 0, "outcome": o.kind, "diagnosis": o.diagnosis,
                         "exit_code": o.exit_code})
    driver = driver_lane(run.lanes)
    return {"mode": "cluster" if lanes or found else "local", "executors": rows,
            "driver": executor_row(driver) if driver is not None else None,
            "executor_memory_failures": [r["diagnosis"] for r in rows if r.get("outcome") not in ("ok", None)]}


def recommend(runs: "JobRun | list[JobRun]", argv: list[str],
              headroom: float = DEFAULT_HEADROOM) -> tuple[dict[str, str], SparkFlags, dict]:
    """(the Spark settings for the re-run, the SparkFlags behind them, the why) from profiled spark-submit runs:
    the worst executor (and driver) of all of them. A run that failed for memory counts with its raised need
    (pyd4j.profile.need.measured_need: an OOM or a kill shows only a lower bound), so recommending from the
    first run and a failed re-run gives settings above both."""
    runs = runs if isinstance(runs, list) else [runs]
    submit = SparkSubmit.parse(argv)
    settings = submit.settings()
    task_cpus = int(settings.get("spark.task.cpus", "1") or 1)
    lanes = [t for run in runs for t in executor_lanes(run.lanes) if t.samples]
    executors = max(len([t for t in executor_lanes(run.lanes) if t.samples]) for run in runs)
    drivers = [d for run in runs for d in [driver_lane(run.lanes)] if d is not None and d.samples]
    driver = max(drivers, key=lambda d: _total(_split(d, 0, "driver")[1])) if drivers else None
    local = submit.local_threads()
    if lanes:
        parts = []
        for t in lanes:
            cores = t.jvm.cores or int(settings.get("spark.executor.cores", "1"))
            est, need = _split(t, max(cores // task_cpus, 1), "executor")
            parts.append((t, cores, est, need))
        worst_t, cores, exec_est, worst = max(parts, key=lambda p: _total(p[3]))
        if driver is not None:
            driver_est, driver_need = _split(driver, 0, "driver")
        else:
            driver_est, driver_need = exec_est, worst
        shape = SparkShape(executors=executors, executor_cores=cores, task_cpus=min(task_cpus, cores))
        sf = spark_measured_flags(exec_est, driver_est, shape, headroom)
        conf = sf.conf()
        why = {"worst_executor": worst_t.jvm.executor_id, "worst_need": asdict(worst),
               "executor_needs": {_key(t, runs): asdict(n) for t, _, _, n in parts},
               "driver_need": asdict(driver_need), "concurrent_tasks": shape.concurrent_tasks}
    else:
        if driver is None:
            raise ValueError("the spark-submit run left no executor or driver timeline with samples: nothing to size from")
        tasks = local or 1
        exec_est, worst = _split(driver, tasks, "executor")
        shape = SparkShape(executors=1, executor_cores=tasks, task_cpus=min(task_cpus, tasks))
        sf = spark_measured_flags(exec_est, exec_est, shape, headroom)
        conf = sf.local_conf()
        for key in ("spark.executor.instances", "spark.cores.max", "spark.executor.cores"):
            conf.pop(key, None)   # local[N]: one JVM; its threads come from the master URL
        why = {"worst_executor": "driver (local mode: the driver runs the tasks)", "worst_need": asdict(worst),
               "executor_needs": {"driver": asdict(worst)}, "concurrent_tasks": tasks}
    why.update(per_task={"javacpp": exec_est.term_bytes("javacpp_peak") // max(shape.concurrent_tasks, 1),
                         "nd4j_untracked": exec_est.term_bytes("untracked_offheap") // max(shape.concurrent_tasks, 1)},
               executor_fixed_offheap=exec_est.term_bytes("spark_jvm_offheap"),
               executor_container_bytes=sf.executor_container_bytes,
               reasons={k: r for k, _, r in sf.settings() if k in conf})
    return conf, sf, why


def _key(t: "Timeline", runs: list["JobRun"]) -> str:
    """An executor's name in the recommendation: its id, with its run's directory name after the first run."""
    first = runs[0].run_dir
    return t.jvm.executor_id if t.run_dir == first else f"{t.run_dir.name}:{t.jvm.executor_id}"


def settings_held(run: "JobRun", conf: dict[str, str]) -> list[str]:
    """What of `conf` an executor (or the local driver) of the re-run did not get; [] when every one held."""
    from pyd4j.units import parse_bytes  # noqa: PLC0415

    problems = []
    lanes = executor_lanes(run.lanes)
    key = "spark.executor" if lanes else "spark.driver"
    if not lanes:
        lanes = [t for t in [driver_lane(run.lanes)] if t is not None]
    if not lanes:
        return ["no executor or driver lane in the re-run"]
    want_heap = parse_bytes(conf[f"{key}.memory"])
    options = conf.get(f"{key}.extraJavaOptions", "")
    want_phys = next((int(w.split("=", 1)[1]) for w in options.split() if "javacpp.maxphysicalbytes=" in w), None)
    for t in lanes:
        name = f"executor {t.jvm.executor_id}" if t.jvm.spark == "executor" else "driver"
        got = t.limits()["heap_max"]
        if not t.samples:
            problems.append(f"{name}: no samples")
        if got is None or abs(got - want_heap) > 0.1 * want_heap:   # the JVM reports a little less than -Xmx
            problems.append(f"{name}: heap max {got} != {key}.memory {conf[f'{key}.memory']}")
        prop = t.start.get("javacpp_maxphysicalbytes_prop")
        if want_phys is not None and (prop is None or parse_bytes(prop) != want_phys):
            problems.append(f"{name}: JavaCPP maxphysicalbytes {prop} != {want_phys}")
    return problems


def before_after_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """The per-executor before/after table of a spark tune document: (headers, rows)."""
    from pyd4j.output import human_bytes  # noqa: PLC0415

    def rows_of(side: str) -> dict[str, dict]:
        spark = (doc.get(side) or {}).get("spark") or {}
        rows = {str(r["executor"]): r for r in spark.get("executors") or []}
        if not rows and spark.get("driver"):
            rows = {"driver": spark["driver"]}   # local mode: the driver is the executor
        return rows

    before, after = rows_of("before"), rows_of("after")
    headers = ["executor", "side", "heap max", "peak heap used", "live heap", "peak RSS", "native (ND4J, Spark, JVM)",
               "iterations", "ended"]
    out = []
    for eid in sorted(set(before) | set(after), key=lambda e: (not e.isdigit(), int(e) if e.isdigit() else 0, e)):
        for side, rows in (("before", before), ("after", after)):
            r = rows.get(eid)
            if r is None:
                continue
            out.append([eid, side, human_bytes(r.get("heap_max")), human_bytes(r.get("peak_heap_used")),
                        human_bytes(r.get("live_heap")), human_bytes(r.get("peak_rss")), human_bytes(r.get("native")),
                        str(r.get("iterations", "-")), r.get("outcome", "ok")])
    return headers, out
