"""`pyd4j tune --speed` on a corpus of DL4J jobs (tests/fixtures/java SpeedJob: MLP 784-256-128-10
batch 64, LeNet-style CNN batch 16, LSTM 8-32-4 over 10 steps batch 16), each either carrying one
bad setting or well set, all ratios measured in this run on this machine (its load average is
recorded: the machine may be shared).

Per job: the verdict, the changes kept with their ratio and 95% interval, the runs the tune took
beyond the first and its wall time; then, for every job where a change was kept, a fresh A/B of the
job as it is against the job with the kept changes (new runs, alternated, `--recheck-runs` a side):
a claim the fresh A/B does not reproduce (median ratio <= 1) is a false claim; a job whose fresh
ratio is under 0.98 was left slower. Summary: the median verified speedup over the bad jobs (1.0
where nothing was kept), jobs whose bad setting was found, false claims, jobs left slower.

    .venv/bin/python benchmarks/speed_tuning.py [--seconds 4] [--max-runs 6] [--jobs mlp-threads-unset,...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from pyd4j.jvm.classpath import PROJECT_ROOT, classpath
from pyd4j.profile import ab
from pyd4j.profile.speed import Setup, change_of, job_runner, tune_speed

ROOT = Path(__file__).resolve().parent
FIXTURES_JAR = PROJECT_ROOT / "tests" / "fixtures" / "java" / "target" / "pyd4j-fixtures.jar"
ONE = {"OMP_NUM_THREADS": "1"}   # measured on this 2-core machine under load: the best thread count

# name, kind, network, job options, JVM options, environment (None: removed), settings that undo the bad one
CORPUS = [
    ("mlp-threads-unset", "bad", "mlp", [], [], {"OMP_NUM_THREADS": None}, {"threads=2", "threads=1"}),
    ("cnn-threads-unset", "bad", "cnn", [], [], {"OMP_NUM_THREADS": None}, {"threads=2", "threads=1"}),
    ("lstm-threads-oversubscribed", "bad", "lstm", [], [], {"OMP_NUM_THREADS": "8"}, {"threads=2", "threads=1"}),
    ("mlp-system-gc", "bad", "mlp", ["system-gc=1"], [], ONE, {"explicit_gc"}),
    ("lstm-system-gc", "bad", "lstm", ["system-gc=1"], [], ONE, {"explicit_gc"}),
    ("mlp-small-heap", "bad", "mlp", ["heap-cache=48"], ["-Xmx64m"], ONE, {"heap"}),
    ("cnn-small-heap", "bad", "cnn", ["heap-cache=48"], ["-Xmx64m"], ONE, {"heap"}),
    ("mlp-well-set", "well", "mlp", [], [], ONE, set()),
    ("cnn-well-set", "well", "cnn", [], [], ONE, set()),
    ("lstm-well-set", "well", "lstm", [], [], ONE, set()),
    ("mlp-heap-cache-well-set", "well", "mlp", ["heap-cache=48"], [], ONE, set()),
]


def command(net: str, seconds: int, options: list[str], jvm: list[str]) -> list[str]:
    cp = os.pathsep.join([str(FIXTURES_JAR), *classpath()[1:]])
    return ["java", *jvm, "-cp", cp, "org.pyd4j.fixtures.SpeedJob", net, str(seconds), *options]


def recheck(job: list[str], env: dict, kept: list[dict], out: Path, runs: int) -> dict:
    """A fresh alternated A/B of the job as it is against the job with the kept changes."""
    changes = [change_of(row) for row in kept]
    run = job_runner(job, out)
    saved = dict(os.environ)
    try:
        _apply(env)

        def side(setup: Setup, name: str):
            def go() -> float:
                m = run(setup, name)
                if not m.ok or not m.iterations_per_s:
                    raise ab.RunFailed(m.why)
                return m.iterations_per_s
            return go
        c = ab.compare(side(Setup(), "before"), side(Setup(tuple(changes)), "after"), min_runs=runs, max_runs=runs)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return c.to_dict()


def _apply(env: dict) -> None:
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=4, help="training seconds per run of each job")
    ap.add_argument("--max-runs", type=int, default=6, help="most runs a side per A/B")
    ap.add_argument("--recheck-runs", type=int, default=4, help="runs a side of the fresh A/B of a claim")
    ap.add_argument("--jobs", default="", help="comma-separated job names (default: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "speed_tuning.json")
    args = ap.parse_args()
    if not FIXTURES_JAR.exists():
        raise SystemExit(f"{FIXTURES_JAR} is not built; run `make setup`")
    wanted = set(filter(None, args.jobs.split(",")))
    results = []
    started = time.time()
    load_start = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="speed-tuning-"))
    for name, kind, net, options, jvm, env, undo in CORPUS:
        if wanted and name not in wanted:
            continue
        job = command(net, args.seconds, options, jvm)
        saved = dict(os.environ)
        load_before = os.getloadavg()
        try:
            _apply(env)
            t0 = time.monotonic()
            doc = tune_speed(job, tmp / name, max_runs=args.max_runs)
            wall = time.monotonic() - t0
        finally:
            os.environ.clear()
            os.environ.update(saved)
        s = doc["speed"]
        kept = s["changes"]
        row = {"job": name, "kind": kind, "network": net, "options": options, "jvm": jvm,
               "environment": {k: v for k, v in env.items()}, "bad_setting_undone_by": sorted(undo),
               "verdict": s["verdict"], "exit_code": doc["exit_code"], "ratio": s["ratio"], "interval": s["interval"],
               "changes": s["changes"],
               "tried": [{k: t[k] for k in ("setting", "on_top_of", "verdict", "ratio", "interval", "runs")} for t in s["tried"]],
               "probe": doc.get("probe"), "extra_runs": s["extra_runs"], "wall_s": round(wall, 1),
               "load_average_1m": [round(load_before[0], 2), round(os.getloadavg()[0], 2)]}
        if kind == "bad":
            row["found"] = any(c["setting"] in undo for c in s["changes"])
        if kept:
            row["recheck"] = recheck(job, env, kept, tmp / f"{name}-recheck", args.recheck_runs)
            row["false_claim"] = not (row["recheck"]["ratio"] or 0) > 1.0
            row["left_slower"] = (row["recheck"]["ratio"] or 0) < 0.98
        else:
            row["false_claim"] = False
            row["left_slower"] = False
        results.append(row)
        print(f"{name:30s} {s['verdict']:20s} ratio {s['ratio']} {s['interval']} "
              f"changes {[c['setting'] for c in s['changes']]} runs {s['extra_runs']} {wall:.0f}s "
              f"recheck {row.get('recheck', {}).get('ratio')}", flush=True)
        _write(args.out, results, started, load_start, args)
    _write(args.out, results, started, load_start, args)


def _write(path: Path, results: list[dict], started: float, load_start, args) -> None:
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
    doc = {"benchmark": "speed_tuning", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
           "wall_s": round(time.time() - started, 1), "cores": os.cpu_count(),
           "load_average_at_start": [round(x, 2) for x in load_start],
           "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
           "settings": {"seconds": args.seconds, "max_runs": args.max_runs, "recheck_runs": args.recheck_runs},
           "method": "alternated runs; Hodges-Lehmann ratio with the exact Mann-Whitney 95% interval",
           "summary": summary, "jobs": results}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
