"""How close is pyd4j's one DL4J memory model (pyd4j.dl4j.fitmem, what `pyd4j estimate` says) to DL4J's own fit()?

    .venv/bin/python benchmarks/memory_model.py [--networks mlp,lenet,...] [--zoo LeNet,AlexNet,...]
        [--iterations 3] [--long N] [--configs DIR] [--out benchmarks/results/memory_model.json]

For each network -- the example networks (examples/networks) and models of DL4J's zoo built by
DL4J's code at the smallest input they build at (the harness's zoo builder, harness/zoo.py) -- at two
small batches: the peak of DL4J's unchanged `fit()` above the idle JVM (the harness's
measuring job, harness/training.py, with the agent taking no live points, whose full
collections would free garbage fit() keeps: TrainSynthetic warms up at batch 1, then samples its
memory every 2 ms while `fit()` trains `--iterations` iterations; one OpenMP thread: the
native peak, RSS less the JVM's committed heap and non-heap, with the RSS beside it), and
`pyd4j estimate`'s off-heap prediction at the same batch: the fit() terms of `pyd4j.dl4j.fitmem`
plus the data pipeline. The job runs in the environment the estimate assumes (`environment` of each
row: glibc's mmap threshold fixed, as pyd4j's flags set it). Reports, per run, predicted / measured and the model's terms, DL4J's
NetworkMemoryReport total beside it (the cross-check, not used), and the worst ratio. Target:
within +-15%. Each run's row is written as soon as it is measured (an interrupted run keeps them).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from harness import RESULTS, Recorder
from harness.training import EXTRA_ENV, NETWORKS
from harness.training import run as train_run
from harness.zoo import build_model

EXAMPLES = {"mlp": (64, 256), "lenet": (16, 64), "deep_cnn_bn": (8, 32), "resnet_graph": (8, 16),
            "lstm": (8, 32), "policy_value": (16, 64), "two_input": (16, 64)}
ZOO = {"LeNet": (4, 16), "SqueezeNet": (2, 4), "AlexNet": (2, 4), "VGG16": (2, 4), "UNet": (1, 2), "ResNet50": (1, 2),
       "VGG19": (2, 4), "Darknet19": (1, 2), "TinyYOLO": (1, 2), "YOLO2": (1, 2), "Xception": (1, 2),
       "FaceNetNN4Small2": (1, 2), "InceptionResNetV1": (1, 2), "TextGenerationLSTM": (4, 16)}
TARGET = 0.15
MiB = 1024**2


def measure(name: str, batch: int, iterations: int, folder: Path, environment: dict[str, str]) -> dict:
    """fit()'s peak above the idle JVM, in the environment the estimate assumes (glibc's malloc setting,
    which pyd4j's flags set): native (RSS less the JVM's committed heap and non-heap, which the model's
    off-heap figure is compared with: JIT code and metaspace grow in a long run and are the JVM's,
    `pyd4j estimate`'s jvm_native term), the whole RSS, and the workspaces fit() learned."""
    r = train_run(folder / f"{name}.json", batch, iterations, None, folder, extra_env=environment or None, quiet=True)
    return {"measured_bytes": int(r["native_above_idle_bytes"]), "measured_rss_bytes": int(r["peak_above_idle_bytes"]),
            "workspaces": r["workspaces"]}


