"""`pyd4j nd4j-build` on lenet, deep_cnn_bn and resnet_graph (examples/networks): every nd4j-native
build this CPU can run and this machine has, measured in child JVMs with rounds alternated; the
ranking with its spread, then a second, fresh measurement to see whether the chosen build is the
fastest again. Writes benchmarks/results/backends.json (with the machine's load average: it may be
shared).

    .venv/bin/python benchmarks/backends.py [--batch 16] [--seconds 4] [--rounds 4]
    .venv/bin/python benchmarks/backends.py --resummarize benchmarks/results/backends_mkl_b32.json

`--resummarize` recomputes the comparisons that need no new run (the builds each measurement could
not tell apart from its fastest, from the A/B verdicts it recorded) and the summary of a results file.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness import RESULTS, ROOT, Recorder
from harness.training import NETWORKS
from pyd4j.dl4j.config import read_config_file
from pyd4j.dl4j.input_types import array_shape as input_shape, read_sidecar, sidecar_path
from pyd4j.profile.nd4j_build import as_fast, compare_builds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lenet,deep_cnn_bn,resnet_graph")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, default=RESULTS / "backends.json")
    ap.add_argument("--resummarize", type=Path, help="a results file to recompute the comparisons of (no runs)")
    args = ap.parse_args()
    if args.resummarize:
        rec = Recorder.amending(args.resummarize)
        doc = rec.doc
        for row in doc["models"]:
            for m in (row["first"], row["remeasure"]):
                m.setdefault("as_fast", as_fast(m))
            row["fastest_again_among_as_fast"] = row["remeasure"].get("fastest") in row["first"]["as_fast"]
        doc["summary"] = _summary(doc["models"])
        rec.write(args.resummarize, indent=2)
        return
    rec = Recorder("backends")
    results = []
    for name in args.models.split(","):
        path = NETWORKS / f"{name}.json"
        _, kind = read_config_file(path)
        shape = input_shape(read_sidecar(sidecar_path(path))[0], args.batch)
        first = compare_builds(path, kind, shape, seconds=args.seconds, rounds=args.rounds)
        again = compare_builds(path, kind, shape, seconds=args.seconds, rounds=args.rounds)
        for doc in (first, again):   # results name the network by its place in the repository
            doc["model"] = str(path.relative_to(ROOT))
        row = {"model": name, "kind": kind, "input_shape": shape, "first": first, "remeasure": again,
               "chosen": first.get("fastest"), "fastest_again": first.get("fastest") == again.get("fastest"),
               "blas_fastest_again": _blas(first) == _blas(again),
               # the re-measured fastest among the builds the first measurement could not tell apart
               "fastest_again_among_as_fast": again.get("fastest") in first.get("as_fast", [first.get("fastest")]),
               "load_average_1m_end": round(os.getloadavg()[0], 2)}
        results.append(row)
        print(name, [(r["build"], r["median_iterations_per_s"], r["spread"]) for r in first["ranking"]],
              "again:", [(r["build"], r["median_iterations_per_s"]) for r in again["ranking"]], flush=True)
        _write(rec, args, results)


def _blas(doc: dict) -> str | None:
    """The BLAS of the fastest build of a measurement."""
    return doc["ranking"][0].get("blas") if doc.get("ranking") else None


def _summary(results: list[dict]) -> dict:
    return {"models": len(results), "fastest_again": sum(r["fastest_again"] for r in results),
            "blas_fastest_again": sum(r.get("blas_fastest_again", False) for r in results),
            "fastest_again_among_as_fast": sum(r.get("fastest_again_among_as_fast", False) for r in results),
            "proved_faster_than_next": sum(bool(r["first"].get("proved")) for r in results)}


def _write(rec: Recorder, args, results) -> None:
    rec.doc.update({
           "environment": {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")},
           "settings": {"batch": args.batch, "seconds": args.seconds, "rounds": args.rounds},
           "summary": _summary(results),
           "models": results})
    rec.write(args.out, indent=2)


if __name__ == "__main__":
    main()
