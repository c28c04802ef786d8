"""Diagnosis and tune verdicts at the agent's default settings on a corpus of small DL4J jobs with known
endings (tests/fixtures/java CorpusJob and MemoryJob, tests/fixtures/java-compat CompatJob on DL4J
1.0.0-beta7): healthy ones (MLP, CNN, LSTM, a two-input ComputationGraph, a cache that grows and then
levels off, a 30-iteration job), leaking ones (arrays kept by Java references, detached from a
workspace, cached by a key that never repeats, a workspace per batch never destroyed, Java heap, a leak
that starts after warm-up), dying ones (heap, JavaCPP maxbytes, NIO direct buffers, Metaspace, a
container memory limit) and one killed with SIGKILL far from any limit.

Each job runs under `profile_job` with no agent option (its defaults), ND4J on one thread, a few jobs
at a time. Per job: the findings, whether they are right, for leaks the user's line (the line marked
`LEAK SITE <job>` in the fixture's source), and the iterations (and seconds) until the leak verdict
was reached, found by replaying the timeline as it was known every 2 s (`Timeline.until`); for
healthy jobs whether any such prefix ever said "leak" (a false leak at any stopping point). Then
`tune` on a subset, each verdict against the expected one. Writes benchmarks/results/leak_corpus.json.

    .venv/bin/python benchmarks/leak_corpus.py [--seconds 60] [--parallel 3] [--no-tune]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from pathlib import Path

from harness import RESULTS, Recorder, run_pool
from harness.corpus import cases
from pyd4j.profile import profile_job
from pyd4j.profile.diagnose import diagnose
from pyd4j.profile.leak_verdicts import leak_verdicts
from pyd4j.profile.tune import tune_job

LEAK_KINDS = ("leak-offheap", "leak-heap")


def verdict_timing(t, expect: str | None) -> dict:
    """Replay the run as known every 2 s: when the expected verdict first held, and any false leak."""
    times = [s["t"] for s in t.samples]
    if not times:
        return {}
    first = {}
    false_leak_at = None
    step = 2000
    at = times[0] + step
    while at <= times[-1] + step:
        prefix = t.until(at)
        statuses = [v.status for v in leak_verdicts(prefix)]
        it = prefix.iterations()
        if "leak" in statuses:
            if expect in LEAK_KINDS:
                first.setdefault("leak", (it, (at - times[0]) / 1000))
            elif false_leak_at is None:
                false_leak_at = it
        if statuses == ["no-leak", "no-leak"]:
            first.setdefault("no-leak", (it, (at - times[0]) / 1000))
        at += step
    key = "leak" if expect in LEAK_KINDS else "no-leak"
    hit = first.get(key)
    return {"verdict_iterations": hit[0] if hit else None, "verdict_seconds": round(hit[1], 1) if hit else None,
            "false_leak_at_iteration": false_leak_at}


def profile_case(case: dict, root: Path) -> dict:
    killed: dict = {}

    def on_sample(sample: dict) -> None:
        if case.get("kill_at") and sample.get("iterations", 0) >= case["kill_at"] and not killed:
            killed["pid"] = sample["pid"]
            os.kill(sample["pid"], signal.SIGKILL)

    started = time.monotonic()
    run = profile_job(case["command"], root / case["name"], on_sample=on_sample, timeout_s=900)
    t = run.timeline
    findings = diagnose(t)
    kinds = [f.kind for f in findings]
    expect = case.get("expect")
    row = {"name": case["name"], "group": case["group"], "expected": expect or "no leak", "exit": run.returncode,
           "wall_s": round(time.monotonic() - started, 1), "iterations": t.iterations(), "findings": kinds,
           "finding_titles": [f.title for f in findings], "live_points": len(t.live_points),
           "leak_verdicts": [[v.status, v.reason] for v in leak_verdicts(t)]}
    if expect is None:
        row["right"] = healthy_right(row)
        row["undecided"] = "not-enough-data" in kinds
    elif expect in LEAK_KINDS:
        leak = next((f for f in findings if f.kind == expect), None)
        row["site"] = leak.numbers.get("site") if leak else None
        row["right"] = leak is not None and not [k for k in kinds if k in LEAK_KINDS and k != expect]
        row["site_right"] = None if "site" not in case else bool(row["site"] and row["site"].endswith(case["site"]))
    else:
        row["right"] = bool(kinds) and kinds[0] == expect
    if expect is None or expect in LEAK_KINDS:
        row.update(verdict_timing(t, expect))
    return row


NEVER_VERIFIED = ("not-verified", "rerun-failed")
TUNED = {  # job -> expected tune outcomes (a leaking job: never verified; its re-run may die of the leak)
    "mlp": ("verified",), "plateau": ("verified",), "leak-list": NEVER_VERIFIED, "leak-heap": NEVER_VERIFIED,
    "dies-heap": ("rerun-failed",), "short-30": ("not-verified",),  # a 3 s job: too little measured to verify
}


def tune_case(case: dict, root: Path) -> dict:
    try:
        doc = tune_job(case["command"], root / f"tune-{case['name']}", timeout_s=900)
    except Exception as err:  # noqa: BLE001 - a refused tune is a result here
        return {"name": case["name"], "outcome": "error", "error": str(err)[:300], "right": False}
    right = doc["outcome"] in TUNED[case["name"]]
    return {"name": case["name"], "expected": " or ".join(TUNED[case["name"]]),
            "outcome": doc["outcome"], "exit_code": doc["exit_code"], "right": right,
            "reruns": len(doc.get("attempts") or []), "recommended": doc.get("recommended"),
            "not_verified_because": doc.get("not_verified_because"), "own_limit_failures": doc.get("own_limit_failures")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60, help="training time of the healthy and leaking jobs")
    parser.add_argument("--parallel", type=int, default=3, help="jobs at once")
    parser.add_argument("--only", default="", help="comma-separated job names")
    parser.add_argument("--no-tune", action="store_true")
    parser.add_argument("--resummarise", action="store_true", help="recompute the summary of results/leak_corpus.json")
    args = parser.parse_args()
    if args.resummarise:
        rec = Recorder.amending(RESULTS / "leak_corpus.json")
        rec.doc["summary"] = summarise(rec.doc["jobs"], rec.doc["tunes"])
        rec.write(RESULTS / "leak_corpus.json", indent=2)
        print(json.dumps(rec.doc["summary"], indent=2))
        return
    rec = Recorder("leak_corpus")
    os.environ["OMP_NUM_THREADS"] = "1"
    chosen = [c for c in cases(args.seconds) if not args.only or c["name"] in args.only.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        rows = run_pool(chosen, lambda c: profile_case(c, Path(tmp)), args.parallel)
        tuned = [] if args.no_tune else run_pool([c for c in chosen if c["name"] in TUNED],
                                                 lambda c: tune_case(c, Path(tmp)), args.parallel)
    rec.doc.update({"seconds": args.seconds, "agent_options": "defaults", "omp_threads": 1, "parallel": args.parallel,
                    "jobs": rows, "tunes": tuned})
    rec.doc["summary"] = summarise(rows, tuned)
    out = rec.write(RESULTS / ("leak_corpus.partial.json" if args.only else "leak_corpus.json"), indent=2)
    print(json.dumps(rec.doc["summary"], indent=2))
    print(f"wrote {out}")


def healthy_right(row: dict) -> bool:
    """Nothing wrong found in a healthy job; "not enough data" is an honest answer (a short job), counted apart."""
    return not [k for k in row.get("findings", []) if k.startswith(("leak", "oom", "killed", "crash", "no-"))]


def summarise(rows: list[dict], tuned: list[dict]) -> dict:
    for r in tuned:
        if r.get("name") in TUNED and "outcome" in r:
            r["expected"] = " or ".join(TUNED[r["name"]])
            r["right"] = r["outcome"] in TUNED[r["name"]]
    for r in rows:
        if r.get("group") == "healthy":
            r["right"] = healthy_right(r)
    healthy = [r for r in rows if r.get("group") == "healthy"]
    leaking = [r for r in rows if r.get("group") == "leaking"]
    summary = {
        "jobs": len(rows),
        "false_leaks": sum(1 for r in healthy if any(k in LEAK_KINDS for k in r.get("findings", []))),
        "false_leaks_at_any_prefix": sum(1 for r in healthy if r.get("false_leak_at_iteration") is not None),
        "healthy_undecided": sum(1 for r in healthy if r.get("undecided")),
        "leaks_found": sum(1 for r in leaking if r.get("right")),
        "leaks": len(leaking),
        "leak_sites_right": sum(1 for r in leaking if r.get("site_right")),
        "leak_sites_checked": sum(1 for r in leaking if r.get("site_right") is not None),
        "endings_right": sum(1 for r in rows if r.get("group") in ("dying", "signal") and r.get("right")),
        "endings": sum(1 for r in rows if r.get("group") in ("dying", "signal")),
        "tune_right": sum(1 for r in tuned if r.get("right")),
        "tunes": len(tuned),
    }
    summary["leaks_found_share"] = summary["leaks_found"] / summary["leaks"] if summary["leaks"] else None
    return summary


if __name__ == "__main__":
    main()
