"""`pyd4j tune --speed` on a corpus of DL4J jobs (tests/fixtures/java SpeedJob: MLP 784-256-128-10
batch 64, LeNet-style CNN batch 16, LSTM 8-32-4 over 10 steps batch 16), each either carrying one
bad setting or well set (the OMP_NUM_THREADS that trains the network fastest, measured at the start
of the run, the nd4j-native build for this CPU and MKL for ND4J's BLAS calls), all ratios measured in
this run on this machine (its load average is recorded: the machine may be shared). Every job runs
the CPU's build with MKL except the ones whose bad setting is the build (the generic jar alone on
its class path) or the BLAS (OpenBLAS, ND4J's default).

Per job: the verdict, the changes kept with their ratio and 95% interval, the runs the tune took
beyond the first and its wall time; then, for every job where a change was kept, a fresh A/B of the
job as it is against the job with the kept changes (new runs, alternated, `--recheck-runs` a side):
a claim the fresh A/B does not reproduce (median ratio <= 1) is a false claim; a job whose fresh
ratio is under 0.98 was left slower. Summary: the median verified speedup over the bad jobs (1.0
where nothing was kept), jobs whose bad setting was found, false claims, jobs left slower.

    .venv/bin/python benchmarks/speed_tuning.py [--seconds 4] [--max-runs 6] [--jobs mlp-threads-unset,...]

With `--spark`, the corpus is DL4J-on-Spark jobs instead (examples/spark's TrainOnSpark, parameter averaging,
synthetic data) on a loopback standalone cluster of two 1-core workers: the bad setting is in the job's
spark-submit command (the executors' environment), tune --speed gives its changes to the executors as Spark
settings and measures the sum of their iterations per second (`results/speed_tuning_spark.json`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import RESULTS, Recorder
from harness.record import short_commit
from harness.speedjobs import FIXTURES_JAR, GENERIC, OPENBLAS, claim_checked, command, environment, spark_cluster
from harness.speedjobs import train_on_spark, tune_row
from pyd4j.profile.speed import tune_speed

WELL = "well"   # the environment measured best for the network at the start of the run (see well_set_threads)

# name, kind, network, job options, JVM options, environment (None: removed; WELL: the measured best),
# settings that undo the bad one. The bad settings of the first seven hurt most on a loaded machine
# (threads, GC); the rest do not depend on load: a data loader slower than compute that fit() does not
# prefetch (a sleep in next(): no CPU), workspaces off, more OpenMP threads than cores.
CORPUS = [
    ("mlp-threads-unset", "bad", "mlp", [], [], {"OMP_NUM_THREADS": None}, {"threads=2", "threads=1"}),
    ("cnn-threads-unset", "bad", "cnn", [], [], {"OMP_NUM_THREADS": None}, {"threads=2", "threads=1"}),
    ("lstm-threads-oversubscribed", "bad", "lstm", [], [], {"OMP_NUM_THREADS": "8"}, {"threads=2", "threads=1"}),
    ("mlp-system-gc", "bad", "mlp", ["system-gc=1"], [], WELL, {"explicit_gc"}),
    ("lstm-system-gc", "bad", "lstm", ["system-gc=1"], [], WELL, {"explicit_gc"}),
    ("mlp-small-heap", "bad", "mlp", ["heap-cache=48"], ["-Xmx64m"], WELL, {"heap"}),
    ("cnn-small-heap", "bad", "cnn", ["heap-cache=48"], ["-Xmx64m"], WELL, {"heap"}),
    ("mlp-slow-data", "bad", "mlp", ["slow-data=8"], [], WELL, {"prefetch"}),
    ("cnn-slow-data", "bad", "cnn", ["slow-data=30"], [], WELL, {"prefetch"}),
    # an uneven loader that keeps up on average: every 8th batch 15 ms more (the prefetch depth rule's case)
    ("mlp-uneven-data", "bad", "mlp", ["slow-data=1", "data-spike=8:15"], [], WELL, {"prefetch"}),
    ("mlp-workspaces-none", "bad", "mlp", ["workspaces=none"], [], WELL, {"workspace_mode"}),
    ("cnn-workspaces-none", "bad", "cnn", ["workspaces=none"], [], WELL, {"workspace_mode"}),
    ("mlp-threads-oversubscribed", "bad", "mlp", [], [], {"OMP_NUM_THREADS": "8"}, {"threads=2", "threads=1"}),
    ("cnn-threads-oversubscribed", "bad", "cnn", [], [], {"OMP_NUM_THREADS": "8"}, {"threads=2", "threads=1"}),
    ("mlp-openblas", "bad", "mlp", [], [OPENBLAS], WELL, {"blas"}),
    ("cnn-openblas", "bad", "cnn", [], [OPENBLAS], WELL, {"blas"}),
    ("mlp-b512-openblas", "bad", "mlp", ["batch=512"], [OPENBLAS], WELL, {"blas"}),
    ("mlp-b512-generic-build", "bad", "mlp", ["batch=512"], [GENERIC], WELL, {"nd4j_build"}),
    ("cnn-generic-build", "bad", "cnn", [], [GENERIC], WELL, {"nd4j_build"}),
    ("mlp-well-set", "well", "mlp", [], [], WELL, set()),
    ("cnn-well-set", "well", "cnn", [], [], WELL, set()),
    ("lstm-well-set", "well", "lstm", [], [], WELL, set()),
    ("mlp-heap-cache-well-set", "well", "mlp", ["heap-cache=48"], [], WELL, set()),
    ("mlp-fast-iterator-well-set", "well", "mlp", ["slow-data=0"], [], WELL, set()),
]


# name, kind, network, spark-submit settings of the job (the executors' environment), job options, settings
# that undo the bad one. Two workers of 1 core each: an executor's ND4J should run 1 OpenMP thread.
SPARK_CORPUS = [
    ("spark-mlp-threads-oversubscribed", "bad", "examples/data/digits_mlp.json",
     {"spark.executorEnv.OMP_NUM_THREADS": "8"}, [], {"threads=1"}),
    ("spark-lenet-threads-oversubscribed", "bad", "examples/data/digits_lenet.json",
     {"spark.executorEnv.OMP_NUM_THREADS": "8"}, ["--features", "1,8,8"], {"threads=1"}),
    ("spark-mlp-well-set", "well", "examples/data/digits_mlp.json",
     {"spark.executorEnv.OMP_NUM_THREADS": "1"}, [], set()),
]


def well_set_threads(nets: set[str], seconds: int, rounds: int) -> dict:
    """OMP_NUM_THREADS that trains each network fastest on this machine now: 1 and all cores (and half
    of them where that is another count), `rounds` alternated runs each, the job alone (no agent),
    iterations in `seconds`; the median decides. Measured, not assumed: which count wins depends on the
    machine and what else runs on it."""
    n = os.cpu_count() or 1
    counts = sorted({1, n, max(1, n // 2)})
    out: dict = {}
    for net in sorted(nets):
        its: dict[int, list[int]] = {c: [] for c in counts}
        for _ in range(rounds):
            for c in counts:
                env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
                env["OMP_NUM_THREADS"] = str(c)
                p = subprocess.run(command(net, seconds, [], []), env=env, capture_output=True, text=True, timeout=300)
                m = re.search(r"iterations=(\d+)", p.stdout)
                its[c].append(int(m.group(1)) if m else 0)
        best = max(counts, key=lambda c: statistics.median(its[c]))
        out[net] = {"best": best, "iterations": {str(c): v for c, v in its.items()}, "seconds": seconds}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=4, help="training seconds per run of each job")
    ap.add_argument("--max-runs", type=int, default=6, help="most runs a side per A/B")
    ap.add_argument("--recheck-runs", type=int, default=4, help="runs a side of the fresh A/B of a claim")
    ap.add_argument("--jobs", default="", help="comma-separated job names (default: all)")
    ap.add_argument("--calibration-rounds", type=int, default=3, help="alternated runs a thread count to find the well-set one")
    ap.add_argument("--cpu-priority", action="store_true", help="record that the run was given CPU priority over other work")
    ap.add_argument("--spark", action="store_true", help="the DL4J-on-Spark corpus on a two-worker loopback cluster")
    ap.add_argument("--examples", type=int, default=8192, help="with --spark: synthetic examples per job run (one epoch)")
    ap.add_argument("--merge", action="store_true", help="with --spark: keep the other jobs' rows of the results file")
    ap.add_argument("--cli-memory", action="store_true", help="with --spark: run `pyd4j tune --speed --memory --json -- "
                    "spark-submit ...` end to end on the first bad job instead (results/speed_memory_spark.json)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.spark:
        spark_main(args)
        return
    args.out = args.out or RESULTS / "speed_tuning.json"
    if not FIXTURES_JAR.exists():
        raise SystemExit(f"{FIXTURES_JAR} is not built; run `make setup`")
    wanted = set(filter(None, args.jobs.split(",")))
    results = []
    rec = Recorder("speed_tuning")
    tmp = rec.hide(tempfile.mkdtemp(prefix="speed-tuning-"))
    corpus = [c for c in CORPUS if not wanted or c[0] in wanted]
    well = well_set_threads({c[2] for c in corpus if c[5] == WELL}, args.seconds, args.calibration_rounds)
    print("well-set threads:", {net: w["best"] for net, w in well.items()}, flush=True)
    for name, kind, net, options, jvm, env, undo in corpus:
        if env == WELL:
            env = {"OMP_NUM_THREADS": str(well[net]["best"])}
        job = command(net, args.seconds, options, jvm)
        load_before = os.getloadavg()
        with environment(env):
            t0 = time.monotonic()
            doc = tune_speed(job, tmp / name, max_runs=args.max_runs)
            wall = time.monotonic() - t0
        s = doc["speed"]
        row = {"job": name, "kind": kind, "network": net, "options": options, "jvm": jvm,
               "environment": {k: v for k, v in env.items()}, "bad_setting_undone_by": sorted(undo), **tune_row(doc),
               "probe": doc.get("probe"), "wall_s": round(wall, 1),
               "load_average_1m": [round(load_before[0], 2), round(os.getloadavg()[0], 2)]}
        if kind == "bad":
            row["found"] = any(c["setting"] in undo for c in s["changes"])
        claim_checked(row, job, env, tmp / f"{name}-recheck", args.recheck_runs)
        results.append(row)
        print(f"{name:30s} {s['verdict']:20s} ratio {s['ratio']} {s['interval']} "
              f"changes {[c['setting'] for c in s['changes']]} runs {s['extra_runs']} {wall:.0f}s "
              f"recheck {row.get('recheck', {}).get('ratio')}", flush=True)
        _write(rec, args.out, results, args, well)
    _write(rec, args.out, results, args, well)


def spark_main(args) -> None:
    """The Spark corpus: each job's tune, then a fresh A/B of what it kept, on one two-worker cluster."""
    args.out = args.out or RESULTS / "speed_tuning_spark.json"
    wanted = set(filter(None, args.jobs.split(",")))
    results: list[dict] = []
    if args.merge and args.out.exists():   # rows of an earlier run, each with the time it was measured
        earlier = json.loads(args.out.read_text())
        since = earlier.get("started") or earlier["run"]["started_utc"]
        results = [{**r, "measured": r.get("measured", since)} for r in earlier["jobs"] if r["job"] not in wanted]
    rec = Recorder("speed_tuning")
    tmp = rec.hide(tempfile.mkdtemp(prefix="speed-tuning-"))
    with spark_cluster(tmp) as (props, jar):
        for name, kind, net, conf, options, undo in [c for c in SPARK_CORPUS if not wanted or c[0] in wanted]:
            job = train_on_spark(props, jar, net, args.examples, conf, options)
            load_before = os.getloadavg()
            if args.cli_memory:
                cli_memory_row(rec, job, name, tmp / name, args)
                return
            t0 = time.monotonic()
            doc = tune_speed(job, tmp / name, max_runs=args.max_runs, timeout_s=900)
            wall = time.monotonic() - t0
            s = doc["speed"]
            row = {"job": name, "kind": kind, "network": net, "options": options, "spark_conf": conf,
                   "bad_setting_undone_by": sorted(undo), **tune_row(doc), "paste": s["paste"],
                   "spark_cluster": doc.get("spark_cluster"), "probe": doc.get("probe"),
                   "run_log": [{k: r.get(k) for k in ("side", "setup", "iterations_per_s", "executors_iterations_per_s", "ok", "why")}
                               for r in s["run_log"]],
                   "wall_s": round(wall, 1), "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "load_average_1m": [round(load_before[0], 2), round(os.getloadavg()[0], 2)]}
            if kind == "bad":
                row["found"] = any(c["setting"] in undo for c in s["changes"])
            claim_checked(row, job, {}, tmp / f"{name}-recheck", args.recheck_runs)
            results.append(row)
            print(f"{name:36s} {s['verdict']:20s} ratio {s['ratio']} {s['interval']} "
                  f"changes {[c['setting'] for c in s['changes']]} runs {s['extra_runs']} {wall:.0f}s "
                  f"recheck {row.get('recheck', {}).get('ratio')}", flush=True)
            _write(rec, args.out, results, args, {}, spark=True)
    _write(rec, args.out, results, args, {}, spark=True)


def cli_memory_row(rec: Recorder, job: list[str], name: str, out: Path, args) -> None:
    """`pyd4j tune --speed --memory --json -- <spark-submit job>` as a user runs it: the memory tune's
    verdict and Spark settings, the speed tune's verdict on top of them, and whether every speed run's
    executors ran with the memory tune's JavaCPP limits (read from their timelines)."""
    from pyd4j.profile.spark_executors import executor_lanes
    from pyd4j.profile.timeline import Timeline

    t0, load_before = time.monotonic(), os.getloadavg()
    p = subprocess.run([sys.executable, "-m", "pyd4j.cli", "tune", "--speed", "--memory", "--json", "--max-runs",
                        str(args.max_runs), "--out", str(out), "--", *job], capture_output=True, text=True, timeout=5400)
    wall = time.monotonic() - t0
    doc = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
    speed = doc.get("speed") or {}
    opts = (doc.get("spark_conf") or {}).get("spark.executor.extraJavaOptions", "")
    wanted = {k: int(v) for k, v in re.findall(r"-Dorg\.bytedeco\.javacpp\.(maxbytes|maxphysicalbytes)=(\d+)", opts)}
    held = []
    for run in speed.get("run_log", []):
        lanes = executor_lanes(Timeline.load_lanes(run["run_dir"])) if run.get("run_dir") else []
        limits = [t.limits() for t in lanes]
        held.append({"side": run["side"], "executors": len(lanes),
                     "javacpp_max": sorted({lim.get("javacpp_max") for lim in limits}),
                     "javacpp_max_physical": sorted({lim.get("javacpp_max_physical") for lim in limits})})
    row = {"job": name, "command": "pyd4j tune --speed --memory --json -- spark-submit ...", "exit_code": p.returncode,
           "memory_exit_code": doc.get("memory_exit_code"), "memory_outcome": doc.get("outcome"),
           "memory_spark_conf": doc.get("spark_conf"), "memory_tune_limits": wanted,
           "memory_not_verified_because": doc.get("not_verified_because"),
           "speed_verdict": speed.get("verdict"), "speed_ratio": speed.get("ratio"), "speed_interval": speed.get("interval"),
           "speed_changes": [{k: c.get(k) for k in ("setting", "ratio", "interval")} for c in speed.get("changes", [])],
           "speed_tried": [{k: t.get(k) for k in ("setting", "verdict", "ratio", "interval", "runs")} for t in speed.get("tried", [])],
           "executor_environment": (doc.get("speed_tune") or {}).get("spark_cluster", {}).get("executor_environment"),
           "paste": speed.get("paste"), "extra_runs": speed.get("extra_runs"),
           "speed_runs_with_memory_limits": sum(1 for h in held if h["executors"] and h["javacpp_max"] == [wanted.get("maxbytes")]
                                                and h["javacpp_max_physical"] == [wanted.get("maxphysicalbytes")]),
           "speed_runs": len(held), "speed_runs_executors": held, "stderr_tail": p.stderr[-1500:],
           "wall_s": round(wall, 1), "load_average_1m": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
           "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    row["examples"] = args.examples
    row["code"] = "commit " + short_commit()
    # every run is kept: each is one measurement of the same command, at the code and job size it names; the
    # file's `run` is the latest
    out_file = args.out.parent / "speed_memory_spark.json"
    earlier = json.loads(out_file.read_text()) if out_file.exists() else {
        "cluster": "loopback standalone, 2 workers of 1 core", "runs": []}
    rec.doc.update({k: v for k, v in earlier.items() if k != "run"})
    row["run"] = len(rec.doc["runs"]) + 1
    rec.doc["runs"].append(row)
    rec.write(out_file, indent=2)
    print(f"{name}: exit {p.returncode}, memory {row['memory_outcome']}, speed {row['speed_verdict']} {row['speed_ratio']}, "
          f"{row['speed_runs_with_memory_limits']} of {row['speed_runs']} speed runs with the memory tune's limits, "
          f"{wall:.0f}s", flush=True)


def _write(rec: Recorder, path: Path, results: list[dict], args, threads: dict, spark: bool = False) -> None:
    bad = [r for r in results if r["kind"] == "bad"]
    well = [r for r in results if r["kind"] == "well"]
    speedups = [r["ratio"] if r["verdict"] == "verified" else 1.0 for r in bad]
    summary = {
        "bad_jobs": len(bad), "well_set_jobs": len(well),
        "bad_found": sum(1 for r in bad if r.get("found")),
        "median_speedup_bad": statistics.median(speedups) if speedups else None,
        "false_claims": sum(1 for r in results if r["false_claim"]),
        "left_slower": sum(1 for r in results if r["left_slower"]),
        "well_set_claims": sum(1 for r in well if r["verdict"] == "verified"),
        "targets": {"median_speedup_bad_at_least": 1.3, "false_claims": 0, "none_slower_than": 0.98},
        "extra_runs_median": statistics.median([r["extra_runs"] for r in results]) if results else None,
        "wall_s_median": statistics.median([r["wall_s"] for r in results]) if results else None,
    }
    rec.doc.update({
        "cpu_priority": args.cpu_priority,
        "settings": {"seconds": args.seconds, "max_runs": args.max_runs, "recheck_runs": args.recheck_runs},
        "well_set_threads": threads,
        **({"spark": {"cluster": "loopback standalone, 2 workers of 1 core", "job": "examples/spark TrainOnSpark, "
                      "parameter averaging (direct), 1 epoch, batch 32 per worker", "examples": args.examples,
                      "speed": "sum of the executors' iterations per second"}} if spark else {}),
        "method": "alternated runs; Hodges-Lehmann ratio with the exact Mann-Whitney 95% interval",
        "summary": summary, "jobs": results})
    rec.write(path, indent=2)


if __name__ == "__main__":
    main()
