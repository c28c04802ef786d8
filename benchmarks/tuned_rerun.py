"""Do tuned flags hold the job for longer than tune watched it? Each corpus job of benchmarks/leak_corpus.py
that tune can size (the healthy ones, on DL4J 1.0.0-M2.1 and beta7, and the leaking and dying ones tune
does not verify) is tuned at the agent's defaults; then the job runs again without pyd4j, with the
recommended flags (and environment), for 3x the iterations of tune's re-run, inside a real memory cgroup of the recommended
container limit (pyd4j.memory.container, what a Kubernetes/Docker memory limit does).

Per job: the tune outcome, the limit, the iterations asked and done, the exit code, the cgroup's peak
charged memory and whether the kernel's OOM killer fired. Target: every job tune did not find leaking
(verified, or not verified only for too little data) completes (`ok`); the leaking and dying jobs are
shown for what the recommendation does to them (tune never verified them). Writes
benchmarks/results/tuned_rerun.json.

    .venv/bin/python benchmarks/tuned_rerun.py [--seconds 60] [--parallel 2] [--factor 3] [--only mlp,cnn]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import RESULTS, Recorder, run_pool
from harness.corpus import cases
from pyd4j.profile.command import JavaCommand
from pyd4j.profile.tune import tune_job

# tuned: the healthy corpus jobs (M2.1 and beta7) and the leaking/dying ones leak_corpus.py tunes
JOBS = ("mlp", "cnn", "lstm", "graph", "plateau", "short-30", "beta7-mlp", "leak-list", "leak-heap", "dies-heap")
# the job's own arguments after its main class: where its seconds and (minimum) iterations go
ARGS = {"org.pyd4j.fixtures.CorpusJob": (2, 3), "org.pyd4j.fixtures.MemoryJob": (None, 2),
        "org.pyd4j.compat.CompatJob": (1, 2)}
# What a job counts per DL4J iteration where that is not one: the CNN job fits an iterator over 8 batches
# that DL4J's ListDataSetIterator merges into one minibatch, and counts the 8 batches.
JOB_UNITS = {"cnn": 8}
# Runs the command in a fresh memory cgroup and prints how it ended as JSON (a child process: creating
# the cgroup forks with a pre-exec hook, which is not safe from this script's worker threads).
LIMITED = ("import json, sys; from pyd4j.memory.container import run_limited; "
           "r = run_limited(sys.argv[3:], int(sys.argv[1]), timeout=float(sys.argv[2])); "
           "print(json.dumps(r.to_dict(output=True)))")


def longer(command: list[str], iterations: int) -> list[str]:
    """The job's command made to train exactly `iterations` iterations (no time limit)."""
    argv = list(command)
    main = next(i for i, a in enumerate(argv) if a in ARGS)
    seconds_at, iterations_at = ARGS[argv[main]]
    if seconds_at is not None:
        argv[main + seconds_at] = "0"
    argv[main + iterations_at] = str(iterations)
    return argv


def must_hold(outcome: str, findings: set[str], iterations: int | None) -> bool:
    """Tune found nothing wrong with the job, which trained, but at most too little data to rule a leak
    out: its flags must hold it."""
    return outcome == "verified" or (outcome == "not-verified" and findings <= {"not-enough-data"} and bool(iterations))


