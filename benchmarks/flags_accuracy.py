"""Do pyd4j's generated JVM flags hold real DL4J training runs, and how close is the estimate?

For each example network (examples/networks) at two minibatch sizes: estimate, generate flags,
train a fixed number of iterations in a child JVM started with exactly those flags
(org.pyd4j.examples.TrainSynthetic; -XX:+AlwaysPreTouch added so the whole heap is resident from the
start, the worst case for RSS), sample real peaks, and compare:

  off-heap error   predicted ND4J off-heap / measured - 1, where measured = peak of
                   (RSS - committed heap - committed non-heap) minus the same after a batch-1 warm-up
  budget ratio     generated container limit / measured peak RSS (VmHWM)   (target <= 1.5)
  OOMs             runs that failed with the generated flags               (target 0)

Negative control: deep_cnn_bn at its larger batch with flags generated from half the estimate must
fail, and pyd4j must classify the failure as memory exhaustion.

Writes benchmarks/results/flags_accuracy.json. Usage: python benchmarks/flags_accuracy.py [--iterations 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pyd4j.jvm import JvmOptions, examples_jar, java_command  # noqa: E402
from pyd4j.jvm.errors import JavaCppOutOfMemoryError, python_class_for  # noqa: E402
from pyd4j.memory.estimate import Estimate, estimate  # noqa: E402
from pyd4j.memory.flags import FlagSet, flags  # noqa: E402

NETWORKS = ROOT / "examples" / "networks"
RUNS = [("mlp", (256, 1024)), ("lenet", (64, 256)), ("deep_cnn_bn", (32, 128)), ("lstm", (32, 128)),
        ("resnet_graph", (16, 64))]
MiB = 1024**2


def options_for(fs: FlagSet) -> JvmOptions:
    return JvmOptions.of(heap_initial=fs.heap_bytes, heap_max=fs.heap_bytes, max_direct_memory=fs.max_direct_bytes,
                         javacpp_maxbytes=fs.maxbytes, javacpp_maxphysicalbytes=fs.maxphysicalbytes,
                         extra=["-XX:+AlwaysPreTouch"])


def train(fs: FlagSet, network: str, batch: int, iterations: int) -> dict:
    cmd = java_command(options_for(fs), "org.pyd4j.examples.TrainSynthetic",
                       [str(NETWORKS / f"{network}.json"), str(batch), str(iterations)], extra_classpath=[examples_jar()])
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    line = next((l for l in reversed(proc.stdout.splitlines()) if l.startswith("{")), None)
    result = json.loads(line) if line else {"status": "crashed", "error_class": "", "error": proc.stderr[-500:]}
    result["exit_code"] = proc.returncode
    result["wall_seconds"] = round(time.time() - t0, 1)
    return result


def classify(result: dict) -> str:
    """pyd4j's reading of a failed run: the Python exception class the Java error maps to."""
    if result.get("status") == "ok":
        return "ok"
    chain = [result.get("error_class") or "", "java.lang.OutOfMemoryError" if "OutOfMemoryError" in (result.get("error_class") or "") else ""]
    cls = python_class_for([c for c in chain if c], result.get("error") or "")
    return cls.__name__


def scaled(est: Estimate, factor: float) -> Estimate:
    terms = tuple(replace(t, fixed_bytes=int(t.fixed_bytes * factor), per_sample_bytes=int(t.per_sample_bytes * factor))
                  for t in est.terms)
    return replace(est, terms=terms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "flags_accuracy.json"))
    parser.add_argument("--control-only", action="store_true", help="rerun only the negative control, keep the runs in --out")
    args = parser.parse_args()
    rows = json.loads(Path(args.out).read_text())["runs"] if args.control_only else []
    for network, batches in ([] if args.control_only else RUNS):
        base = estimate(NETWORKS / f"{network}.json", 1)
        for batch in batches:
            est = base.at_batch(batch)
            fs = flags(est, refuse=False)
            r = train(fs, network, batch, args.iterations)
            measured_offheap = r.get("peak_native_bytes", 0) - r.get("baseline_native_bytes", 0)
            row = {
                "network": network, "batch": batch, "iterations": args.iterations, "status": r["status"],
                "failure": classify(r), "flags": fs.args(),
                "predicted_offheap_bytes": est.offheap_bytes, "measured_offheap_bytes": measured_offheap,
                "offheap_error": round(est.offheap_bytes / measured_offheap - 1, 3) if measured_offheap > 0 else None,
                "predicted_heap_bytes": fs.heap_bytes, "measured_peak_heap_used_bytes": r.get("peak_heap_used_bytes"),
                "generated_container_bytes": fs.container_bytes, "maxphysicalbytes": fs.maxphysicalbytes,
                "measured_peak_rss_bytes": r.get("peak_rss_bytes"),
                "budget_ratio": round(fs.container_bytes / r["peak_rss_bytes"], 3) if r.get("peak_rss_bytes") else None,
                "measured_peak_javacpp_total_bytes": r.get("peak_javacpp_total_bytes"),
                "measured_peak_javacpp_physical_bytes": r.get("peak_physical_bytes"),
                "breakdown": est.breakdown(), "train_seconds": r.get("seconds"), "raw": r,
            }
            rows.append(row)
            print(f"{network:13s} b={batch:5d} {r['status']:6s} off-heap pred {est.offheap_bytes / MiB:8.1f} MiB "
                  f"meas {measured_offheap / MiB:8.1f} MiB err {row['offheap_error']}  budget/RSS {row['budget_ratio']}",
                  flush=True)

    # negative control: flags from a fraction of the estimate. JavaCPP answers RSS over maxphysicalbytes
    # with System.gc() and retries, and ND4J frees buffers whose Java wrappers are collected, so
    # a run may survive a too-small limit by collecting harder; we record each fraction.
    network, batch = "deep_cnn_bn", 128
    controls = []
    for factor in (0.5, 0.3):
        small = scaled(estimate(NETWORKS / f"{network}.json", batch), factor)
        fs_small = flags(small, refuse=False)
        r = train(fs_small, network, batch, args.iterations)
        failure = classify(r)
        controls.append({"network": network, "batch": batch, "fraction_of_estimate": factor, "flags": fs_small.args(),
                         "status": r["status"], "failure": failure, "error_class": r.get("error_class"),
                         "error": r.get("error"),
                         "reported_as_memory_exhaustion": failure == JavaCppOutOfMemoryError.__name__,
                         "fix": "raise -Dorg.bytedeco.javacpp.maxphysicalbytes (and the container limit) to the "
                                "generated value" if failure == JavaCppOutOfMemoryError.__name__ else None,
                         "raw": r})
        print(f"negative control {network} b={batch} at {factor:g} x the estimate: {r['status']} -> {failure}: "
              f"{(r.get('error') or '')[:160]}", flush=True)
    control = controls

    ok = [x for x in rows if x["status"] == "ok"]
    errors = [abs(x["offheap_error"]) for x in ok if x["offheap_error"] is not None]
    summary = {
        "runs": len(rows), "ooms_with_generated_flags": sum(1 for x in rows if x["status"] != "ok"),
        "offheap_within_20pct": sum(1 for e in errors if e <= 0.20), "max_abs_offheap_error": max(errors, default=None),
        "median_abs_offheap_error": sorted(errors)[len(errors) // 2] if errors else None,
        "max_budget_ratio": max((x["budget_ratio"] for x in ok if x["budget_ratio"]), default=None),
        "negative_control": {str(c["fraction_of_estimate"]): c["failure"] for c in control},
    }
    doc = {"benchmark": "flags_accuracy", "summary": summary, "runs": rows, "negative_control": control}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
