"""Leak verdicts on DL4J-on-Spark executors: do the agent's live points measure what an executor keeps?

A Spark executor of TrainOnSpark (the MLP, parameter averaging, synthetic data, a loopback cluster of
two 1-core workers) is profiled for 1 and 3 epochs. For each executor the benchmark records its live
points (what a full collection left, in off-heap arrays) and, after each, the least the executor held
in all over the rest of the run (the samples' libnd4j + JavaCPP + workspace bytes, an upper bound of
what it keeps at that moment: memory it keeps is never released). A point above what the executor
held afterwards counted memory it released later. Then the leak verdicts pyd4j gives.

Adds a measurement to benchmarks/results/spark_leak_verdicts.json (each names its commit). Usage: python benchmarks/spark_leak_verdicts.py
[--examples 32768] [--epochs 1,3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from harness import RESULTS, ROOT, Recorder
from harness.record import short_commit
from harness.speedjobs import spark_cluster, train_on_spark

MiB = 1024**2


def executor_rows(run_dir: Path) -> list[dict]:
    from pyd4j.profile.leak_verdicts import envelope, leak_verdicts
    from pyd4j.profile.spark_executors import executor_lanes
    from pyd4j.profile.timeline import Timeline

    rows = []
    for t in executor_lanes(Timeline.load_lanes(run_dir)):
        ex, ey = envelope(t, "offheap", "iteration")
        points = []
        for p in t.live_points:
            kept = (p.get("nd4j_live") or 0) + (p.get("javacpp_total") or 0) + (p.get("ws_bytes") or 0)
            later = [y for x, y in zip(ex, ey) if x >= (p.get("iterations") or 0)]
            points.append({"iterations": p.get("iterations"), "kept_bytes": kept, "arrays": p.get("nd4j_live_count"),
                           "least_held_after_bytes": min(later) if later else None})
        over = [p for p in points if p["least_held_after_bytes"] is not None and p["iterations"]]
        rows.append({"pid": t.start.get("pid"), "iterations": t.iterations(), "live_points": points,
                     "points_above_later_held": sum(1 for p in over if p["kept_bytes"] > p["least_held_after_bytes"]),
                     "largest_excess_bytes": max((p["kept_bytes"] - p["least_held_after_bytes"] for p in over), default=None),
                     "verdicts": [{"what": v.label, "status": v.status, "reason": v.reason} for v in leak_verdicts(t)]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=32768)
    ap.add_argument("--epochs", default="1,3")
    ap.add_argument("--out", type=Path, default=RESULTS / "spark_leak_verdicts.json")
    args = ap.parse_args()
    from pyd4j.profile import profile_job

    rec = Recorder("spark_leak_verdicts")
    runs = []
    with tempfile.TemporaryDirectory(prefix="spark-leak-") as tmp_name:
        tmp = Path(tmp_name)
        with spark_cluster(tmp) as (props, jar):
            for epochs in (int(e) for e in args.epochs.split(",")):
                job = train_on_spark(props, jar, str(ROOT / "examples" / "data" / "digits_mlp.json"), args.examples,
                                     {"spark.executorEnv.OMP_NUM_THREADS": "1"}, epochs=epochs)
                run = profile_job(job, tmp / f"epochs-{epochs}", timeout_s=1200)
                rows = executor_rows(tmp / f"epochs-{epochs}")
                runs.append({"epochs": epochs, "examples": args.examples, "exit_code": run.returncode, "executors": rows})
                for r in rows:
                    print(f"{epochs} epoch(s), executor {r['pid']}: {r['iterations']} iterations, "
                          f"{r['points_above_later_held']} of {len(r['live_points'])} points above what it held later "
                          f"(largest by {(r['largest_excess_bytes'] or 0) / MiB:.1f} MiB); off-heap verdict "
                          f"{r['verdicts'][1]['status']}: {r['verdicts'][1]['reason'][:160]}", flush=True)
    # each measurement is kept with its own run record and code: the file compares agents across commits; the
    # file's `run` is the latest measurement's
    earlier = json.loads(args.out.read_text()).get("measurements", []) if args.out.exists() else []
    doc = {"run": rec.run, "cluster": "loopback standalone, 2 workers of 1 core",
           "job": "examples/spark TrainOnSpark, digits_mlp, parameter averaging (direct), batch 32 per worker",
           "runs": runs, "code": "commit " + short_commit()}
    rec.doc.update(measurements=[*earlier, doc])
    rec.write(args.out, indent=2)


if __name__ == "__main__":
    main()
