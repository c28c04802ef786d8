"""How much memory does DL4J's BatchNormalization leave for Java's collector in each training iteration?

    .venv/bin/python benchmarks/batchnorm_backlog.py [--runs deep_cnn_bn@64,deep_cnn_bn-without-bn@64,TinyYOLO@512]
        [--iterations 1,2,3,4,5] [--out benchmarks/results/batchnorm_backlog.json]

Each run is the harness's measuring job (harness/training.py: `TrainSynthetic`: DL4J's own fit()
on random batches after a batch-1 warm-up, one OpenMP thread, a 512 MiB heap, the agent taking no
live points: their full collections would free the garbage measured) for 1, 2, 3, ... iterations, in
the environment pyd4j's flags set (glibc's mmap threshold fixed, so nothing freed stays
with the C allocator). Per run: the native peak above the idle JVM, and its rise from one iteration
count to the next, against the inputs of the network's batch normalization layers (pyd4j.dl4j.fitmem).
`deep_cnn_bn-without-bn` is deep_cnn_bn with its BatchNormalization layers left out (the control:
everything else the same). TinyYOLO is DL4J's zoo model, built by DL4J's code at 16x16.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from harness import RESULTS, Recorder
from harness.training import NETWORKS
from harness.training import run as train_run
from harness.zoo import built_config

MiB = 1024**2
WITHOUT_BN = "-without-bn"


def without_batchnorm(folder: Path) -> str:
    """deep_cnn_bn with its BatchNormalization layers removed, written to `folder` (its preprocessor re-indexed)."""
    doc = json.loads((NETWORKS / "deep_cnn_bn.json").read_text())
    keep = [i for i, c in enumerate(doc["confs"]) if not c["layer"]["@class"].endswith(".BatchNormalization")]
    doc["confs"] = [doc["confs"][i] for i in keep]
    doc["inputPreProcessors"] = {str(keep.index(int(k))): p for k, p in doc["inputPreProcessors"].items()}
    name = "deep_cnn_bn" + WITHOUT_BN
    (folder / f"{name}.json").write_text(json.dumps(doc))
    (folder / f"{name}.input.json").write_text((NETWORKS / "deep_cnn_bn.input.json").read_text())
    return name


def config_folder(name: str, folder: Path) -> Path:
    """Where `name`'s configuration is: the examples, or `folder` (built there if it is a zoo model)."""
    if (NETWORKS / f"{name}.json").exists():
        return NETWORKS
    if name == "deep_cnn_bn" + WITHOUT_BN:
        without_batchnorm(folder)
        return folder
    return built_config(name, folder).parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default=f"deep_cnn_bn@64,deep_cnn_bn{WITHOUT_BN}@64,TinyYOLO@512")
    ap.add_argument("--iterations", default="1,2,3,4,5")
    ap.add_argument("--out", default=str(RESULTS / "batchnorm_backlog.json"))
    args = ap.parse_args()
    from pyd4j.memory.estimate import estimate
    from pyd4j.dl4j.fitmem import BATCHNORM_ARRAYS_PER_ITERATION, BATCHNORM_BACKLOG_ITERATIONS, MALLOC_ENV

    counts = [int(x) for x in args.iterations.split(",")]
    rec = Recorder("batchnorm_backlog")
    doc = rec.doc
    doc.update(meta={"environment": MALLOC_ENV, "omp_threads": 1}, runs={})
    with tempfile.TemporaryDirectory(prefix="pyd4j-bn-") as tmp:
        for spec in args.runs.split(","):
            name, batch = spec.split("@")
            folder = config_folder(name, Path(tmp))
            est = estimate(folder / f"{name}.json", int(batch))
            backlog = est.term_bytes("batchnorm_backlog")
            bn_inputs = backlog // (BATCHNORM_ARRAYS_PER_ITERATION * BATCHNORM_BACKLOG_ITERATIONS)
            peaks = []
            for n in counts:
                r = train_run(folder / f"{name}.json", int(batch), n, None, folder, extra_env=MALLOC_ENV, quiet=True)
                peaks.append(r["native_above_idle_bytes"])
                print(f"{spec:28s} {n:3d} iterations: native {peaks[-1] / MiB:8.1f} MiB", flush=True)
            rises = [b - a for a, b in zip(peaks, peaks[1:])]
            doc["runs"][spec] = {
                "iterations": counts, "native_above_idle_bytes": peaks, "rise_per_iteration_bytes": rises,
                "batchnorm_input_bytes": bn_inputs,
                "rise_over_batchnorm_inputs": [round(x / bn_inputs, 2) for x in rises] if bn_inputs else None,
                "model_without_backlog_bytes": est.offheap_bytes - backlog, "model_bytes": est.offheap_bytes}
            rec.write(args.out)
            print(f"{spec}: rises {[round(x / MiB, 1) for x in rises]} MiB; batch normalization inputs "
                  f"{bn_inputs / MiB:.1f} MiB", flush=True)


if __name__ == "__main__":
    main()
