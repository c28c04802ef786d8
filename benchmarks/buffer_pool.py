"""The planned trainer's buffer pool: peak memory and speed with it and without it, in one run.

    .venv/bin/python benchmarks/buffer_pool.py [--zoo ResNet50,AlexNet --configs DIR] [--zoo-batch 16]
        [--networks deep_cnn_bn:32,resnet_graph:16] [--policies liveness] [--iterations 8]
        [--rounds 2] [--out benchmarks/results/buffer_pool.json]

Why the pool: with glibc's mmap threshold fixed, every array the trainer closes returns its pages to
the system and the next array of that size faults fresh pages in; DL4J's fit() takes its arrays from
workspaces. `org.pyd4j.train.BufferPool` keeps released buffers for the next array of the same length,
within the replay's own peak out of workspaces. Each network and plan is trained by the measuring job
of the harness (harness/training.py: TrainSynthetic under the agent route, heap fixed and pre-touched,
one OpenMP thread) with the pool on and with `-Dpyd4j.train.pool=false`, runs alternating (on, off,
off, on, ...), `--rounds` of each: the peak above the idle JVM and iterations per second (after the
warm-up), medians, and the ratios on / off. Zoo models are built by the harness's
zoo builder (harness/zoo.py) into `--configs` (reused when there). Plans that recompute or slice a step (the smallest plan)
run without the pool whatever the option says: measured here, it raised their peaks by 2-5%.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from harness import RESULTS, Recorder, interleave, ratios
from harness.training import NETWORKS, median, run, write_plan
from harness.zoo import build_model

POOL_OFF = {"JAVA_TOOL_OPTIONS": "-Dpyd4j.train.pool=false"}


def measure(config: Path, batch: int, policy: str, folder: Path, iterations: int, rounds: int) -> dict:
    name = config.stem
    plan = write_plan(config, batch, policy, folder)

    def one(side: str, _round: int) -> dict:
        out = run(config, batch, iterations, plan, folder, None if side == "on" else POOL_OFF, quiet=True)
        trainer = out.get("trainer") or {}
        print(f"{name} b{batch} {policy} pool {side}: peak {out['peak_above_idle_bytes'] / 2**20:.1f} MiB, "
              f"{out['iterations_per_s'] or 0:.3f} it/s", flush=True)
        return {"peak_above_idle_bytes": out["peak_above_idle_bytes"], "iterations_per_s": out["iterations_per_s"],
                "pooled_reused_bytes": trainer.get("pooled_reused_bytes"),
                "stale_releases": trainer.get("stale_releases")}

    runs = interleave(("on", "off"), rounds, one)
    peak_on, peak_off = (median(runs[side], "peak_above_idle_bytes") for side in ("on", "off"))
    speed_on, speed_off = (median(runs[side], "iterations_per_s") for side in ("on", "off"))
    pairs = ratios([a["iterations_per_s"] for a in runs["on"]], [b["iterations_per_s"] for b in runs["off"]])
    return {"batch": batch, "policy": policy, "predicted_peak_bytes": plan["predicted_peak_bytes"],
            "peak_on_over_off": round(peak_on / peak_off, 4) if peak_on and peak_off else None,
            "speed_on_over_off": round(speed_on / speed_off, 4) if speed_on and speed_off else None,
            "speed_round_ratios": [round(x, 3) for x in pairs],
            "predicted_over_measured_on": round(plan["predicted_peak_bytes"] / peak_on, 3) if peak_on else None,
            "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zoo", default="ResNet50,AlexNet", help="zoo models ('' for none)")
    ap.add_argument("--zoo-batch", type=int, default=16)
    ap.add_argument("--configs", help="folder of built zoo models, reused (default: a temporary one)")
    ap.add_argument("--networks", default="deep_cnn_bn:32,resnet_graph:16", help="example networks name:batch")
    ap.add_argument("--policies", default="liveness")
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "buffer_pool.json"))
    args = ap.parse_args()
    rec = Recorder("buffer_pool")
    doc = rec.doc
    doc.update(meta={"iterations": args.iterations, "rounds": args.rounds, "omp_threads": 1}, rows={})
    examples = NETWORKS
    with tempfile.TemporaryDirectory(prefix="pyd4j-pool-") as tmp:
        configs = Path(args.configs or tmp)
        configs.mkdir(parents=True, exist_ok=True)
        jobs = [(n, args.zoo_batch, configs) for n in args.zoo.split(",") if n]
        jobs += [(n.split(":")[0], int(n.split(":")[1]), examples) for n in args.networks.split(",") if n]
        for name, batch, folder in jobs:
            try:
                if folder == configs and not (configs / f"{name}.json").exists():
                    built = build_model(name, 2, configs, 900.0)
                    if not built["built"]:
                        raise RuntimeError(built.get("skipped") or built.get("error"))
                for policy in args.policies.split(","):
                    doc["rows"][f"{name}@{batch} {policy}"] = measure(folder / f"{name}.json", batch, policy,
                                                                      Path(tmp), args.iterations, args.rounds)
            except Exception as err:  # noqa: BLE001 - recorded; the benchmark goes on
                doc["rows"][f"{name}@{batch}"] = {"error": f"{type(err).__name__}: {err}"[:800]}
                print(f"{name}: {err}", flush=True)
            rec.write(args.out)
    for key, row in doc["rows"].items():
        if "error" not in row:
            print(f"{key}: peak on/off {row['peak_on_over_off']}, speed on/off {row['speed_on_over_off']} "
                  f"(rounds {row['speed_round_ratios']})")


if __name__ == "__main__":
    main()