def predict(config: Path, batch: int) -> dict:
    from pyd4j.memory.estimate import estimate

    e = estimate(config, batch)
    fit = {t.name: t.bytes_at(batch) for t in e.terms if t.region == "offheap"}
    return {"predicted_bytes": e.offheap_bytes, "terms": fit, "environment": e.environment,
            "dl4j_report_bytes": sum(t.bytes_at(batch) for t in e.report_terms)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--networks", default=",".join(EXAMPLES))
    ap.add_argument("--zoo", default=",".join(ZOO))
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--long", type=int, default=0, metavar="N",
                    help="also measure each run's peak over N iterations (same job, same heap): what a long job holds")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to build a zoo model")
    ap.add_argument("--out", default=str(RESULTS / "memory_model.json"))
    ap.add_argument("--configs", help="keep the built zoo models' configurations in this folder (default: a "
                    "temporary one), so that --repredict can recompute their rows too")
    ap.add_argument("--repredict", action="store_true", help="recompute the predictions of the example networks' rows "
                    "in --out with the current model, keeping what was measured (the measurement does not depend on it)")
    args = ap.parse_args()
    if args.repredict:
        repredict(Path(args.out), Path(args.configs) if args.configs else None)
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rec = Recorder("memory_model")
    doc = rec.doc
    # PYD4J_BENCH_ENV: extra environment of the measuring job (e.g. a malloc setting under test)
    doc.update(meta={"iterations": args.iterations, "omp_threads": 1, "target": TARGET, "job_environment": EXTRA_ENV},
               runs=[])

    def record(row: dict) -> None:
        doc["runs"].append(row)
        doc["summary"] = summary(doc["runs"])
        rec.write(args.out)
        print(f"{row['network']:14s} b={row['batch']:4d} predicted {row.get('predicted_bytes', 0) / MiB:8.1f} MiB "
              f"measured {row.get('measured_bytes', 0) / MiB:8.1f} MiB ratio {row.get('ratio')} "
              + (f"long ({row['long_iterations']} it) {row['measured_long_bytes'] / MiB:8.1f} MiB ratio {row['ratio_long']} "
                 if row.get("ratio_long") else "")
              + f"{row.get('error', '')[:200]}", flush=True)

    def run(name: str, config: Path, batches: tuple[int, ...], folder: Path, source: str) -> None:
        for batch in batches:
            row: dict = {"network": name, "source": source, "batch": batch}
            try:
                row.update(predict(config, batch))
                t = time.monotonic()
                row.update(measure(name, batch, args.iterations, folder, row["environment"]))
                row["seconds"] = round(time.monotonic() - t, 1)
                row["ratio"] = round(row["predicted_bytes"] / row["measured_bytes"], 3)
                row["dl4j_report_over_measured"] = round(row["dl4j_report_bytes"] / row["measured_bytes"], 3)
                if args.long:
                    t = time.monotonic()
                    row["long_iterations"] = args.long
                    long = measure(name, batch, args.long, folder, row["environment"])
                    row["measured_long_bytes"] = long["measured_bytes"]
                    row["measured_long_rss_bytes"] = long["measured_rss_bytes"]
                    row["long_seconds"] = round(time.monotonic() - t, 1)
                    row["ratio_long"] = round(row["predicted_bytes"] / row["measured_long_bytes"], 3)
            except Exception as err:  # noqa: BLE001 - recorded; the benchmark goes on
                row["error"] = f"{type(err).__name__}: {err}"[:800]
            record(row)

    for name in [n for n in args.networks.split(",") if n]:
        run(name, NETWORKS / f"{name}.json", EXAMPLES[name], NETWORKS, "examples/networks")

    with tempfile.TemporaryDirectory(prefix="pyd4j-memory-model-") as tmp:
        folder = Path(args.configs or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for name in [n for n in args.zoo.split(",") if n]:
            built = build_model(name, ZOO[name][0], folder, args.timeout)
            if not built["built"]:
                record({"network": name, "source": "deeplearning4j-zoo", "batch": 0,
                        "error": built.get("skipped") or built.get("error", "not built")})
                continue
            run(name, folder / f"{name}.json", ZOO[name], folder, f"deeplearning4j-zoo {built['size']}x{built['size']}")
    print(json.dumps(doc.get("summary"), indent=1))


def summary(runs: list[dict]) -> dict:
    """How many runs the model predicts within the target, over the short and (where measured) the long run."""
    out: dict = {"runs": len(runs)}
    for key, suffix in (("ratio", ""), ("ratio_long", "_long")):
        ok = [r for r in runs if r.get(key)]
        if key == "ratio" or ok:
            out.update({f"measured{suffix}": len(ok),
                        f"within_15pct{suffix}": sum(1 for r in ok if abs(r[key] - 1) <= TARGET),
                        f"worst_ratio{suffix}": max((r[key] for r in ok), key=lambda x: abs(x - 1), default=None),
                        f"misses{suffix}": {f"{r['network']}@{r['batch']}": r[key] for r in ok if abs(r[key] - 1) > TARGET}})
    return out


def repredict(out: Path, configs: Path | None) -> None:
    rec = Recorder.amending(out)
    doc = rec.doc
    for row in doc["runs"]:
        if not row.get("measured_bytes"):
            continue
        if row.get("source") == "examples/networks":
            config = NETWORKS / f"{row['network']}.json"
        elif configs is not None and (configs / f"{row['network']}.json").exists():
            config = configs / f"{row['network']}.json"
        else:
            print(f"{row['network']:14s} b={row['batch']:4d} kept: its configuration is not in --configs", flush=True)
            continue
        predicted = predict(config, row["batch"])
        if predicted["environment"] != row.get("environment", {}):
            print(f"{row['network']:14s} b={row['batch']:4d} kept: measured in the environment {row.get('environment', {})}, "
                  f"the model now assumes {predicted['environment']}: measure it again", flush=True)
            continue
        row.update(predicted)
        row["ratio"] = round(row["predicted_bytes"] / row["measured_bytes"], 3)
        if row.get("measured_long_bytes"):
            row["ratio_long"] = round(row["predicted_bytes"] / row["measured_long_bytes"], 3)
        print(f"{row['network']:14s} b={row['batch']:4d} predicted {row['predicted_bytes'] / MiB:8.1f} MiB "
              f"measured {row['measured_bytes'] / MiB:8.1f} MiB ratio {row['ratio']}", flush=True)
    doc["summary"].update(summary(doc["runs"]))
    doc["meta"]["repredicted"] = "predictions recomputed with the final model after the measurements"
    rec.write(out)
    print(json.dumps(doc["summary"], indent=1))


if __name__ == "__main__":
    main()
