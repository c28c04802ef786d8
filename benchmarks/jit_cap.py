"""The JIT compiler's memory in long jobs, with and without C2's node limit that `pyd4j flags` pins.

C2 compiles a job's hot loop in arenas that the 3-iteration runs of `flags_accuracy.py` never reach: by NMT
27-78 MiB in deeplearning4j-examples' SumModel (2000 fast iterations). `-XX:MaxNodeLimit` bounds the size of
the graph one compilation may build (a larger one is given up and the method stays compiled by C1), and with
it the compilation's arenas. Per job, under the flags `pyd4j flags` generates for it, runs alternate between
the flags as generated and the same without the node limit (JDK default 80000), each in a memory cgroup
with room to spare (twice the generated container limit: no run is cut short), with -XX:+AlwaysPreTouch (the
whole heap resident, as the flags size it and as flags_accuracy.py runs), under GNU time:

- need = max(VmHWM, the cgroup's peak charge), each side's median and largest;
- above the model = need - what the flags were sized for without the JIT term and without headroom
  (heap + direct + ND4J off-heap + the JVM's base): what the JIT compiler (and noise) took beyond the base;
- speed: the job's wall time, without / with the node limit, per pair (median and range).

Jobs: deeplearning4j-examples' SumModel (`--checkout`, profiled as a user would to get its network, see
examples_flags.py) and pyd4j's TrainSynthetic on the example networks at many iterations.

    .venv/bin/python benchmarks/jit_cap.py [--checkout DIR] [--pairs 6]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from harness import RESULTS, Recorder, interleave, median_range, ratios
from harness.dl4j_examples import compile_jobs, profiled_flags, run_timed
from harness.flagged import need_of
from harness.training import NETWORKS
from pyd4j.commands.flags import verify_command
from pyd4j.jvm import JvmOptions, examples_jar, java_command
from pyd4j.memory.container import diagnose
from pyd4j.memory.estimate import estimate
from pyd4j.memory.jvm_overhead import LONG_RUN_TERM
from pyd4j.memory.flags import FlagSet, flags

MiB = 1024**2
NODE_LIMIT = "-XX:MaxNodeLimit="
SYNTHETIC = (("mlp", 32, 3000), ("lenet", 32, 1000), ("lstm", 32, 1000))
SUM_MODEL = "quickstart.modeling.feedforward.regression.SumModel"


def run(command: list[str], fs: FlagSet, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as cwd:   # DL4J writes its OOM crash dumps into the job's cwd
        r, hwm = run_timed(command, 2 * fs.container_bytes, fs, timeout, cwd=cwd)
    d = diagnose(r)
    return {"ok": d.kind == "ok", "diagnosis": d.message if d.kind != "ok" else "", "seconds": round(r.seconds, 2),
            "need_bytes": need_of({"peak_rss_bytes": hwm, "cgroup_peak_bytes": r.peak_bytes})}


def model_without_jit(fs: FlagSet) -> int:
    """What the flags hold for the job with the long-run term and the headroom left out."""
    return fs.heap_bytes + fs.sized.offheap_bytes + fs.sized.native_bytes - fs.sized.term_bytes(LONG_RUN_TERM)


def ab(name: str, fs: FlagSet, job: list[str], pairs: int, timeout: float) -> dict:
    capped = verify_command(fs, job)
    capped.insert(1, "-XX:+AlwaysPreTouch")
    limit = next((a for a in capped if a.startswith(NODE_LIMIT)), None)
    if limit is None:
        raise SystemExit(f"{name}: the generated flags carry no {NODE_LIMIT}: nothing to compare")
    default = [a for a in capped if a != limit]
    base = model_without_jit(fs)

    def one(side: str, _pair: int) -> dict:
        r = run(capped if side == "capped" else default, fs, timeout)
        print(f"{name} {side}: need {r['need_bytes'] / MiB:.0f} MiB, {r['seconds']} s {r['diagnosis'][:120]}",
              flush=True)
        return r

    sides = interleave(("capped", "default"), pairs, one)
    row: dict = {"job": name, "pairs": pairs, "node_limit": limit, "container_bytes": fs.container_bytes, "collector": fs.collector,
                 "model_without_jit_bytes": base, "jit_term_bytes": fs.sized.term_bytes(LONG_RUN_TERM), "runs": sides}
    for side, runs in sides.items():
        needs = [r["need_bytes"] for r in runs if r["ok"] and r["need_bytes"]]
        row[side] = {"failed": sum(not r["ok"] for r in runs),
                     "need_median_bytes": int(statistics.median(needs)) if needs else None,
                     "need_max_bytes": max(needs) if needs else None,
                     "above_model_max_mib": round((max(needs) - base) / MiB, 1) if needs else None,
                     "above_model_median_mib": round((statistics.median(needs) - base) / MiB, 1) if needs else None}
    row["speed_capped_over_default"] = median_range(ratios(
        [d["seconds"] if d["ok"] and c["ok"] else None for c, d in zip(sides["capped"], sides["default"])],
        [c["seconds"] for c in sides["capped"]]))
    row["ratio_container_over_capped_need_max"] = (round(fs.container_bytes / row["capped"]["need_max_bytes"], 3)
                                                   if row["capped"]["need_max_bytes"] else None)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", type=Path, help="a deeplearning4j-examples checkout (SumModel); left out: not run")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--synthetic", default=",".join(f"{n}@{b}x{i}" for n, b, i in SYNTHETIC),
                    help="TrainSynthetic runs as NETWORK@BATCHxITERATIONS, comma-separated")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", default=str(RESULTS / "jit_cap.json"))
    ap.add_argument("--merge", action="store_true", help="keep the jobs already in --out that this run does not run")
    args = ap.parse_args()
    rec = Recorder("jit_cap")
    rows: list[dict] = []
    kept = json.loads(Path(args.out).read_text())["jobs"] if args.merge and Path(args.out).exists() else []
    with tempfile.TemporaryDirectory(prefix="pyd4j-jit-cap-") as tmp:
        if args.checkout:
            compile_jobs(args.checkout, [SUM_MODEL], Path(tmp) / "classes")
            row, fs, job, _ = profiled_flags(SUM_MODEL, Path(tmp) / "classes", Path(tmp), args.timeout)
            if fs is None:
                raise SystemExit(f"SumModel: {row['status']}: {row.get('error')}")
            rows.append(ab("SumModel", fs, job, args.pairs, args.timeout))
            write(rec, args, rows, kept)
        for spec in (s for s in args.synthetic.split(",") if s):
            name, rest = spec.split("@")
            batch, iterations = (int(x) for x in rest.split("x"))
            config = NETWORKS / f"{name}.json"
            fs = flags(estimate(config, batch), refuse=False)
            job = java_command(JvmOptions.of(), "org.pyd4j.examples.TrainSynthetic", [str(config), str(batch), str(iterations)],
                               extra_classpath=[examples_jar()])
            rows.append(ab(f"{name}@{batch} x{iterations}", fs, job, args.pairs, args.timeout))
            write(rec, args, rows, kept)
    print(json.dumps(write(rec, args, rows, kept)["summary"], indent=2))
    failed = {r["job"]: {s: r[s]["failed"] for s in ("capped", "default")} for r in rows
              if r["capped"]["failed"] or r["default"]["failed"]}
    if failed:
        raise SystemExit(f"runs failed (per job and side: {failed}); their figures leave them out: see 'runs' in {args.out}")


def write(rec: Recorder, args: argparse.Namespace, rows: list[dict], kept: list[dict]) -> dict:
    """The results so far (written after every job: a long run cut short keeps what it measured), after the
    kept rows of jobs this run does not run."""
    rows = [r for r in kept if r["job"] not in {n["job"] for n in rows}] + rows
    doc = rec.doc
    doc.update({"jobs": rows,
           "summary": {r["job"]: {"above_model_max_mib": {s: r[s]["above_model_max_mib"] for s in ("capped", "default")},
                                  "failed": {s: r[s]["failed"] for s in ("capped", "default")},
                                  "speed_capped_over_default": r["speed_capped_over_default"],
                                  "container_over_capped_need_max": r["ratio_container_over_capped_need_max"]}
                       for r in rows}})
    rec.write(args.out, indent=2)
    return doc


if __name__ == "__main__":
    main()
