"""`pyd4j tune-prefetch`: training throughput against async prefetch depth, and the depth to use."""

from __future__ import annotations

from pathlib import Path

import click

from pyd4j import inputs
from pyd4j.commands import _params as params
from pyd4j.output import emit_json, human_bytes, print_table

_EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "data"
MAX_DEPTH = 1024  # each queued minibatch is memory: deeper queues only hold more of it
_BUILTIN = {"digits-mlp": ("digits_mlp.json", None), "digits-lenet": ("digits_lenet.json", (1, 8, 8))}


def network_text(model: str) -> str:
    """The configuration JSON of --model, checked without a JVM: a readable DL4J configuration file or a built-in."""
    from pyd4j.dl4j.config import ConfigurationError, read_config_file  # noqa: PLC0415

    path = Path(_EXAMPLES / _BUILTIN[model][0]) if model in _BUILTIN else Path(model)
    if not path.exists():
        raise click.BadParameter(f"{model!r} is neither a DL4J configuration JSON file nor one of "
                                 f"{', '.join(_BUILTIN)}", param_hint="--model")
    try:
        return read_config_file(path)[0]
    except ConfigurationError as err:
        raise click.BadParameter(str(err), param_hint="--model") from None


def network_io(text: str) -> tuple[int | None, int | None]:
    """(features per sample, label columns) a MultiLayerNetwork configuration expects, read from
    its JSON without a JVM; None where the JSON does not say (a ComputationGraph, a CNN without
    a preprocessor)."""
    import json  # noqa: PLC0415
    import math  # noqa: PLC0415

    from pyd4j.dl4j.config import MULTILAYER, kind_of  # noqa: PLC0415
    from pyd4j.dl4j.input_types import derive_inputs  # noqa: PLC0415

    doc = json.loads(text)
    if kind_of(doc) != MULTILAYER:
        return None, None
    spec = (derive_inputs(doc, MULTILAYER) or [None])[0]
    features = None if spec is None else math.prod(v for k, v in spec.items() if k != "type")
    labels = doc["confs"][-1].get("layer", {}).get("nout")
    return features, labels if isinstance(labels, int) else None


def check_data_fits(model: str, x, y) -> None:
    """Refuse data the network cannot train on before any JVM starts: DL4J would fail deep inside
    fit() on a prefetch thread."""
    features, labels = network_io(network_text(model))
    hint = ("give an .npz whose x has one row per sample and y one-hot labels (np.savez(path, x=x, y=y)), "
            "or a network that matches the data")
    if len(x) == 0 or len(x) != len(y):
        raise click.BadParameter(f"the data has {len(x)} feature rows and {len(y)} label rows; they must be the same "
                                 f"number, at least 1; {hint}", param_hint="--data")
    per_sample = int(x[0].size)
    if features is not None and per_sample != features:
        raise click.BadParameter(f"each sample has {per_sample} features (shape {x.shape[1:]}) but {model} takes "
                                 f"{features}; {hint}", param_hint="--data")
    if y.ndim != 2 or (labels is not None and y.shape[1] != labels):
        raise click.BadParameter(f"labels have shape {y.shape[1:]} per sample but {model} outputs "
                                 f"{labels if labels is not None else 'a vector'}; {hint}", param_hint="--data")


def load_network(model: str):
    """A DL4J network from a configuration JSON file (MultiLayer or ComputationGraph), or a built-in name."""
    from pyd4j.dl4j.config import build_network  # noqa: PLC0415

    return build_network(network_text(model), f"--model {model}")


def load_arrays(data: str | None):
    """(x, y) float32 from an .npz with arrays x and y, or the digits CSV (train split, one-hot)."""
    path = Path(data) if data else _EXAMPLES / "digits.csv"
    import zipfile  # noqa: PLC0415

    try:
        x, y = _read_arrays(path)
    except (OSError, ValueError, IndexError, TypeError, EOFError, zipfile.BadZipFile) as err:
        raise click.BadParameter(f"cannot read {path}: {err}; give an .npz with arrays x and y "
                                 f"(np.savez(path, x=x, y=y)), or leave --data out for the digits set",
                                 param_hint="--data") from None
    if x.ndim < 2 or y.ndim != 2:
        raise click.BadParameter(f"{path}: x has shape {x.shape} and y {y.shape}; x needs one row per sample "
                                 f"(2 or more dimensions) and y one one-hot row per sample (2 dimensions)",
                                 param_hint="--data")
    return x, y


