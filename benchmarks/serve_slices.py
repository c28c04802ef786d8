"""Inference workspaces sized by measurement (`pyd4j serve --slice-rows auto`): memory saved, speed kept.

    .venv/bin/python benchmarks/serve_slices.py [--examples lenet,deep_cnn_bn,resnet_graph,lstm,mlp]
        [--zoo LeNet,SqueezeNet,AlexNet,TinyYOLO,Darknet19,ResNet50] [--max-batch 32] [--pairs 15]
        [--configs DIR] [--out benchmarks/results/serve_slices.json]

Each model (the example networks, and models of DL4J's zoo built by DL4J's code at the smallest input
they build at, the harness's zoo builder, harness/zoo.py) is loaded as `pyd4j serve` loads it, with
`slice_rows="auto"`: the rows per output() call chosen at load, the workspaces then (settled) against
those of a whole max-batch call, and the load time. Then, independently of the choice's own timings,
the same max-batch input is run whole and in the chosen slices in `--pairs` alternated pairs (whole
first, then sliced first): the sliced side's fastest time over the whole side's (the choice's own
estimator; the claim: <= 1 + the tolerance, 1.05) and the median and range of the paired ratios. Outputs: largest difference of
the sliced outputs from the whole call's, relative to the largest output.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from harness import RESULTS, ROOT, Recorder, interleave, median_range, ratios
from harness.zoo import build_model


def recheck(m, x: list[np.ndarray], rows: int, max_batch: int, pairs: int) -> dict:
    """Whole and sliced interleaved `pairs` times: fastest over fastest (the choice's estimator) and the
    paired ratios' median and range."""
    def run(side: int, _pair: int) -> float:
        m.slice_rows = side
        start = time.perf_counter()
        m.infer(x)
        return time.perf_counter() - start

    times = interleave((max_batch, rows), pairs, run)
    m.slice_rows = rows
    r = median_range(ratios(times[rows], times[max_batch])) or {}
    return {"recheck_ratio": round(min(times[rows]) / min(times[max_batch]), 3),
            "recheck_median_pair_ratio": r.get("median"), "recheck_pair_range": r.get("range"),
            "recheck_whole_ms": [round(t * 1000, 1) for t in times[max_batch]],
            "recheck_sliced_ms": [round(t * 1000, 1) for t in times[rows]]}


def measure(name: str, path: Path, max_batch: int, pairs: int, spill: Path) -> dict:
    from pyd4j import workspaces
    from pyd4j.serve.model import ServedModel

    workspaces.destroy_all()  # one thread runs every model here: each starts with none
    m = ServedModel(name, path, spill)
    t0 = time.perf_counter()
    fp = m.load(max_batch)
    load_s = time.perf_counter() - t0
    rows = fp.slice_rows
    row = {"input": m.inputs[0].to_dict()["shape"], "load_s": round(load_s, 2), "sizing": m.sizing.to_dict(),
           "slice_rows": rows, "workspace_bytes": fp.workspace_bytes, "whole_workspace_bytes": fp.whole_workspace_bytes,
           "workspace_saved": round(1 - fp.workspace_bytes / fp.whole_workspace_bytes, 3) if fp.whole_workspace_bytes else 0.0,
           "footprint_bytes": fp.total_bytes,
           "whole_footprint_bytes": fp.total_bytes - fp.workspace_bytes + fp.whole_workspace_bytes,
           "params_bytes": fp.params_bytes, "estimate_bytes": fp.estimate_bytes}
    if rows < max_batch:
        rng = np.random.default_rng(7)
        x = [rng.standard_normal((max_batch, *s.shape[1:])).astype(np.float32) for s in m.inputs]
        row.update(recheck(m, x, rows, max_batch, pairs))
        m.slice_rows = max_batch
        whole = m.infer(x)
        m.slice_rows = rows
        sliced = m.infer(x)
        row["max_rel_difference"] = float(max(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30) for a, b in zip(whole, sliced)))
    m.close()
    workspaces.destroy_all()
    return row


def main() -> None:
    import pyd4j.jvm

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", default="lenet,deep_cnn_bn,resnet_graph,lstm,mlp")
    ap.add_argument("--zoo", default="LeNet,SqueezeNet,AlexNet,TinyYOLO,Darknet19,ResNet50")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--pairs", type=int, default=15)
    ap.add_argument("--probe-batch", type=int, default=2)
    ap.add_argument("--configs", help="folder of built zoo models, reused (default: a temporary one)")
    ap.add_argument("--out", default=str(RESULTS / "serve_slices.json"))
    args = ap.parse_args()
    pyd4j.jvm.start(heap_max="4g")
    from pyd4j.serve import sizing

    rec = Recorder("serve_slices")
    doc = rec.doc
    doc.update(meta={"max_batch": args.max_batch, "pairs": args.pairs, "tolerance": sizing.TOLERANCE,
                     "time_limit_s": sizing.TIME_LIMIT_S}, models={})
    spill = Path(tempfile.mkdtemp(prefix="pyd4j-bench-slices-"))
    with tempfile.TemporaryDirectory(prefix="pyd4j-slices-zoo-") as tmp:
        folder = Path(args.configs or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        todo = [(n, ROOT / "examples" / "networks" / f"{n}.json") for n in args.examples.split(",") if n] + \
               [(f"zoo {n}", folder / f"{n}.json") for n in args.zoo.split(",") if n]
        for name, path in todo:
            try:
                if name.startswith("zoo ") and not (folder / f"{name[4:]}.info.json").exists():
                    built = build_model(name[4:], args.probe_batch, folder, 900.0)
                    if not built["built"]:
                        raise RuntimeError(built.get("skipped") or built.get("error"))
                row = measure(name, path, args.max_batch, args.pairs, spill)
                print(f"{name}: {row['slice_rows']} rows a call, workspaces {row['workspace_bytes'] / 2**20:.1f} of "
                      f"{row['whole_workspace_bytes'] / 2**20:.1f} MiB; recheck {row.get('recheck_ratio', '-')} "
                      f"(pairs median {row.get('recheck_median_pair_ratio', '-')} {row.get('recheck_pair_range', '')}); load {row['load_s']} s", flush=True)
            except Exception as err:  # noqa: BLE001 - recorded; the benchmark goes on
                row = {"error": f"{type(err).__name__}: {err}"[:800]}
                print(f"{name}: {row['error']}", flush=True)
            doc["models"][name] = row
            rec.write(args.out)
    ok = [r for r in doc["models"].values() if "slice_rows" in r]
    sliced = [r for r in ok if r["slice_rows"] < args.max_batch]
    doc["summary"] = {
        "models": len(ok), "sliced": len(sliced),
        "workspace_bytes_total": sum(r["workspace_bytes"] for r in ok),
        "whole_workspace_bytes_total": sum(r["whole_workspace_bytes"] for r in ok),
        "footprint_bytes_total": sum(r["footprint_bytes"] for r in ok),
        "whole_footprint_bytes_total": sum(r["whole_footprint_bytes"] for r in ok),
        "recheck_ratios": {n: r["recheck_ratio"] for n, r in doc["models"].items() if "recheck_ratio" in r},
        "slower_than_tolerance_on_recheck": [n for n, r in doc["models"].items()
                                             if r.get("recheck_ratio", 0) > 1 + sizing.TOLERANCE]}
    rec.write(args.out)
    print(json.dumps(doc["summary"], indent=1))


if __name__ == "__main__":
    main()
