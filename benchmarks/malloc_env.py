"""What one glibc malloc setting changes in a DL4J fit(): memory and speed.

    .venv/bin/python benchmarks/malloc_env.py [--setting MALLOC_ARENA_MAX=2] [--baseline NAME=VALUE]
        [--runs lenet@32,lstm@32,deep_cnn_bn@8] [--iterations 150] [--pairs 3] [--out benchmarks/results/malloc_arenas.json]

Settings measured: `MALLOC_ARENA_MAX=2` (at most two malloc arenas; `results/malloc_arenas.json`) and
`MALLOC_MMAP_THRESHOLD_=131072` (glibc's mmap threshold fixed, which pyd4j's generated flags set;
`results/malloc_mmap_threshold.json`); with `--baseline MALLOC_MMAP_THRESHOLD_=131072` the "default" side
runs with that setting instead of glibc's defaults (`results/malloc_mmap_threshold_65536.json`: a lower
threshold against the one the flags set). Each run is the unchanged measuring job of
the harness (harness/training.py: `TrainSynthetic`: DL4J's own fit() on random batches, one OpenMP
thread, heap fixed and pre-touched) for `--iterations` iterations, once with glibc's defaults and once
with the setting, the two sides alternating (default first in even pairs, set first in odd ones)
`--pairs` times. Per side: the native peak above
the idle JVM (RSS less the JVM's committed heap and non-heap: ND4J's memory) and iterations/s from the
agent's iteration events. Reports, per network, the medians, set / default for both, and the
spread of the per-pair ratios. Speed on a shared machine varies run to run; the pairs' ratios and
their spread say how much of a difference is the setting.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from harness import RESULTS, Recorder, interleave, ratios
from harness.training import NETWORKS
from harness.training import run as train_run

MiB = 1024**2
# where each setting's results go unless --out says otherwise
OUTPUTS = {"MALLOC_ARENA_MAX": "malloc_arenas.json", "MALLOC_MMAP_THRESHOLD_": "malloc_mmap_threshold.json"}


def one(name: str, batch: int, iterations: int, setting: dict[str, str] | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="pyd4j-malloc-") as tmp:
        r = train_run(NETWORKS / f"{name}.json", batch, iterations, None, Path(tmp), extra_env=setting)
    return {"native_above_idle_bytes": r["native_above_idle_bytes"], "rss_above_idle_bytes": r["peak_above_idle_bytes"],
            "iterations_per_s": r["iterations_per_s"], "seconds": r["seconds"]}


def parse_setting(option: str, text: str) -> dict[str, str]:
    name_value = text.split("=", 1)
    if len(name_value) != 2 or name_value[0] not in OUTPUTS or not name_value[1].isdigit():
        sys.exit(f"{option} {text!r}: give NAME=NUMBER with NAME one of {', '.join(OUTPUTS)}, e.g. MALLOC_ARENA_MAX=2")
    return {name_value[0]: name_value[1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--setting", default="MALLOC_ARENA_MAX=2", help="NAME=VALUE, one of " + ", ".join(OUTPUTS))
    ap.add_argument("--baseline", help="NAME=VALUE the default side runs with (default: glibc's own defaults)")
    ap.add_argument("--runs", default="lenet@32,lstm@32,deep_cnn_bn@8")
    ap.add_argument("--iterations", type=int, default=150)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--out", help="default: benchmarks/results/ + the setting's file (" + ", ".join(OUTPUTS.values()) + ")")
    args = ap.parse_args()
    setting = parse_setting("--setting", args.setting)
    baseline = parse_setting("--baseline", args.baseline) if args.baseline else None
    # the default side runs with glibc's own defaults: nothing of this process's environment may change them
    for var in OUTPUTS:
        os.environ.pop(var, None)
        if var in os.environ.get("PYD4J_BENCH_ENV", ""):
            sys.exit(f"PYD4J_BENCH_ENV sets {var}: unset it, this benchmark sets it per side")
    rec = Recorder("malloc_env")
    doc = rec.doc
    doc.update(meta={"iterations": args.iterations, "pairs": args.pairs, "omp_threads": 1, "setting": setting,
                     "baseline": baseline or "glibc defaults"}, networks={})
    if args.out is None and baseline:
        sys.exit("--baseline: give --out too (the default file holds the comparison with glibc's defaults)")
    out = Path(args.out or RESULTS / OUTPUTS[next(iter(setting))])
    for spec in args.runs.split(","):
        name, batch = spec.split("@")

        def side_run(side: str, pair: int) -> dict:
            r = one(name, int(batch), args.iterations, setting if side == "set" else baseline)
            print(f"{spec:16s} pair {pair} {side:8s} native {r['native_above_idle_bytes'] / MiB:7.1f} MiB "
                  f"{r['iterations_per_s'] or 0:7.2f} it/s", flush=True)
            return r

        rows = interleave(("default", "set"), args.pairs, side_run)
        med = {side: {k: statistics.median(x[k] for x in rs if x[k] is not None)
                      for k in ("native_above_idle_bytes", "iterations_per_s")} for side, rs in rows.items()}
        speed = ratios([c["iterations_per_s"] for c in rows["set"]], [d["iterations_per_s"] for d in rows["default"]])
        memory = [c["native_above_idle_bytes"] / d["native_above_idle_bytes"] for c, d in zip(rows["set"], rows["default"])]
        doc["networks"][spec] = {
            "runs": rows, "median": med,
            "native_set_over_default": round(med["set"]["native_above_idle_bytes"] / med["default"]["native_above_idle_bytes"], 3),
            "native_pair_ratios": [round(x, 3) for x in memory],
            "speed_set_over_default": round(statistics.median(speed), 3) if speed else None,
            "speed_pair_ratios": [round(x, 3) for x in speed]}
        rec.write(out)
        n = doc["networks"][spec]
        print(f"{spec}: native set/default {n['native_set_over_default']} (pairs {n['native_pair_ratios']}), "
              f"speed {n['speed_set_over_default']} (pairs {n['speed_pair_ratios']})", flush=True)


if __name__ == "__main__":
    main()
