"""Do pyd4j's memory limits still hold with -XX:+DisableExplicitGC, the speed tune's fix for a job's own System.gc()?

`tune --speed` offers -XX:+DisableExplicitGC when the collections a job asks for take its time. The flag
also turns off the collection JavaCPP asks for when ND4J's memory reaches maxphysicalbytes, and `pyd4j
flags` sizes maxphysicalbytes below the container on the understanding that this collection frees the
garbage arrays in time. So `tune --speed --memory` does not try it. This benchmark is the evidence: each
network trains under its generated flags in a memory cgroup at the generated container limit
(harness/flagged.py's `train`, the same runs as `flags_accuracy.py`), once as generated and once with
-XX:+DisableExplicitGC added, the two runs back to back.

Writes benchmarks/results/explicit_gc_limits.json. Usage: python benchmarks/explicit_gc_limits.py
[--runs deep_cnn_bn@32:200,Darknet19@32:200,UNet@32:3] (NAME@BATCH:ITERATIONS; zoo models are built by
DL4J's code, example networks read from examples/networks). Needs a writable memory cgroup.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from harness import RESULTS, Recorder
from harness.flagged import train
from harness.training import NETWORKS
from harness.zoo import built_config
from pyd4j.memory.estimate import estimate
from pyd4j.memory.flags import flags

MiB = 1024**2
VARIANTS = {"generated flags": (), "generated flags + -XX:+DisableExplicitGC": ("-XX:+DisableExplicitGC",)}


def config_of(name: str, folder: Path) -> Path:
    """An example network's configuration, or a zoo model built by DL4J's code at the smallest input it builds at."""
    local = NETWORKS / f"{name}.json"
    return local if local.exists() else built_config(name, folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="deep_cnn_bn@32:200,Darknet19@32:200,UNet@32:3")
    ap.add_argument("--out", type=Path, default=RESULTS / "explicit_gc_limits.json")
    args = ap.parse_args()
    rec = Recorder("explicit_gc_limits")
    rows = []
    with tempfile.TemporaryDirectory(prefix="pyd4j-explicit-gc-") as folder:
        for spec in args.runs.split(","):
            name, rest = spec.split("@")
            batch, iterations = (int(x) for x in (rest.split(":") + ["3"])[:2])
            config = config_of(name, Path(folder))
            fs = flags(estimate(config, batch), refuse=False)
            for variant, extra in VARIANTS.items():
                r = train(fs, config, batch, iterations, fs.container_bytes, extra_jvm=extra)
                row = {"network": name, "batch": batch, "iterations": iterations, "variant": variant,
                       "flags": [*fs.args(), *extra], "status": r["status"], "failure": r["failure"],
                       "diagnosis": r["diagnosis"], "container_bytes": fs.container_bytes,
                       "maxphysicalbytes": fs.maxphysicalbytes, "cgroup_peak_bytes": r.get("cgroup_peak_bytes"),
                       "peak_rss_bytes": r.get("peak_rss_bytes"), "cgroup_oom_kills": r.get("cgroup_oom_kills"),
                       "wall_seconds": r.get("wall_seconds"), "iterations_done": r.get("iterations")}
                rows.append(row)
                print(f"{name:12s} b={batch:4d} x{iterations:<4d} {variant:44s} {r['status']:7s} "
                      f"peak {(r.get('cgroup_peak_bytes') or 0) / MiB:7.1f} MiB (maxphysicalbytes "
                      f"{fs.maxphysicalbytes / MiB:.0f}, container {fs.container_bytes / MiB:.0f})  {r['diagnosis'][:90]}",
                      flush=True)
    failed = {v: sum(1 for r in rows if r["variant"] == v and r["status"] != "ok") for v in VARIANTS}
    rec.doc.update(summary={"runs_per_variant": len(rows) // len(VARIANTS), "failed": failed}, runs=rows)
    rec.write(args.out, indent=2)
    print(json.dumps(rec.doc["summary"]))


if __name__ == "__main__":
    main()
