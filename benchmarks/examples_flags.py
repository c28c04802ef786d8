"""`pyd4j flags` on deeplearning4j-examples jobs: the network a job trained, sized from a profile, and the unchanged
job run under the flags inside a memory cgroup at the generated container limit.

The examples are DL4J's own (Apache 2.0), not pyd4j's, and are not vendored here: pass a checkout of
github.com/deeplearning4j/deeplearning4j-examples (`dl4j-examples` targets DL4J 1.0.0-M2.1, the version of
pyd4j's class path). Each named class is compiled unchanged (harness/dl4j_examples.py's javac) and, as a user would:

1. `pyd4j profile -- java ... Job`: the job as it is (glibc's defaults, the JVM's own heap); the profile saves
   the network it trained (`network-1.json` and its input sidecar) and its peak RSS;
2. `pyd4j flags --model network-1.json --batch B` at the batch it trained on (its functions, in process);
3. `pyd4j flags --verify`'s run: the job with those flags and environment, in a fresh cgroup at the generated
   container limit, under GNU time for its peak RSS (VmHWM) where /usr/bin/time is present.

Per job: the estimate's terms, the container limit, the collector, the run's outcome and diagnosis, need =
max(VmHWM, the cgroup's peak charge) and container / need (the flags target: at most 1.3, never under 1).

    .venv/bin/python benchmarks/examples_flags.py --checkout DIR [--jobs advanced.modelling.alphagozero.AlphaGoZeroTrainer]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from harness import RESULTS, Recorder
from harness.dl4j_examples import PACKAGE, compile_jobs, profiled_flags, run_timed
from harness.flagged import need_of
from pyd4j.commands.flags import verify_command
from pyd4j.memory.container import diagnose
from pyd4j.memory.flags import FlagSet

MiB = 1024**2
DEFAULT_JOBS = ["advanced.modelling.alphagozero.AlphaGoZeroTrainer", "advanced.modelling.seq2seq.AdditionModelWithSeq2Seq",
                "quickstart.modeling.feedforward.regression.SumModel"]


def verify(fs: FlagSet, job: list[str], timeout: float) -> dict:
    """flags --verify's run (pyd4j.commands.flags.verify_command in a cgroup at the container limit), with VmHWM."""
    r, hwm = run_timed(verify_command(fs, job), fs.container_bytes, fs, timeout)
    d = diagnose(r)
    return {"kind": d.kind, "diagnosis": d.message, "memory_exhausted": d.memory_exhausted, "exit_code": r.exit_code,
            "seconds": round(r.seconds, 1), "cgroup_peak_bytes": r.peak_bytes, "vmhwm_bytes": hwm,
            "stderr_tail": r.stderr[-400:] if d.kind != "ok" else ""}


def one(job_class: str, classes: Path, out: Path, timeout: float) -> dict:
    row, fs, job, _ = profiled_flags(job_class, classes, out, timeout)
    if fs is None:
        return row
    row.update(flags=fs.args(), environment=fs.environment, collector=fs.collector,
               container_bytes=fs.container_bytes, breakdown=fs.breakdown)
    v = verify(fs, job, timeout)
    need = need_of({"peak_rss_bytes": v["vmhwm_bytes"], "cgroup_peak_bytes": v["cgroup_peak_bytes"]})
    row.update(status="ok" if v["kind"] == "ok" else "failed", verify=v, need_bytes=need,
               budget_ratio=round(fs.container_bytes / need, 3) if need else None)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", type=Path, required=True, help="a deeplearning4j-examples checkout")
    ap.add_argument("--jobs", default=",".join(DEFAULT_JOBS), help=f"classes under {PACKAGE}, comma-separated")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds a run may take")
    ap.add_argument("--out", default=str(RESULTS / "examples_flags.json"))
    ap.add_argument("--merge", action="store_true", help="keep the rows in --out of the jobs this run does not run")
    args = ap.parse_args()
    jobs = [j for j in args.jobs.split(",") if j]
    rec = Recorder("examples_flags")
    with tempfile.TemporaryDirectory(prefix="pyd4j-examples-flags-") as tmp:
        compile_jobs(args.checkout, jobs, Path(tmp) / "classes")
        rows = []
        for job_class in jobs:
            rows.append(one(job_class, Path(tmp) / "classes", Path(tmp), args.timeout))
            r = rows[-1]
            print(f"{job_class}: {r['status']} batch {r.get('batch')} container {(r.get('container_bytes') or 0) / MiB:.0f} MiB "
                  f"need {(r.get('need_bytes') or 0) / MiB:.0f} MiB ratio {r.get('budget_ratio')} "
                  f"{(r.get('verify') or {}).get('diagnosis', r.get('error', ''))[:160]}", flush=True)
    if args.merge and Path(args.out).exists():
        ran = {r["job"] for r in rows}
        rows = [r for r in json.loads(Path(args.out).read_text())["jobs"] if r["job"] not in ran] + rows
    ok = [r for r in rows if r["status"] == "ok"]
    doc = rec.doc
    doc.update({"examples_commit": None,
           "summary": {"jobs": len(rows), "ok": len(ok), "failed": [r["job"] for r in rows if r["status"] != "ok"],
                       "within_1_3x": sum(1 for r in ok if r["budget_ratio"] and 1 <= r["budget_ratio"] <= 1.3),
                       "ratios": {r["job"].rsplit(".", 1)[-1]: r["budget_ratio"] for r in ok}},
           "jobs": rows})
    head = subprocess.run(["git", "-C", str(args.checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    doc["examples_commit"] = head.stdout.strip() or None
    rec.write(args.out, indent=2)
    print(json.dumps(doc["summary"], indent=2))


if __name__ == "__main__":
    main()
