"""Do pyd4j's generated JVM flags hold real DL4J training runs inside their container limit, and how close is the estimate?

For each example network (examples/networks) at minibatches 32, 256 and 2048 (`pyd4j flags --verify`'s
run, the batches the machine can hold: a batch whose generated container limit exceeds
`--max-container` is recorded as skipped, with that limit): estimate, generate flags,
train a fixed number of iterations in a child JVM started with exactly those flags (the collector they pin too)
(org.pyd4j.examples.TrainSynthetic; -XX:+AlwaysPreTouch added so the whole heap is resident from the
start, the worst case for RSS) inside a fresh memory cgroup limited to the generated container limit
(pyd4j.memory.container: the kernel OOM-kills the job if the whole budget is too small), and compare:

  off-heap error   predicted ND4J off-heap / measured - 1, where measured = peak of
                   (RSS - committed heap - committed non-heap) minus the same after a batch-1 warm-up
  need             max(peak RSS (VmHWM), the cgroup's peak charged memory)
  budget ratio     generated container limit / need                               (target <= 1.3)
  OOMs             runs that failed under the generated flags and container limit (target 0)

Negative control: each network at its larger batch in a container at half the generated limit, with
flags generated from half the estimate: must fail, and pyd4j must diagnose it as memory exhaustion
(kernel OOM kill at the container limit, or a JavaCPP/heap OutOfMemoryError, whichever comes first).
A job that survives on half flags (its halved heap was never used) is run again with the generated
flags in the same half-size container.

With `--zoo LeNet,SqueezeNet,...` the same is done for models of DL4J's zoo, built by DL4J's code at
the smallest input they build at (the harness's zoo builder, harness/zoo.py); `--networks ""` runs them alone.

Writes benchmarks/results/flags_accuracy.json. Usage: python benchmarks/flags_accuracy.py [--iterations 5]
[--batches 32,256] [--networks mlp,...] [--zoo LeNet,...] [--configs DIR] [--merge]
Needs a writable memory cgroup (root, or a delegated cgroup).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

from harness import RESULTS, Recorder
from harness.flagged import need_of, train
from harness.training import NETWORKS
from harness.zoo import build_model
from pyd4j.memory.estimate import Estimate, estimate
from pyd4j.memory.jvm_overhead import LONG_RUN_TERM
from pyd4j.memory.flags import FlagSet, flags
from pyd4j.units import parse_bytes

BATCHES = (32, 256, 2048)
EXAMPLES = ("mlp", "lenet", "deep_cnn_bn", "lstm", "resnet_graph")
TARGET_RATIO = 1.3
MiB = 1024**2
Network = tuple[str, Path, str, tuple[int, ...]]   # name, configuration, source, batches


def scaled(est: Estimate, factor: float) -> Estimate:
    terms = tuple(replace(t, fixed_bytes=int(t.fixed_bytes * factor), per_sample_bytes=int(t.per_sample_bytes * factor))
                  for t in est.terms)
    return replace(est, terms=terms)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--networks", default=",".join(EXAMPLES))
    ap.add_argument("--zoo", default="", help="models of DL4J's zoo to run too, e.g. LeNet,SqueezeNet,TinyYOLO")
    ap.add_argument("--configs", help="build the zoo models' configurations into this folder (default: a temporary one)")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)),
                    help="minibatches to run (a long run, many --iterations, at the small batches)")
    ap.add_argument("--max-container", default="8g", help="skip runs whose generated container limit is larger")
    ap.add_argument("--max-seconds", type=float, default=900, help="kill a run after this many seconds")
    ap.add_argument("--no-control", action="store_true", help="leave out the negative control")
    ap.add_argument("--out", default=str(RESULTS / "flags_accuracy.json"))
    ap.add_argument("--control-only", action="store_true", help="rerun only the negative control, keep the runs in --out")
    ap.add_argument("--merge", action="store_true", help="replace in --out the rows (and, unless --no-control, the "
                    "controls) of the networks run, keep the others")
    return ap


def zoo_networks(names: list[str], folder: Path, batches: tuple[int, ...], rows: list[dict]) -> list[Network]:
    """The zoo models built into `folder`; a model DL4J does not build is a skipped row."""
    chosen = []
    for name in names:
        folder.mkdir(parents=True, exist_ok=True)
        built = build_model(name, 1, folder, 600)
        if not built["built"]:
            rows.append({"network": name, "source": "deeplearning4j-zoo", "status": "skipped",
                         "skipped": f"not built: {built.get('skipped') or built.get('error', '')[-300:]}"})
            continue
        chosen.append((name, folder / f"{name}.json", f"deeplearning4j-zoo {built['size']}x{built['size']}", batches))
    return chosen


def run_row(network: str, config: Path, source: str, batch: int, est: Estimate, args: argparse.Namespace) -> dict:
    """One run under the generated flags in a cgroup at the generated container limit: predicted against measured."""
    fs = flags(est, refuse=False)
    r = train(fs, config, batch, args.iterations, fs.container_bytes, timeout=args.max_seconds)
    measured_offheap = r.get("peak_native_bytes", 0) - r.get("baseline_native_bytes", 0)
    need = need_of(r)
    row = {
        "network": network, "source": source, "batch": batch, "iterations": args.iterations, "status": r["status"],
        "failure": r["failure"], "diagnosis": r["diagnosis"], "flags": fs.args(), "environment": fs.environment,
        "predicted_offheap_bytes": est.offheap_bytes, "measured_offheap_bytes": measured_offheap,
        "offheap_error": round(est.offheap_bytes / measured_offheap - 1, 3) if measured_offheap > 0 else None,
        "predicted_heap_bytes": fs.heap_bytes, "measured_peak_heap_used_bytes": r.get("peak_heap_used_bytes"),
        "predicted_native_bytes": fs.sized.native_bytes, "collector": fs.collector,
        "predicted_native_without_jit_bytes": fs.sized.native_bytes - fs.sized.term_bytes(LONG_RUN_TERM),
        "measured_native_bytes": (r["peak_rss_bytes"] - fs.heap_bytes - measured_offheap)
        if r.get("peak_rss_bytes") else None,
        "generated_container_bytes": fs.container_bytes, "maxphysicalbytes": fs.maxphysicalbytes,
        "measured_peak_rss_bytes": r.get("peak_rss_bytes"), "cgroup_peak_bytes": r.get("cgroup_peak_bytes"),
        "measured_need_bytes": need,
        "budget_ratio": round(fs.container_bytes / need, 3) if need else None,
        "cgroup_oom_kills": r.get("cgroup_oom_kills"),
        "measured_peak_javacpp_total_bytes": r.get("peak_javacpp_total_bytes"),
        "measured_peak_javacpp_physical_bytes": r.get("peak_physical_bytes"),
        "breakdown": fs.breakdown, "dl4j_report_offheap_bytes": sum(t.bytes_at(batch) for t in est.report_terms),
        "train_seconds": r.get("seconds"), "raw": r,
    }
    print(f"{network:13s} b={batch:5d} {r['status']:6s} off-heap pred {est.offheap_bytes / MiB:8.1f} MiB "
          f"meas {measured_offheap / MiB:8.1f} MiB err {row['offheap_error']}  limit {fs.container_bytes / MiB:.0f} "
          f"MiB need {(need or 0) / MiB:.0f} MiB ratio {row['budget_ratio']}  {r['diagnosis'][:80]}", flush=True)
    return row


def runs(chosen: list[Network], rows: list[dict], args: argparse.Namespace) -> None:
    """Every network at every batch whose generated container limit is within --max-container."""
    max_container = parse_bytes(args.max_container, "--max-container")
    for network, config, source, batches in chosen:
        try:
            base = estimate(config, 1)
        except Exception as err:  # noqa: BLE001 - recorded (a zoo model fit() cannot train); the benchmark goes on
            rows.append({"network": network, "source": source, "status": "skipped", "skipped": f"not estimated: {err}"[:600]})
            print(f"{network:13s} skipped: {rows[-1]['skipped'][:200]}", flush=True)
            continue
        for batch in batches:
            est = base.at_batch(batch)
            fs = flags(est, refuse=False)
            if fs.container_bytes > max_container:
                rows.append({"network": network, "source": source, "batch": batch, "status": "skipped",
                             "skipped": f"generated container limit {fs.container_bytes / MiB:.0f} MiB > --max-container "
                                        f"{max_container / MiB:.0f} MiB", "generated_container_bytes": fs.container_bytes})
                print(f"{network:13s} b={batch:5d} skipped: {rows[-1]['skipped']}", flush=True)
                continue
            rows.append(run_row(network, config, source, batch, est, args))
            Path(args.out + ".partial").write_text(json.dumps({"benchmark": "flags_accuracy", "runs": rows}, indent=2) + "\n")


def negative_controls(chosen: list[Network], rows: list[dict], iterations: int) -> list[dict]:
    """Each network at its larger batch, container at half the generated limit and flags generated from half
    the estimate. It must fail, and the failure must be diagnosed as memory exhaustion."""
    controls = []
    for network, config, _, _ in chosen:
        ran_batches = [x["batch"] for x in rows if x["network"] == network and x["status"] != "skipped"]
        if not ran_batches:
            continue
        batch = max(ran_batches)
        est = estimate(config, batch)
        full = flags(est, refuse=False)
        half = flags(scaled(est, 0.5), refuse=False)
        limit = full.container_bytes // 2
        variants: list[tuple[str, FlagSet]] = [("half flags", half)]
        for variant, fs_run in variants:
            r = train(fs_run, config, batch, iterations, limit, timeout=600)
            controls.append({"network": network, "batch": batch, "fraction": 0.5, "variant": variant,
                             "flags": fs_run.args(), "container_limit_bytes": limit,
                             "generated_container_bytes": full.container_bytes, "status": r["status"],
                             "failure": r["failure"], "reported_as_memory_exhaustion": r["memory_exhausted"],
                             "diagnosis": r["diagnosis"], "error_class": r.get("error_class"), "error": r.get("error"),
                             "raw": r})
            print(f"negative control {network} b={batch} at 0.5x (limit {limit / MiB:.0f} MiB, {variant}): "
                  f"{r['status']} -> {r['failure']}: {r['diagnosis'][:160]}", flush=True)
            if r["status"] == "ok" and variant == "half flags":
                # it survived on half a heap it did not use: keep the generated flags, halve only the container
                variants.append(("generated flags", full))
    return controls


def summarise(rows: list[dict], controls: list[dict]) -> dict:
    def family(x: dict) -> str:   # "examples/networks" or "deeplearning4j-zoo" (without the input size)
        return x.get("source", "examples/networks").split(" ")[0]

    ok = [x for x in rows if x["status"] == "ok"]
    ran = [x for x in rows if x["status"] != "skipped"]
    errors = [abs(x["offheap_error"]) for x in ok if x["offheap_error"] is not None]
    ratios = [x["budget_ratio"] for x in ok if x["budget_ratio"]]
    return {
        "runs": len(ran), "skipped": {f"{x['network']}@{x.get('batch', '-')}": x["skipped"] for x in rows if x["status"] == "skipped"},
        "ooms_under_generated_flags_and_container_limit": sum(1 for x in ran if x["status"] != "ok"),
        "offheap_within_20pct": sum(1 for e in errors if e <= 0.20), "max_abs_offheap_error": max(errors, default=None),
        "median_abs_offheap_error": sorted(errors)[len(errors) // 2] if errors else None,
        "budget_within_1_3x_need": sum(1 for x in ratios if 1 <= x <= TARGET_RATIO),
        "budget_within_1_3x_need_by_source": {
            src: f"{sum(1 for x in ok if family(x) == src and x['budget_ratio'] and 1 <= x['budget_ratio'] <= TARGET_RATIO)} of "
                 f"{sum(1 for x in ok if family(x) == src)}"
            for src in sorted({family(x) for x in ok})},
        # the JVM's own memory (peak RSS - heap - measured ND4J off-heap) against pyd4j's model of it, less the JIT
        # compiler's worst case (which these short runs do not reach)
        "native_errors": {f"{x['network']}@{x['batch']}": round(x["predicted_native_without_jit_bytes"] / x["measured_native_bytes"] - 1, 3)
                          for x in ok if x.get("measured_native_bytes")},
        # a limit below the need as VmHWM counts it (file-backed pages the cgroup may reclaim) that did not OOM
        "budget_below_need": sum(1 for x in ratios if x < 1),
        "max_budget_ratio": max(ratios, default=None), "min_budget_ratio": min(ratios, default=None),
        "negative_controls": len(controls),
        "negative_controls_failed": sum(1 for c in controls if c["status"] != "ok"),
        "negative_controls_reported_as_memory_exhaustion": sum(1 for c in controls if c["reported_as_memory_exhaustion"]),
        "negative_control": {f"{c['network']}@{c['batch']} {c['variant']}": c["failure"] for c in controls},
    }


def main() -> None:
    args = parser().parse_args()
    batches = tuple(sorted({int(b) for b in args.batches.split(",") if b}))
    chosen: list[Network] = [(n, NETWORKS / f"{n}.json", "examples/networks", batches)
                             for n in EXAMPLES if n in args.networks.split(",")]
    rec = Recorder("flags_accuracy")
    rows = json.loads(Path(args.out).read_text())["runs"] if args.control_only else []
    zoo = [n for n in args.zoo.split(",") if n]
    scratch = tempfile.TemporaryDirectory(prefix="pyd4j-flags-zoo-") if zoo and not args.configs else None
    chosen += zoo_networks(zoo, Path(args.configs or (scratch.name if scratch else ".")), batches, rows)
    if not args.control_only:
        runs(chosen, rows, args)
    controls = [] if args.no_control else negative_controls(chosen, rows, args.iterations)
    if args.merge:
        old = json.loads(Path(args.out).read_text())
        ran = {x["network"] for x in rows}
        rows = [x for x in old["runs"] if x["network"] not in ran] + rows
        controls = [c for c in old["negative_control"] if c["network"] not in ran or args.no_control] + controls
    rec.doc.update(summary=summarise(rows, controls), runs=rows, negative_control=controls)
    rec.write(args.out, indent=2)
    Path(args.out + ".partial").unlink(missing_ok=True)
    print(json.dumps(rec.doc["summary"], indent=2))


if __name__ == "__main__":
    main()