def _read_arrays(path: Path):
    import numpy as np  # noqa: PLC0415

    if path.suffix == ".npz":
        with np.load(path) as z:
            if "x" not in z or "y" not in z:
                raise click.BadParameter(f"{path} must hold arrays named x and y (has {sorted(z.files)})",
                                         param_hint="--data")
            return np.ascontiguousarray(z["x"], np.float32), np.ascontiguousarray(z["y"], np.float32)
    rows = np.loadtxt(path, delimiter=",", dtype=np.int64)
    train = rows[rows[:, 0] == 0]
    return (np.ascontiguousarray(train[:, 2:], np.float32) / 16.0, np.eye(10, dtype=np.float32)[train[:, 1]])


@click.command("tune-prefetch")
@click.option("--model", default="digits-mlp", show_default=True,
              help="DL4J configuration JSON file, or digits-mlp / digits-lenet.")
@click.option("--data", default=None, type=params.InputFile("data set"), help=".npz with arrays x, y (default: the digits training split).")
@click.option("--shape", default=None, help="Reshape each sample, e.g. 1,8,8 for a CNN (digits-lenet sets it).")
@click.option("--batch", default=64, show_default=True, type=params.BATCH, help="Minibatch size.")
@click.option("--depths", default="1,2,4,8,16", show_default=True, help="Queue depths to measure.")
@click.option("--epochs", default=1, show_default=True, type=params.Whole(1, 10_000, example="--epochs 1"),
              help="Epochs per measurement.")
@click.option("--repeats", default=3, show_default=True, type=params.Whole(1, 100, example="--repeats 3"),
              help="Measurements per depth (median kept).")
@click.option("--tolerance", default=0.05, show_default=True, type=params.FRACTION,
              help="Recommend the smallest depth within this fraction of the best.")
@click.option("--threads", default=None, type=params.Whole(1, 4096, example="--threads 1"),
              help="ND4J's maximum threads (small shared machines: 1).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def command(model: str, data: str | None, shape: str | None, batch: int, depths: str, epochs: int, repeats: int,
            tolerance: float, threads: int | None, as_json: bool) -> None:
    """Measure samples/s against prefetch depth for a network and data set; recommend a depth."""
    import jpype  # noqa: PLC0415

    import pyd4j.jvm  # noqa: PLC0415
    from pyd4j.data import NumpyBatches  # noqa: PLC0415
    from pyd4j.prefetch_tuning import tune_prefetch  # noqa: PLC0415

    try:
        depth_list = [int(d) for d in depths.split(",") if d.strip()]
    except ValueError:
        raise click.BadParameter(f"{depths!r} must be comma-separated ints, e.g. 1,2,4,8", param_hint="--depths") from None
    if not depth_list or min(depth_list) < 1 or max(depth_list) > MAX_DEPTH:
        raise click.BadParameter(f"{depths!r}: every depth must be >= 1 (a queue of 0 is no prefetch) and <= {MAX_DEPTH}, "
                                 "e.g. 1,2,4,8", param_hint="--depths")
    network_text(model)  # a bad --model is refused before the JVM starts
    x, y = load_arrays(data)
    try:
        dims = tuple(int(s) for s in shape.split(",")) if shape else _BUILTIN.get(model, (None, None))[1]
        if dims and any(not 0 < d <= inputs.JAVA_INT_MAX for d in dims):
            raise ValueError("every dimension must be a whole number from 1 up")
        if dims:
            x = x.reshape((len(x), *dims))
    except ValueError as err:
        raise click.BadParameter(f"{shape!r} does not fit samples of {x.shape[1:]}: {err}; give per-sample "
                                 "dimensions as comma-separated ints, e.g. 1,8,8", param_hint="--shape") from None
    check_data_fits(model, x, y)
    pyd4j.jvm.info()
    if threads:
        jpype.JClass("org.nd4j.linalg.factory.Nd4j").getEnvironment().setMaxThreads(threads)
    with pyd4j.jvm.java_errors():
        net = load_network(model)
    source = NumpyBatches(x, y, batch_size=batch, shuffle=True, seed=0)
    report = tune_prefetch(net, source, depths=depth_list, epochs=epochs, repeats=repeats, tolerance=tolerance)
    doc = {"model": model, "batch": batch, "samples": len(x), **report.to_dict()}
    if as_json:
        emit_json(doc)
        return
    rows = [(r.depth, f"{r.samples_per_s:,.0f}", human_bytes(r.queue_bytes),
             "recommended" if r.depth == report.recommended else ("best" if r.depth == report.best else ""))
            for r in report.results]
    print_table(f"prefetch depth for {model} (batch {batch})", ["depth", "samples/s", "queue memory", ""], rows)
    speedup = report.speedup_vs_dl4j_default()
    click.echo(f"recommended prefetch depth: {report.recommended}"
               + (f" ({speedup:.2f}x DL4J's default depth 2)" if speedup else ""))
