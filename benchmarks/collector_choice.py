"""What the garbage collector costs a DL4J fit() in resident memory and speed: Serial against G1.

    .venv/bin/python benchmarks/collector_choice.py [--networks mlp,lstm] [--zoo SqueezeNet,ResNet50]
        [--configs DIR] [--batch 32] [--iterations 30] [--pairs 3] [--out benchmarks/results/collector_choice.json]

The JVM picks Serial in a container under 1792 MiB (or with fewer than 2 CPUs) and G1 above it, and
`pyd4j flags` pins the one it sized for. Here each network trains under its generated flags (the
harness/flagged.py run: TrainSynthetic, heap pre-touched, in a cgroup at the generated container limit
with room for the other collector) once with `-XX:+UseSerialGC` and once with `-XX:+UseG1GC`, the two
alternating (Serial first in even pairs) `--pairs` times. Per run: the JVM's own resident memory (peak RSS
less the heap and ND4J's off-heap growth: `flags_accuracy.py`'s measured native) and seconds per iteration.
Reports per network the medians, G1 - Serial native as a fraction of the heap (what
`pyd4j.memory.estimate.G1_TABLES_FRACTION` models) and G1/Serial speed with the pairs' spread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from harness import RESULTS, Recorder, interleave, ratios
from harness.flagged import train
from harness.training import NETWORKS
from harness.zoo import build_model
from pyd4j.memory.estimate import estimate
from pyd4j.memory.jvm_overhead import G1_TABLES_FRACTION
from pyd4j.memory.flags import flags

MiB = 1024**2
COLLECTORS = {"Serial": "-XX:+UseSerialGC", "G1": "-XX:+UseG1GC"}


def one(config: Path, batch: int, iterations: int, gc: str) -> dict:
    est = estimate(config, batch)
    fs = flags(est, refuse=False)
    unpinned = replace(fs, flags=tuple(f for f in fs.flags if f.name != "collector"))
    limit = fs.container_bytes + int(G1_TABLES_FRACTION * 4 * fs.heap_bytes) + 64 * MiB   # room for either collector
    r = train(unpinned, config, batch, iterations, limit, extra_jvm=(COLLECTORS[gc],))
    if r["status"] != "ok":
        raise RuntimeError(f"{config.stem}@{batch} under {gc}: {r['status']}: {r.get('diagnosis') or r.get('error')}")
    offheap = r["peak_native_bytes"] - r["baseline_native_bytes"]
    return {"native_bytes": r["peak_rss_bytes"] - fs.heap_bytes - offheap, "heap_bytes": fs.heap_bytes,
            "seconds_per_iteration": r["seconds"] / iterations, "pinned_by_flags": fs.collector}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--networks", default="mlp,lstm")
    ap.add_argument("--zoo", default="SqueezeNet,ResNet50")
    ap.add_argument("--configs", help="build the zoo models' configurations into this folder (default: a temporary one)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "collector_choice.json"))
    args = ap.parse_args()
    if args.pairs < 1 or args.iterations < 1 or args.batch < 1:
        sys.exit("--pairs, --iterations and --batch must be at least 1")

    scratch = tempfile.TemporaryDirectory(prefix="pyd4j-gc-zoo-")
    folder = Path(args.configs or scratch.name)
    configs = [(n, NETWORKS / f"{n}.json") for n in args.networks.split(",") if n]
    for name in (n for n in args.zoo.split(",") if n):
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / f"{name}.json").exists() and not build_model(name, 1, folder, 600)["built"]:
            sys.exit(f"{name}: DL4J's zoo did not build it")
        configs.append((name, folder / f"{name}.json"))

    rec = Recorder("collector_choice")
    rows = []
    for name, config in configs:
        def run(gc: str, _pair: int, name: str = name, config: Path = config) -> dict:
            r = one(config, args.batch, args.iterations, gc)
            print(f"{name}@{args.batch} {gc:6s} native {r['native_bytes'] / MiB:6.1f} MiB "
                  f"{r['seconds_per_iteration'] * 1000:7.1f} ms/it", flush=True)
            return r

        runs = interleave(("Serial", "G1"), args.pairs, run)
        heap = runs["G1"][0]["heap_bytes"]
        native = {gc: statistics.median(r["native_bytes"] for r in rs) for gc, rs in runs.items()}
        speed = ratios([s["seconds_per_iteration"] for s in runs["Serial"]], [g["seconds_per_iteration"] for g in runs["G1"]])
        rows.append({"network": name, "batch": args.batch, "heap_bytes": heap, "pinned_by_flags": runs["G1"][0]["pinned_by_flags"],
                     "native_median_bytes": native,
                     "g1_extra_over_heap": round((native["G1"] - native["Serial"]) / heap, 4),
                     "g1_speed_over_serial_median": round(statistics.median(speed), 3),
                     "g1_speed_over_serial_pairs": [round(x, 3) for x in speed], "runs": runs})
        print(f"{name}: G1 - Serial = {rows[-1]['g1_extra_over_heap']:.1%} of the {heap // MiB} MiB heap; "
              f"G1/Serial speed {rows[-1]['g1_speed_over_serial_median']} {rows[-1]['g1_speed_over_serial_pairs']}", flush=True)
    extra = [r["g1_extra_over_heap"] for r in rows]
    doc = rec.doc
    doc.update({"meta": {"iterations": args.iterations, "pairs": args.pairs, "model_fraction": G1_TABLES_FRACTION},
           "summary": {"g1_extra_over_heap": {r["network"]: r["g1_extra_over_heap"] for r in rows},
                       "g1_extra_over_heap_max": max(extra), "model_fraction": G1_TABLES_FRACTION,
                       "g1_speed_over_serial": {r["network"]: r["g1_speed_over_serial_median"] for r in rows}},
           "runs": rows})
    rec.write(args.out, indent=2)
    print(json.dumps(doc["summary"], indent=2))


if __name__ == "__main__":
    main()
