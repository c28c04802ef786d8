"""Speed of planned training against DL4J's own fit() on models of DL4J's zoo, interleaved in one JVM.

    .venv/bin/python benchmarks/zoo_speed.py [--models LeNet,AlexNet,VGG16] [--batch 16] [--iterations 8]
        [--probe-batch 2] [--configs DIR] [--out benchmarks/results/zoo_speed.json]

Each model is built by DL4J's code at the smallest input it builds at (the harness's
zoo builder, `org.pyd4j.fixtures.ZooNets`, probed at `--probe-batch`; kept in `--configs` and reused when
already there), planned at `--batch` under liveness and under the smallest plan (harness/zoo.py's
`peak_plans`), and trained by `org.pyd4j.examples.TrainInterleaved`: two copies of the network (same
seed, same batches) in one JVM, one with fit(), one under the plan, iterations alternating (fit, planned,
planned, fit, ...), so load on a shared machine falls on both alike. Reported per plan: the ratio of the
sums of their iteration times after 2 warm-up iterations each (speed planned / fit()), the median of the
per-pair ratios and their range. Targets (issue #17): liveness >= 0.95, smallest plan >= 0.75.

With `--separate N`, each plan is also measured in separate JVMs, N rounds of a fit()-only and a
planned-only run alternating (harness/training.py's `separate`): in one JVM a planned iteration that follows
a fit() iteration runs slower than one that follows a planned iteration (ResNet50 b16: 1.6-1.7 s
against 1.3-1.5 s), a cost of sharing the process that a user training with one of them does not pay.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from harness import RESULTS, Recorder
from harness.training import interleaved, separate
from harness.zoo import build_model, peak_plans

TARGETS = {"liveness": 0.95, "smallest": 0.75}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="LeNet,AlexNet,VGG16")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=8, help="iterations of each side (2 are warm-up)")
    ap.add_argument("--probe-batch", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to build a model")
    ap.add_argument("--separate", type=int, default=0, help="also N rounds of fit() and planned in separate JVMs")
    ap.add_argument("--configs", help="folder of built models, reused (default: a temporary one)")
    ap.add_argument("--out", default=str(RESULTS / "zoo_speed.json"))
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rec = Recorder("zoo_speed")
    doc = rec.doc
    doc.update(meta={"batch": args.batch, "iterations": args.iterations, "warmup": 2, "omp_threads": 1,
                     "targets": TARGETS}, models={})
    with tempfile.TemporaryDirectory(prefix="pyd4j-zoo-speed-") as tmp:
        folder = Path(args.configs or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for model in args.models.split(","):
            row: dict = {}
            try:
                if not (folder / f"{model}.info.json").exists():
                    built = build_model(model, args.probe_batch, folder, args.timeout)
                    if not built["built"]:
                        raise RuntimeError(built.get("skipped") or built.get("error"))
                files, _ = peak_plans(model, args.batch, folder)
                config = folder / f"{model}.json"
                for policy, path in files.items():
                    r = interleaved(config, args.batch, args.iterations, {"path": path}, folder)
                    pairs = [f / p for f, p in zip(r["fit_s"][r["warmup"]:], r["planned_s"][r["warmup"]:])]
                    row[policy] = {"speed_over_fit": round(r["speed_over_fit"], 3),
                                   "pairwise_median": round(r["pairwise_median"], 3),
                                   "pair_range": [round(min(pairs), 3), round(max(pairs), 3)],
                                   "fit_s": r["fit_s"], "planned_s": r["planned_s"],
                                   "trainer_overhead_share": r["trainer_overhead_share"],
                                   "meets_target": r["speed_over_fit"] >= TARGETS[policy]}
                    print(f"{model} b{args.batch} {policy}: {r['speed_over_fit']:.3f} of fit() "
                          f"(pairs {row[policy]['pair_range']})", flush=True)
                    if args.separate:
                        s = separate(config, args.batch, args.iterations, {"path": path}, folder, args.separate)
                        row[policy]["separate_jvms"] = {**s, "speed_over_fit": round(s["speed_over_fit"], 3),
                                                        "run_ratio_range": [round(x, 3) for x in s["run_ratio_range"]],
                                                        "meets_target": s["speed_over_fit"] >= TARGETS[policy]}
                        print(f"{model} b{args.batch} {policy}, separate JVMs: {s['speed_over_fit']:.3f} of fit() "
                              f"(runs {row[policy]['separate_jvms']['run_ratio_range']})", flush=True)
            except Exception as err:  # noqa: BLE001 - recorded; the benchmark goes on
                row["error"] = f"{type(err).__name__}: {err}"[:800]
                print(f"{model}: {row['error']}", flush=True)
            doc["models"][model] = row
            rec.write(args.out)


if __name__ == "__main__":
    main()
