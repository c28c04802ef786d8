"""`pyd4j tune --speed` on deeplearning4j-examples jobs, compiled unchanged from a checkout the user gives.

The examples are DL4J's own (Apache 2.0), not pyd4j's, and are not vendored here: pass a checkout of
github.com/deeplearning4j/deeplearning4j-examples (its `dl4j-examples` module targets DL4J 1.0.0-M2.1, the
version pyd4j's class path carries). Each named class is compiled from `dl4j-examples/src/main/java` with
javac's -sourcepath (it and what it uses, nothing else) against pyd4j's class path, and run as it is: its
`main` with no arguments, its data made in the job, nothing downloaded.

Per job, two tunes:
- the job with a bad setting given from outside (by default `OMP_NUM_THREADS=8` on this machine's cores:
  more OpenMP threads than cores), tuned; a kept change is re-measured by a fresh A/B (`--recheck-runs`
  a side): a claim the fresh A/B does not reproduce (median ratio <= 1) is a false claim;
- the job with what that tune kept (its environment and JVM options pasted), tuned again: a well-set job,
  where any claimed change must again survive a fresh A/B.

`tune --speed` runs at its defaults (every kind of setting; `--only` narrows them).

    .venv/bin/python benchmarks/examples_speed.py --checkout DIR [--jobs quickstart.modeling.feedforward.regression.SumModel]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from harness import RESULTS, Recorder
from harness.dl4j_examples import PACKAGE, commit_of, compile_jobs
from harness.speedjobs import claim_checked, environment, tune_row
from pyd4j.jvm.classpath import classpath
from pyd4j.profile.speed import tune_speed

DEFAULT_JOBS = ["quickstart.modeling.feedforward.regression.SumModel"]
THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY")


def tune(job: list[str], env: dict[str, str], out: Path, max_runs: int, recheck_runs: int, only: set[str] | None) -> dict:
    with environment({**{k: None for k in THREADS}, **env}):
        t0 = time.monotonic()
        doc = tune_speed(job, out, max_runs=max_runs, only=only, timeout_s=1800)
        wall = time.monotonic() - t0
    s = doc["speed"]
    row = {"environment": env, **tune_row(doc), "paste": s["paste"],
           "probe": {k: (doc.get("probe") or {}).get(k) for k in ("iterations_per_s", "nd4j", "gc_share", "time_split")},
           "failed_runs": s.get("failed_runs", []), "wall_s": round(wall, 1)}
    claim_checked(row, job, {k: env.get(k) for k in THREADS}, out.parent / f"{out.name}-recheck", recheck_runs)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", type=Path, required=True, help="a deeplearning4j-examples checkout (read only)")
    ap.add_argument("--jobs", default=",".join(DEFAULT_JOBS), help=f"classes under {PACKAGE}, comma-separated")
    ap.add_argument("--bad", default="OMP_NUM_THREADS=8", help="the bad setting, NAME=VALUE in the job's environment")
    ap.add_argument("--only", default="", help="kinds of setting tried, comma-separated (tune_speed's `only`; default: all)")
    ap.add_argument("--commit", default=None, help="the examples' commit, where the checkout is not a clone of them")
    ap.add_argument("--max-runs", type=int, default=6)
    ap.add_argument("--recheck-runs", type=int, default=4)
    ap.add_argument("--merge", action="store_true", help="keep the other jobs' rows of the results file")
    ap.add_argument("--out", type=Path, default=RESULTS / "examples_speed.json")
    args = ap.parse_args()
    jobs = [j for j in args.jobs.split(",") if j]
    rec = Recorder("examples_speed")
    tmp = rec.hide(tempfile.mkdtemp(prefix="examples-speed-"))
    compile_jobs(args.checkout, jobs, tmp / "classes")
    cp = os.pathsep.join([str(tmp / "classes"), *(str(p) for p in classpath())])
    name, _, value = args.bad.partition("=")
    only = set(filter(None, args.only.split(","))) or None
    results = []
    if args.merge and args.out.exists():   # rows of an earlier run, each with the time it was measured
        earlier = json.loads(args.out.read_text())
        since = earlier.get("started") or earlier["run"]["started_utc"]
        results = [{**r, "measured": r.get("measured", since)} for r in earlier["jobs"]
                   if r["job"] not in {PACKAGE + j for j in jobs}]
    for job_class in jobs:
        job = ["java", "-cp", cp, PACKAGE + job_class]
        bad = tune(job, {name: value}, tmp / f"{job_class}-bad", args.max_runs, args.recheck_runs, only)
        bad["found"] = any(c["setting"].startswith("threads") for c in bad["changes"])
        # the job as the tune left it: its environment and JVM options pasted (a code or Maven paste is not
        # applied to a job whose code and build are DL4J's; such changes are listed as not applied)
        tuned_env = {name: value, **bad["paste"]["environment"]}
        tuned_job = ["java", *bad["paste"]["jvm_options"], *job[1:]]
        again = tune(tuned_job, tuned_env, tmp / f"{job_class}-tuned", args.max_runs, args.recheck_runs, only)
        again["not_applied"] = bad["paste"]["code"] + bad["paste"]["maven"]
        results.append({"job": PACKAGE + job_class, "bad": bad, "tuned_again": again,
                        "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        print(f"{job_class}: bad {bad['verdict']} {bad['ratio']} {[c['setting'] for c in bad['changes']]} recheck "
              f"{bad.get('recheck', {}).get('ratio')}; tuned again {again['verdict']} {again['ratio']} recheck "
              f"{again.get('recheck', {}).get('ratio')}", flush=True)
        rec.doc.update({
               "examples_commit": args.commit or commit_of(args.checkout), "bad_setting": args.bad, "only": sorted(only) if only else "all",
               "settings": {"max_runs": args.max_runs, "recheck_runs": args.recheck_runs},
               "summary": {"bad_found": sum(r["bad"].get("found", False) for r in results), "jobs": len(results),
                           "false_claims": sum(r[k]["false_claim"] for r in results for k in ("bad", "tuned_again")),
                           "left_slower": sum(r[k]["left_slower"] for r in results for k in ("bad", "tuned_again")),
                           "claims_on_tuned_jobs": sum(r["tuned_again"]["verdict"] == "verified" for r in results)},
               "jobs": results})
        rec.write(args.out, indent=2)


if __name__ == "__main__":
    main()
