"""Options and output shared by `pyd4j estimate`, `pyd4j flags` and `pyd4j batch`."""

from __future__ import annotations

from typing import Callable

import click

from pyd4j.commands import _params as params
from pyd4j.output import human_bytes, print_table

MODEL_FILE = params.InputFile("network configuration", fix="give a DL4J configuration JSON written by conf.toJson() "
                                                          "(examples/networks/ has five)")


def network_options(func: Callable) -> Callable:
    """--model/--batch/--dtype/--mode/--input/--json."""
    options = [
        click.option("--model", "model", required=True, type=MODEL_FILE,
                     help="DL4J network JSON (MultiLayerConfiguration or ComputationGraphConfiguration)."),
        click.option("--input", "input_spec", default=None,
                     help="Input type when no NAME.input.json sidecar exists: ff:784, cnn:32x32x3 (HxWxC), "
                          "cnnflat:28x28x1, rnn:32x50 (size x steps); comma-separated for several graph inputs."),
        click.option("--dtype", default="float32", show_default=True, help="float32, float16, bfloat16 or float64."),
        click.option("--mode", default="train", show_default=True, help="train or infer."),
        click.option("--prefetch", default=2, show_default=True, type=params.Whole(0, 1024, example="--prefetch 2"),
                     help="AsyncDataSetIterator queue size (DL4J's fit() uses 2; 0 for none)."),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON document."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


no_pin_option = click.option(
    "--no-pin", is_flag=True,
    help="Pin neither C2's node limit nor the collector (for a JVM that refuses them: OpenJ9, a VM without C2); "
         "the sizes then hold what a long run needs without the node limit, and G1's tables.")


def print_estimate(est) -> None:
    rows = [(t.name, human_bytes(t.bytes_at(est.batch)), t.region, t.source, t.why) for t in est.terms]
    rows.append(("total", human_bytes(est.total_bytes), "", "",
                 f"off-heap {human_bytes(est.offheap_bytes)}, heap {human_bytes(est.heap_bytes)}, "
                 f"JVM native {human_bytes(est.native_bytes)}"))
    print_table(f"{est.model} ({est.model_kind}), batch {est.batch}, {est.dtype}, {est.mode}",
                ["term", "bytes", "region", "source", "why"], rows)
    if est.report_terms:   # DL4J's own NetworkMemoryReport: the cross-check column, not summed
        report = {t.name: t.bytes_at(est.batch) for t in est.report_terms}
        model = est.breakdown()
        print_table("cross-check: DL4J's NetworkMemoryReport (not used: it leaves out workspace over-allocation and "
                    "learning, batch normalization's backlog, preprocessors, prefetch buffers)", ["term", "DL4J report", "pyd4j"],
                    [(name, human_bytes(b), human_bytes(model[name]) if name in model else "-") for name, b in report.items()]
                    + [("total", human_bytes(sum(report.values())),
                        human_bytes(est.offheap_bytes - model.get("prefetch_buffers", 0)))])
    for note in est.notes:   # what the estimate could not take from DL4J, and what stands in for it
        click.echo(f"note: {note}")
    if est.environment:
        from pyd4j.memory.estimate import assignments  # noqa: PLC0415  (loaded already: est is an Estimate)

        click.echo(f"note: the terms assume {' '.join(assignments(est.environment))} in the job's environment (pyd4j "
                   f"flags writes it): {est.environment_reason()}")
