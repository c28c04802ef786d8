"""What does glibc keep of an LSTM's working memory, and does the memory model count it?

    .venv/bin/python benchmarks/lstm_steps.py [--layers 1,2,3] [--batches 8,16,32,64,128,256] [--runs 3]
        [--out benchmarks/results/lstm_steps.json]

While DL4J's working-memory workspace learns its size, an LSTM layer makes its working memory outside it in
per-step pieces ([batch, units] arrays). Pieces under glibc's mmap threshold stay with glibc once freed, even
with the threshold fixed as pyd4j's flags fix it. The memory model counts each LSTM layer's working memory
once more below the batch at which the pieces reach the threshold (`lstm_steps_kept_by_glibc` in
pyd4j.dl4j.fitmem). This benchmark runs examples/networks/lstm.json (two LSTM(128) over 50 steps) with its
LSTM layers cut to one or repeated to three, at batches below and at that batch (256 for 128 floats), in the
harness's measuring job (harness/training.py: `TrainSynthetic`: DL4J's own fit(), 3 iterations after a
batch-1 warm-up, one OpenMP thread, a 512 MiB heap, glibc's threshold fixed, the agent taking no live points)
`--runs` times each, and records the native peak above the idle JVM against the model's off-heap prediction
and against the model without the term.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
from pathlib import Path

from harness import RESULTS, Recorder
from harness.training import NETWORKS
from harness.training import run as train_run

MiB = 1024**2
TERM = "lstm_steps_kept_by_glibc"


def with_layers(count: int, folder: Path) -> str:
    """lstm.json with `count` LSTM(128) layers (its second repeated, or left out), written to `folder`."""
    doc = json.loads((NETWORKS / "lstm.json").read_text())
    first, middle, output = doc["confs"]
    doc["confs"] = [first, *(copy.deepcopy(middle) for _ in range(count - 1)), output]
    name = f"lstm_{count}_layers"
    (folder / f"{name}.json").write_text(json.dumps(doc))
    (folder / f"{name}.input.json").write_text((NETWORKS / "lstm.input.json").read_text())
    return name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", default="1,2,3")
    ap.add_argument("--batches", default="8,16,32,64,128,256")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "lstm_steps.json"))
    args = ap.parse_args()
    from pyd4j.memory.estimate import estimate
    from pyd4j.dl4j.fitmem import MALLOC_ENV

    rec = Recorder("lstm_steps")
    doc = rec.doc
    doc.update(meta={"environment": MALLOC_ENV, "omp_threads": 1, "runs": args.runs, "iterations": args.iterations},
               rows=[])
    with tempfile.TemporaryDirectory(prefix="pyd4j-lstm-") as tmp:
        folder = Path(tmp)
        for count in (int(x) for x in args.layers.split(",")):
            name = with_layers(count, folder)
            for batch in (int(x) for x in args.batches.split(",")):
                est = estimate(folder / f"{name}.json", batch)
                kept = est.term_bytes(TERM) if TERM in est.breakdown() else 0
                peaks = [train_run(folder / f"{name}.json", batch, args.iterations, None, folder, extra_env=MALLOC_ENV,
                                   quiet=True)["native_above_idle_bytes"] for _ in range(args.runs)]
                measured = statistics.median(peaks)
                row = {"lstm_layers": count, "batch": batch, "native_above_idle_bytes": peaks, "median_bytes": measured,
                       "model_bytes": est.offheap_bytes, "term_bytes": kept,
                       "working_memory_bytes": est.term_bytes("working_memory"),
                       "model_over_measured": round(est.offheap_bytes / measured, 3),
                       "without_term_over_measured": round((est.offheap_bytes - kept) / measured, 3),
                       "excess_over_working_memory": round((measured - est.offheap_bytes + kept)
                                                           / est.term_bytes("working_memory"), 2)}
                doc["rows"].append(row)
                rec.write(args.out)
                print(f"{count} LSTM layers, batch {batch:4d}: measured {[round(p / MiB, 1) for p in peaks]} MiB, "
                      f"model {est.offheap_bytes / MiB:.1f} ({row['model_over_measured']}), without the term "
                      f"{(est.offheap_bytes - kept) / MiB:.1f} ({row['without_term_over_measured']}); what the model "
                      f"without it misses = {row['excess_over_working_memory']} x one layer's working memory", flush=True)


if __name__ == "__main__":
    main()
