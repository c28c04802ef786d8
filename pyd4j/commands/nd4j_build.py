"""`pyd4j nd4j-build --model net.json --batch N`: the nd4j-native build and BLAS that train this network fastest here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from pyd4j.commands import _params as params

_NETWORKS = Path(__file__).resolve().parents[2] / "examples" / "networks"
OLD_NAMES = ("backend",)   # what the command was called before: still runs it, not listed in --help


@click.command("nd4j-build")
@click.option("--model", required=True, help="DL4J configuration JSON (MultiLayerNetwork or ComputationGraph), or "
              "the name of one in examples/networks (lenet, deep_cnn_bn, resnet_graph, ...)")
@click.option("--batch", type=params.BATCH, required=True, help="minibatch size to train with")
@click.option("--input", "input_spec", default=None,
              help="input type when no NAME.input.json sidecar exists: ff:784, cnn:32x32x3 (HxWxC), cnnflat:28x28x1, rnn:32x50")
@click.option("--seconds", type=params.SECONDS, default=5.0, show_default=True, help="training seconds per measurement")
@click.option("--rounds", type=params.Whole(1, 50, example="--rounds 4"), default=4, show_default=True,
              help="measurements per build, alternated (4 or more lets the 95% interval decide)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document")
def command(model, batch, input_spec, seconds, rounds, as_json) -> None:
    """Train the network on every nd4j-native build this CPU can run and this machine has (generic,
    avx2, avx512), each with OpenBLAS and with MKL in its place (+mkl, where MKL's jar is in the
    local Maven repository), one child JVM per measurement, rounds alternated; print the ranking with
    its spread, the fastest with its Maven dependency, and whether the A/B proved it faster than the
    runner-up.

    \b
    Exit status: 0 a fastest build was measured; 1 no build could be measured; 2 bad arguments.
    """
    from pyd4j.dl4j.config import ConfigurationError, read_config_file  # noqa: PLC0415
    from pyd4j.dl4j.input_types import array_shape, derive_inputs, parse_input_spec, read_sidecar, sidecar_path  # noqa: PLC0415
    from pyd4j.output import emit_json, fail, print_table  # noqa: PLC0415
    from pyd4j.profile.nd4j_build import Nd4jBuildError, compare_builds  # noqa: PLC0415

    path = Path(model)
    if not path.exists() and (_NETWORKS / f"{model}.json").exists():
        path = _NETWORKS / f"{model}.json"
    try:
        text, kind = read_config_file(path)
        if input_spec:
            specs = [parse_input_spec(input_spec)]
        elif sidecar_path(path).exists():
            specs = read_sidecar(sidecar_path(path))
        else:
            specs = derive_inputs(json.loads(text), kind)
    except ConfigurationError as err:
        raise click.BadParameter(str(err), param_hint="--model") from None
    from pyd4j.dl4j.config import java_configuration  # noqa: PLC0415
    from pyd4j.dl4j.sizecheck import TooLargeError, check_parameters_fit  # noqa: PLC0415

    try:   # each build trains it in a JVM of its own: one too large for this machine is refused once, here
        check_parameters_fit(java_configuration(text, kind, f"--model {model}"), f"--model {model}")
    except (TooLargeError, ConfigurationError) as err:
        raise click.BadParameter(str(err), param_hint="--model") from None
    if not specs:
        raise click.BadParameter(f"{path} does not say its input type and has no {sidecar_path(path).name}; "
                                 f"pass --input (e.g. --input cnn:32x32x3)", param_hint="--input")
    if len(specs) > 1:
        raise click.BadParameter(f"{path} has {len(specs)} inputs; pyd4j nd4j-build feeds networks of one input",
                                 param_hint="--model")
    try:
        shape = array_shape(specs[0], batch)
        progress = (lambda c, r: None) if as_json else \
            (lambda c, r: click.echo(f"  {c}: {r['iterations_per_s']:.3g} iterations/s", err=True))
        doc = compare_builds(path.resolve(), kind, shape, seconds=seconds, rounds=rounds, on_result=progress)
    except Nd4jBuildError as err:
        fail(str(err), as_json, code=1)
    doc["exit_code"] = 0 if doc.get("fastest") else 1
    if as_json:
        emit_json(doc)
        sys.exit(doc["exit_code"])
    print_table(f"pyd4j nd4j-build: {path.name} ({kind}), input {shape}", ["build", "iterations/s (median)", "min-max",
                                                                            "spread", "runs"],
                [[r["build"], f"{r['median_iterations_per_s']:.3g}", f"{r['min']:.3g}-{r['max']:.3g}",
                  f"{r['spread']:.0%}", r["runs"]] for r in doc["ranking"]])
    for s in doc["skipped"]:
        click.echo(f"not measured: {s['build']}: {s['why']}")
    for build, why in doc["failed"].items():
        click.echo(f"FAILED: {why}")
    if not doc.get("fastest"):
        click.echo("no build could be measured", err=True)
        sys.exit(1)
    v = doc.get("versus_next")
    if v:
        iv = v["interval"]
        click.echo(f"fastest: {doc['fastest']}, {v['ratio']:.3f}x the next ({v['build']}), 95% interval "
                   + (f"{iv[0]:.3f}-{iv[1]:.3f}" if iv and iv[1] is not None and iv[1] != float("inf")
                      else "unbounded (too few rounds: 4 a build can decide)")
                   + ("" if doc["proved"] else ": NOT proved faster; the builds are within the noise"))
        if doc.get("proved_faster_than") and not doc["proved"]:
            click.echo(f"proved faster than: {', '.join(doc['proved_faster_than'])} (95% intervals above 1)")
        if len(doc.get("as_fast", [])) > 1:
            click.echo(f"as fast as far as measured: {', '.join(doc['as_fast'])} (none proved faster than another)")
    else:
        click.echo(f"fastest: {doc['fastest']} (the only build measured)")
    click.echo("Maven dependency:\n" + doc["maven"])
