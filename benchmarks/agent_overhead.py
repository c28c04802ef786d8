"""Agent overhead: training iterations/s of the LeNet example job with and without the profiling
agent, alternating in one run (same machine, same load), at a 100 ms sampling interval, with the
agent's defaults (no agent option but the interval and the output file, as `pyd4j profile` starts it):
allocation call sites sampled (every 256 KiB allocated on average, adapting to at most ~100 stacks/s),
off-heap bytes held read every sample, and live-set inspections (a full collection plus a class
histogram) scheduled by what the leak verdict needs: six as training starts (their pauses within 20%
of that stretch), again at that pace while held memory rises, otherwise every 5 s within 0.5% of the
run.

Speed is what the job itself measures around its fit() calls (JOB_PEAKS line), so JVM and ND4J
start-up do not count. Each pair runs back to back, so its ratio cancels slow drifts in machine load;
the spread of those ratios is the noise. Writes benchmarks/results/agent_overhead.json.

    .venv/bin/python benchmarks/agent_overhead.py [--pairs 6] [--iterations 300] [--batch 32] [--out NAME.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile
from pathlib import Path

from harness import RESULTS, Recorder, order
from pyd4j.jvm import classpath, examples_jar, find_java
from pyd4j.profile.launch import agent_option


def run_once(with_agent: bool, iterations: int, batch: int, interval_ms: int) -> dict:
    cp = os.pathsep.join([examples_jar(), *classpath()[1:]])
    with tempfile.TemporaryDirectory() as tmp:
        agent = [agent_option(interval_ms, out=Path(tmp) / "t.jsonl")] if with_agent else []
        cmd = [str(find_java().java), "-Xmx1g", *agent, "-cp", cp, "org.pyd4j.examples.TrainLeNetSynthetic",
               str(iterations), str(batch), "2"]
        # One OpenMP thread: on a small shared machine ND4J's spinning OpenMP workers make single
        # runs swing by 10x, which would drown a few-percent difference.
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=True, env=env).stdout
        done = resource.getrusage(resource.RUSAGE_CHILDREN)
        # the whole JVM's CPU time (start-up included, the same work in both modes): less sensitive to
        # other processes' load than wall time
        cpu_s = (done.ru_utime - used.ru_utime) + (done.ru_stime - used.ru_stime)
        lines = (Path(tmp) / "t.jsonl").read_text().splitlines() if with_agent else []
        events = [json.loads(line) for line in lines if line.strip()]
        samples = sum(1 for e in events if e.get("type") == "sample")
        end = next((e for e in events if e.get("type") == "end"), {})
        live = [e for e in events if e.get("type") == "live"]
        sites = [e for e in events if e.get("type") == "sites"]
    peaks = json.loads(next(line for line in out.splitlines() if line.startswith("JOB_PEAKS ")).split(" ", 1)[1])
    return {"agent": with_agent, "iterations_per_s": peaks["iterations"] / peaks["seconds"], "seconds": peaks["seconds"],
            "jvm_cpu_s": cpu_s,
            "samples": samples, "sampler_cpu_s": end.get("sampler_cpu_ns", 0) / 1e9 if end else None,
            "process_cpu_s": end.get("process_cpu_ns", 0) / 1e9 if end else None,
            "live_points": len(live), "live_triggers": sorted({str(e.get("trigger")) for e in live}),
            "inspection_pause_s": sum(e.get("pause_ms") or 0 for e in live) / 1000,
            "call_sites": max((e.get("site_count", 0) for e in sites), default=0),
            "stacks_sampled": sum(s.get("samples", 0) for s in (sites[-1]["sites"] if sites else [])),
            "load_avg_1m": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=300)  # long enough for JIT warm-up and several inspections
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--interval", type=int, default=100)
    parser.add_argument("--out", default="agent_overhead.json", help="file name under benchmarks/results")
    args = parser.parse_args()
    rec = Recorder("agent_overhead")
    runs = []
    for i in range(args.pairs):
        for with_agent in order((False, True), i):  # alternate to cancel drifts in load
            runs.append(run_once(with_agent, args.iterations, args.batch, args.interval))
            print(runs[-1], flush=True)
    # Each pair ran back to back, so its ratio cancels slow drifts in machine load.
    paired = [(a if a["agent"] else b)["iterations_per_s"] / (b if a["agent"] else a)["iterations_per_s"]
              for a, b in zip(runs[0::2], runs[1::2])]
    base = statistics.median(r["iterations_per_s"] for r in runs if not r["agent"])
    agent = statistics.median(r["iterations_per_s"] for r in runs if r["agent"])
    paired_cpu = [(a if a["agent"] else b)["jvm_cpu_s"] / (b if a["agent"] else a)["jvm_cpu_s"]
                  for a, b in zip(runs[0::2], runs[1::2])]
    cpu_share = statistics.median(r["sampler_cpu_s"] / r["process_cpu_s"] for r in runs if r["agent"] and r["process_cpu_s"])
    pause_share = statistics.median(r["inspection_pause_s"] / r["seconds"] for r in runs if r["agent"])
    median_ratio = statistics.median(paired)
    result = rec.doc
    result.update({
        "job": "org.pyd4j.examples.TrainLeNetSynthetic",
        "iterations": args.iterations, "batch": args.batch, "interval_ms": args.interval, "pairs": args.pairs,
        "baseline_iterations_per_s": base, "agent_iterations_per_s": agent,
        "ratio": agent / base, "slowdown_percent": (1 - agent / base) * 100,
        "paired_ratios": paired, "median_paired_ratio": median_ratio,
        "paired_ratio_spread": [min(paired), max(paired)],
        # CPU time of the whole JVM with / without the agent, per pair (start-up included)
        "paired_cpu_ratios": paired_cpu, "median_paired_cpu_ratio": statistics.median(paired_cpu),
        "median_paired_slowdown_percent": (1 - median_ratio) * 100,
        "target_slowdown_percent": 3.0, "meets_target": (1 - median_ratio) * 100 <= 3.0,
        "agent_options": "defaults", "sites": True,
        "live_points_median": statistics.median(r["live_points"] for r in runs if r["agent"]),
        # Load-independent: the sampler thread's CPU time over the whole process's CPU time, and the
        # live-set inspections' pauses over the training time.
        "sampler_cpu_share": cpu_share, "inspection_pause_share": pause_share, "runs": runs,
        "java": find_java().version})
    out = rec.write(RESULTS / args.out, indent=2)
    print(f"agent/baseline iterations/s = {result['ratio']:.3f} ({result['slowdown_percent']:+.1f}% slowdown; "
          f"median paired ratio {median_ratio:.3f}, pairs {min(paired):.3f}-{max(paired):.3f}; "
          f"CPU ratio {statistics.median(paired_cpu):.3f}); "
          f"sampler CPU share {cpu_share:.2%}, inspection pauses {pause_share:.2%} of training -> {out}")


if __name__ == "__main__":
    main()