def tune_and_rerun(case: dict, root: Path, factor: int, timeout_s: float) -> dict:
    doc = tune_job(case["command"], root / f"tune-{case['name']}", timeout_s=900)
    row = {"name": case["name"], "group": case["group"], "tune_outcome": doc["outcome"], "tune_exit": doc["exit_code"],
           "tune_findings": (doc.get("after") or {}).get("findings"),
           "tune_first_findings": (doc.get("before") or {}).get("findings"), "recommended": doc.get("recommended"),
           "recommended_environment": doc.get("recommended_environment") or {}, "container_bytes": doc.get("container_bytes"),
           "must_hold": must_hold(doc["outcome"], {*(doc.get("after") or {}).get("findings", []),
                                                  *(doc.get("before") or {}).get("findings", [])},
                                  (doc.get("after") or {}).get("iterations"))}
    if not doc.get("recommended") or not doc.get("container_bytes"):
        return {**row, "ok": None, "skipped": "no recommendation"}
    tuned_iterations = (doc.get("after") or {}).get("iterations") or 0
    asked = factor * tuned_iterations
    units = JOB_UNITS.get(case["name"], 1)
    argv = JavaCommand.parse(longer(case["command"], asked * units)).argv(doc["recommended"], drop_memory_flags=True)
    # the environment the flags assume, as the tune's re-runs had it
    env = {**os.environ, **(doc.get("recommended_environment") or {})}
    out = subprocess.run([sys.executable, "-c", LIMITED, str(doc["container_bytes"]), str(timeout_s), *argv],
                         capture_output=True, text=True, check=True, env=env).stdout
    result = json.loads(out.splitlines()[-1])
    done = re.search(r"FIXTURE .*?iterations=(\d+)", result["stdout"])
    row.update(tuned_iterations=tuned_iterations, iterations_asked=asked,
               iterations_done=int(done.group(1)) // units if done else None, exit=result["exit_code"],
               peak_bytes=result["peak_bytes"],
               peak_share=round(result["peak_bytes"] / result["limit_bytes"], 3) if result["peak_bytes"] else None,
               oom_killed=result["oom_killed"], timed_out=result["timed_out"], seconds=result["seconds"],
               ok=result["ok"] and bool(done) and int(done.group(1)) >= asked * units, ending=result["description"],
               stderr_tail=result["stderr"][-600:] if not result["ok"] else "")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60, help="training time of the jobs when tuned")
    parser.add_argument("--parallel", type=int, default=2, help="jobs at once")
    parser.add_argument("--factor", type=int, default=3, help="re-run for this many times the tuned run's iterations")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one long re-run may take")
    parser.add_argument("--only", default="", help="comma-separated job names")
    parser.add_argument("--resummarise", action="store_true", help="recompute the summary of results/tuned_rerun.json")
    args = parser.parse_args()
    out = RESULTS / "tuned_rerun.json"
    if args.resummarise:
        rec = Recorder.amending(out)
        doc = rec.doc
        for r in doc["jobs"]:
            r["must_hold"] = must_hold(r["tune_outcome"], {*(r.get("tune_findings") or []), *(r.get("tune_first_findings") or [])},
                                       r.get("tuned_iterations"))
        doc["summary"] = summary(doc["jobs"])
        rec.write(out, indent=2)
        print(json.dumps(doc["summary"], indent=2))
        return
    rec = Recorder("tuned_rerun")
    os.environ["OMP_NUM_THREADS"] = "1"
    chosen = [c for c in cases(args.seconds) if c["name"] in JOBS and (not args.only or c["name"] in args.only.split(","))]
    with tempfile.TemporaryDirectory() as tmp:
        rows = run_pool(chosen, lambda c: tune_and_rerun(c, Path(tmp), args.factor, args.timeout), args.parallel)
    when = time.strftime("%Y-%m-%dT%H:%M:%S")
    for r in rows:
        r["when"] = when
    if args.only and out.exists():  # re-measured jobs replace their rows; the others keep theirs
        again = {r["name"] for r in rows}
        rows = [r for r in json.loads(out.read_text())["jobs"] if r["name"] not in again] + rows
        rows.sort(key=lambda r: JOBS.index(r["name"]) if r["name"] in JOBS else len(JOBS))
    rec.doc.update({"seconds": args.seconds, "factor": args.factor, "agent_options": "defaults", "omp_threads": 1,
                    "parallel": args.parallel, "jobs": rows, "summary": summary(rows)})
    rec.write(out, indent=2)
    print(json.dumps(rec.doc["summary"], indent=2))
    print(f"wrote {out}")


def summary(rows: list[dict]) -> dict:
    """Failures among the jobs whose tuned flags must hold them; the others apart."""
    held = [r for r in rows if r.get("must_hold")]
    return {"jobs": len(rows), "must_hold": len(held), "failures": sum(1 for r in held if not r.get("ok")),
            "failed": [r["name"] for r in held if not r.get("ok")],
            "others_ok": sum(1 for r in rows if not r.get("must_hold") and r.get("ok")),
            "others": sum(1 for r in rows if not r.get("must_hold")),
            "worst_peak_share": max((r["peak_share"] for r in held if r.get("peak_share")), default=None)}


if __name__ == "__main__":
    main()
