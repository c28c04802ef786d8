"""Live heap as the profiler reports it against `jcmd GC.class_histogram`, across the corpus of
benchmarks/leak_corpus.py (healthy and leaking CorpusJob jobs: MLP, CNN, LSTM, two-input graph, a
cache that levels off, kept network outputs, a cache that never hits, a Java-heap leak), with the
agent's defaults.

On each running job, `--histograms` times `--every` seconds apart (the first after `--seconds`):
`jcmd <pid> GC.class_histogram` (a full collection, then the histogram: what a user would run), then
the agent's live point of that very collection (a full-GC point after jcmd was asked) compared with
jcmd's Total. Also per job: the live heap the run reports (the largest point measured over the whole
run) and the old measure (the largest heap left after young collections). Target: every point
within 2% of jcmd. Writes benchmarks/results/live_heap.json.

    .venv/bin/python benchmarks/live_heap.py [--seconds 30] [--histograms 2] [--every 15] [--parallel 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from harness import RESULTS, Recorder, run_pool
from harness.corpus import corpus
from pyd4j.jvm import find_java
from pyd4j.profile import profile_job
from pyd4j.profile.histogram import read_histogram
from pyd4j.profile.timeline import Timeline

JOBS = {"mlp": "healthy", "cnn": "healthy", "lstm": "healthy", "graph": "healthy", "plateau": "healthy",
        "leak-list": "leaking", "leak-cache": "leaking", "leak-heap": "leaking"}
TARGET = 0.02


def histogram_now(run_dir: Path, pid: int, deadline_s: float = 120) -> dict:
    """jcmd's histogram of the running job, and the agent's live point of that same full collection."""
    asked = time.time() * 1000
    out = subprocess.run(["jcmd", str(pid), "GC.class_histogram"], check=True, capture_output=True, text=True,
                         timeout=300).stdout
    total, bookkeeping = read_histogram(out)
    end = time.monotonic() + deadline_s
    while True:
        points = [p for p in Timeline.load(run_dir).live_points if p["t"] >= asked and p.get("trigger") == "full-gc"]
        if points:
            break
        if time.monotonic() > end:
            return {"jcmd_total": total, "agent": None, "error": None, "note": "no live point for jcmd's collection"}
        time.sleep(0.5)
    point = min(points, key=lambda p: p["t"])
    t = Timeline.load(run_dir)
    near = [{k: e.get(k) for k in ("type", "t", "trigger", "cause", "kind", "duration_ms", "heap_after", "heap_live")}
            for e in [*t.gc_events, *t.live_points] if asked - 3000 <= e["t"] <= point["t"] + 1000]
    return {"around": sorted(near, key=lambda e: e["t"]), "asked": asked, "jcmd_total": total, "jcmd_bookkeeping": bookkeeping, "agent": point["heap_live"],
            "agent_bookkeeping": point.get("heap_bookkeeping"), "error": abs(point["heap_live"] - total) / total,
            "seconds_after_ask": round((point["t"] - asked) / 1000, 2)}


def measure(job: str, root: Path, seconds: float, histograms: int, every: float) -> dict:
    run_dir, stop = root / job, root / f"{job}.stop"
    started = time.monotonic()
    taken: list[dict] = []

    def on_sample(sample: dict) -> None:
        if stop.exists() or time.monotonic() - started < seconds + every * len(taken):
            return
        taken.append(histogram_now(run_dir, sample["pid"]))
        if len(taken) >= histograms:
            stop.touch()

    run = profile_job([*corpus(job, 0), str(stop)], run_dir, on_sample=on_sample, timeout_s=seconds + every * histograms + 900)
    t = run.timeline
    errors = [h["error"] for h in taken if h["error"] is not None]
    return {"name": job, "group": JOBS[job], "exit": run.returncode, "iterations": t.iterations(),
            "live_points": len(t.live_points), "histograms": taken,
            "worst_error": max(errors) if len(errors) == len(taken) and errors else None,
            "reported_live_heap_peak": t.live_heap_peak(), "heap_after_young_gc_peak": t.heap_after_gc_peak()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30, help="training before the first histogram")
    parser.add_argument("--histograms", type=int, default=2, help="jcmd histograms per job")
    parser.add_argument("--every", type=float, default=15, help="seconds between them")
    parser.add_argument("--parallel", type=int, default=3, help="jobs at once")
    parser.add_argument("--only", default="", help="comma-separated job names")
    args = parser.parse_args()
    rec = Recorder("live_heap")
    os.environ["OMP_NUM_THREADS"] = "1"
    jobs = [j for j in JOBS if not args.only or j in args.only.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        rows = run_pool([{"name": j} for j in jobs],
                        lambda c: measure(c["name"], Path(tmp), args.seconds, args.histograms, args.every), args.parallel)
    points = [h for r in rows for h in r.get("histograms", [])]
    measured = [h["error"] for h in points if h.get("error") is not None]
    summary = {"jobs": len(rows), "histograms": len(points), "matched": len(measured),
               "worst_error": max(measured) if measured else None,
               "within_target": sum(1 for e in measured if e <= TARGET), "target": TARGET,
               "meets_target": bool(measured) and len(measured) == len(points) and max(measured) <= TARGET}
    rec.doc.update({"method": "agent's live point of jcmd's own full collection vs jcmd's Total",
                    "seconds": args.seconds, "every": args.every, "omp_threads": 1, "parallel": args.parallel,
                    "jobs": rows, "summary": summary, "java": find_java().version})
    out = rec.write(RESULTS / ("live_heap.partial.json" if args.only else "live_heap.json"), indent=2)
    print(json.dumps(summary, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
