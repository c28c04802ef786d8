"""Inference footprint: pyd4j's prediction against what a served model really holds.

    .venv/bin/python benchmarks/inference_footprint.py [--zoo LeNet,SimpleCNN,...] [--examples mlp,lenet,...]
        [--generated 0] [--generated-seed 0] [--batches 1,32,128] [--configs DIR]
        [--out benchmarks/results/inference_footprint.json]

Each model is loaded as `pyd4j serve` loads it (whole batches, `slice_rows="whole"`), its footprint
measured at each batch -- parameters + DL4J's inference workspaces once output() has settled them + the
arrays of one call -- and set against `pyd4j estimate --mode infer` at that batch (the parameters,
the workspaces measured at batches 1 and 2 and extended as a line, the call's arrays). Batch 1 is
one of the two probe batches (the prediction is a measurement there); the larger batches are
predictions. DL4J's own NetworkMemoryReport (parameters + activations + working memory) beside it.

`--generated N` adds N distinct networks drawn from the generator of tests/dl4j (`network_specs`, DL4J's
own builders, hypothesis seed `--generated-seed`), written as `conf.toJson()` with their input sidecar;
one that DL4J cannot build or run is recorded with its error and left out of the summary, which
counts the zoo and examples and the generated sample apart.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from harness import RESULTS, ROOT, Recorder
from harness.zoo import build_zoo

ZOO = ("AlexNet", "Darknet19", "FaceNetNN4Small2", "InceptionResNetV1", "LeNet", "ResNet50", "SimpleCNN",
       "SqueezeNet", "TextGenerationLSTM", "TinyYOLO", "UNet", "VGG16", "VGG19", "Xception", "YOLO2")
EXAMPLES = ("mlp", "lenet", "deep_cnn_bn", "lstm", "resnet_graph", "policy_value", "two_input", "deep_cnn30")
TOLERANCE = 0.15


def measure(name: str, path: Path, batch: int, spill: Path) -> dict:
    from pyd4j import workspaces
    from pyd4j.memory.estimate import estimate
    from pyd4j.serve.model import ServedModel

    workspaces.destroy_all()   # one thread runs every model: each starts with none
    m = ServedModel(name, path, spill)
    fp = m.load(batch, slice_rows="whole")
    predicted = fp.estimate_bytes   # the estimate the server itself prints beside the footprint
    if predicted is None:
        raise RuntimeError(f"the server has no estimate beside the footprint: {fp.estimate_error}")
    e = estimate(m.net, batch, dtype=m.params_dtype.name, mode="infer", input=m._input_types())
    # DL4J's own report (None where DL4J cannot build one for the network)
    report = sum(t.bytes_at(batch) for t in e.report_terms) + e.term_bytes("parameters") if e.report_terms else None
    row = {"measured_bytes": fp.total_bytes, "params_bytes": fp.params_bytes, "workspace_bytes": fp.workspace_bytes,
           "io_bytes": fp.io_bytes, "predicted_bytes": predicted, "dl4j_report_bytes": report,
           "predicted_over_measured": round(predicted / fp.total_bytes, 4),
           "dl4j_report_over_measured": round(report / fp.total_bytes, 4) if report is not None else None}
    m.net = None
    workspaces.destroy_all()
    return row


def generated(count: int, seed: int, folder: Path) -> dict[str, Path]:
    """`count` distinct generated networks written to `folder` (configuration and sidecar), by name."""
    import json

    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    from tests.dl4j import netbuild
    from tests.dl4j.netcheck import sidecar
    from tests.dl4j.netgraph import network_specs

    specs: list[dict] = []

    @hseed(seed)
    @settings(max_examples=count * 4, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(network_specs())
    def draw(spec: dict) -> None:
        if len(specs) < count and spec not in specs:
            specs.append(spec)

    draw()
    paths = {}
    for i, spec in enumerate(specs):
        name = f"generated-{seed}-{i}"
        try:
            text = str(netbuild.configuration(spec).toJson())
        except Exception:  # noqa: BLE001 - DL4J's builders refused it: not a network DL4J runs
            continue
        (folder / f"{name}.json").write_text(text)
        (folder / f"{name}.input.json").write_text(json.dumps({"inputs": sidecar(spec)}))
        paths[name] = folder / f"{name}.json"
    return paths


def summary(rows: dict[str, dict[str, dict]], batches: list[int]) -> dict:
    """Per batch, over the zoo and examples (`zoo_and_examples`) and the generated sample apart."""
    out = {}
    for group in ("zoo_and_examples", "generated"):
        chosen = {k: r for k, r in rows.items() if (r.get("source") == "generated") == (group == "generated")}
        figures = _summary(chosen, batches)
        if figures:
            out[group] = figures
    return out


def _summary(rows: dict[str, dict[str, dict]], batches: list[int]) -> dict:
    out = {}
    for b in batches:
        ratios = [r[str(b)]["predicted_over_measured"] for r in rows.values() if isinstance(r.get(str(b)), dict)]
        report = [r[str(b)]["dl4j_report_over_measured"] for r in rows.values() if isinstance(r.get(str(b)), dict)
                  and r[str(b)]["dl4j_report_over_measured"] is not None]
        if not ratios:
            continue
        out[str(b)] = {"models": len(ratios), "within_15pct": sum(abs(x - 1) <= TOLERANCE for x in ratios),
                       "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
                       "dl4j_report_models": len(report),
                       "dl4j_report_median": statistics.median(report) if report else None,
                       "dl4j_report_min": min(report, default=None), "dl4j_report_max": max(report, default=None),
                       "dl4j_report_within_15pct": sum(abs(x - 1) <= TOLERANCE for x in report)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo", default=",".join(ZOO))
    ap.add_argument("--examples", default=",".join(EXAMPLES))
    ap.add_argument("--batches", default="1,32,128")
    ap.add_argument("--configs", help="where the zoo models are built (kept between runs)")
    ap.add_argument("--generated", type=int, default=0, help="generated networks to add (tests/dl4j's generator)")
    ap.add_argument("--generated-seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS / "inference_footprint.json"))
    args = ap.parse_args()
    import pyd4j.jvm

    pyd4j.jvm.start(heap_max="3g")
    batches = [int(b) for b in args.batches.split(",")]
    rec = Recorder("inference_footprint")
    rec.doc.update(batches=batches, tolerance=TOLERANCE, models={})
    folder = Path(args.configs or tempfile.mkdtemp(prefix="pyd4j-zoo-"))
    zoo = [m for m in args.zoo.split(",") if m]
    built = build_zoo(zoo, folder)
    paths = {m: folder / f"{m}.json" for m in zoo if "error" not in built[m]}
    paths.update({n: ROOT / "examples" / "networks" / f"{n}.json" for n in args.examples.split(",") if n})
    drawn = generated(args.generated, args.generated_seed, folder) if args.generated else {}
    paths.update(drawn)
    spill = Path(tempfile.mkdtemp(prefix="pyd4j-spill-"))
    for name, path in paths.items():
        source = "zoo" if name in zoo else "generated" if name in drawn else "examples"
        row: dict = {"source": source, **built.get(name, {})}
        for b in batches:
            try:
                row[str(b)] = measure(name, path, b, spill)
            except Exception as err:  # noqa: BLE001 - recorded, the other models go on
                row[str(b)] = f"{type(err).__name__}: {str(err)[:300]}"
        rec.doc["models"][name] = row
        print(name, {b: row[str(b)].get("predicted_over_measured") if isinstance(row[str(b)], dict) else row[str(b)]
                     for b in batches}, flush=True)
        rec.doc["summary"] = summary(rec.doc["models"], batches)
        rec.write(args.out)
    print(rec.doc["summary"])


if __name__ == "__main__":
    main()
