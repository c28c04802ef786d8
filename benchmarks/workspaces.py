"""Workspace mode ENABLED vs NONE for each digits example network (the Maven-built Java jobs).

    .venv/bin/python benchmarks/workspaces.py [--repeats 2] [--out benchmarks/results/workspaces.json]

Each run is a child JVM (`org.pyd4j.examples.DigitsMlp` / `DigitsLeNet`, -Xms768m -Xmx768m
-XX:+AlwaysPreTouch, OMP_NUM_THREADS as given) training on the digits split and printing one JSON line: test accuracy, samples/s,
peak off-heap (resident minus JVM-committed heap and non-heap, sampled every 20 ms), peak RSS,
GC count and GC time. ENABLED and NONE runs alternate; figures are medians of `--repeats`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess

from harness import RESULTS, ROOT, Recorder, interleave

EXAMPLES = {"digits_mlp": "org.pyd4j.examples.DigitsMlp", "digits_lenet": "org.pyd4j.examples.DigitsLeNet"}
MEASURES = ("samples_per_s", "samples_per_s_after_first_epoch", "peak_offheap_bytes", "peak_physical_bytes",
            "gc_count", "gc_millis", "test_accuracy", "seconds")


def run(main_class: str, mode: str, epochs: int | None, threads: int) -> dict:
    from pyd4j.jvm import JvmOptions, examples_jar, java_command

    args = ["--workspaces", mode, "--data", str(ROOT / "examples" / "data" / "digits.csv")]
    if epochs:
        args += ["--epochs", str(epochs)]
    # Heap fixed and pre-touched, so that committed heap is resident and "RSS minus committed"
    # is the memory outside the JVM's own pools: ND4J arrays and workspaces.
    options = JvmOptions.of(heap_max="768m", heap_initial="768m", extra=["-XX:+AlwaysPreTouch"])
    cmd = java_command(options, main_class, args, extra_classpath=[examples_jar()])
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{main_class} --workspaces {mode} failed (exit {out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=None, help="default: each example's own")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS for the child JVMs (0: ND4J default)")
    parser.add_argument("--out", default=str(RESULTS / "workspaces.json"))
    args = parser.parse_args()
    rec = Recorder("workspaces")
    networks = {}
    for name, main_class in EXAMPLES.items():
        def one(mode: str, _round: int, name: str = name, main_class: str = main_class) -> dict:
            r = run(main_class, mode, args.epochs, args.threads)
            print(f"{name} {mode}: {r['samples_per_s']:,.0f} samples/s, acc {r['test_accuracy']:.3f}", flush=True)
            return r

        runs = interleave(("ENABLED", "NONE"), args.repeats, one)
        summary = {mode: {m: statistics.median(r[m] for r in rs) for m in MEASURES if rs[0].get(m) is not None}
                   for mode, rs in runs.items()}
        en, no = summary["ENABLED"], summary["NONE"]
        networks[name] = {
            **summary,
            "enabled_over_none": {
                "samples_per_s": en["samples_per_s"] / no["samples_per_s"],
                "peak_offheap_bytes": en["peak_offheap_bytes"] / no["peak_offheap_bytes"],
                "peak_physical_bytes": en["peak_physical_bytes"] / no["peak_physical_bytes"],
                "gc_millis": (en["gc_millis"] / no["gc_millis"]) if no["gc_millis"] else None,
            },
            "runs": runs,
        }
    rec.doc.update({"repeats": args.repeats, "networks": networks, "omp_threads": args.threads or None})
    rec.write(args.out, indent=2)
    for name, r in networks.items():
        print(f"{name}: ENABLED/NONE samples/s {r['enabled_over_none']['samples_per_s']:.2f}, "
              f"peak off-heap {r['enabled_over_none']['peak_offheap_bytes']:.2f}")


if __name__ == "__main__":
    main()
