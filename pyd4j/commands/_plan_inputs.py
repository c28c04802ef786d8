"""`pyd4j plan`'s inputs: the options it refuses together, the device's cost model, and the network it plans
(a zoo network, or a DL4J configuration file probed in DL4J where the planner has no model of a layer)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from pyd4j import inputs
from pyd4j.commands._devices import device_profiles
from pyd4j.dl4j.input_types import sidecar_shapes


def check_cupy(execute: bool, backend: str) -> None:
    """--execute --backend cupy needs CuPy in this Python."""
    if execute and backend == "cupy":
        import importlib.util  # noqa: PLC0415

        if importlib.util.find_spec("cupy") is None:
            raise click.BadParameter("'cupy': CuPy is not installed in this Python; install it with "
                                     "pip install 'pyd4j[cuda]' (CUDA 13) or 'pyd4j[cuda12]', or use --backend host "
                                     "or native", param_hint="--backend")


def cost_model(device: str, devices_json: str | None) -> Any:
    """The device's cost model, with measured numbers from `devices_json` where given."""
    from pyd4j.sched.costmodel import CostModel

    overrides = device_profiles(devices_json) if devices_json else None
    try:
        return CostModel.for_device(device, overrides)
    except KeyError as e:
        if devices_json is None or "unknown device" in str(e.args[0]):
            raise click.BadParameter(str(e.args[0]), param_hint="--device") from None
        raise click.BadParameter(f"{devices_json} lacks {e}; write it in the format of pyd4j/sched/devices.json",
                                 param_hint="--devices") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise click.BadParameter(f"{devices_json} is malformed ({e}); write it in the format of "
                                 "pyd4j/sched/devices.json", param_hint="--devices") from None


def network_file(model: str, network_json: str | None) -> str | None:
    """The DL4J configuration file planned: --network, or --model naming a .json file."""
    if network_json is None and model.lower().endswith(".json"):
        if not Path(model).is_file():
            raise click.BadParameter(f"{model!r} is not a file; give a DL4J configuration JSON written by "
                                     "conf.toJson() or a zoo network name", param_hint="--model")
        network_json = model
    return network_json


def check_plan_options(execute: bool, network_json: str | None, framework: str, emit_plan: str | None,
                       policies: tuple[str, ...]) -> None:
    """--execute runs zoo networks under the cudnn framework; --emit-plan writes one plan of a DL4J network."""
    if execute and network_json:
        raise click.BadParameter("--execute runs zoo networks on pyd4j's own numpy kernels; a DL4J network "
                                 "trains under a plan on DL4J's own layers: pyd4j.train.fit(net, data, "
                                 "memory=...) or --emit-plan FILE for PlannedTrainer", param_hint="--execute")
    if execute and framework != "cudnn":
        raise click.BadParameter(f"the executor's kernels read what the cudnn framework keeps, not "
                                 f"{framework!r}; pass --framework cudnn with --execute",
                                 param_hint="--framework")
    if emit_plan is not None:
        if network_json is None:
            raise click.BadParameter("--emit-plan writes plans for DL4J networks: give --model FILE.json "
                                     "(a DL4J configuration JSON)", param_hint="--emit-plan")
        if len(policies) > 1:
            raise click.BadParameter(f"--emit-plan writes one plan; give at most one --policy, got {list(policies)}",
                                     param_hint="--policy")


def graph_builder(model: str, network_json: str | None, batch: int, image: int | None, depth: int | None,
                  layout: str, framework: str) -> Callable[[int], Any]:
    """The planner's graph of the network at any batch (a search builds many): the DL4J file read and probed once."""
    from pyd4j.sched import zoo

    network_doc = _read_network(network_json) if network_json else None   # read once: a batch search builds many graphs
    probe = _probe(network_json, network_doc, batch) if network_json else None

    def build(b: int) -> Any:
        if network_json:
            from pyd4j.dl4j.graph import probed_graph

            try:
                return probed_graph(network_doc, b,
                                    sidecar_shapes(network_json), probe=probe, framework=framework)
            except ValueError as e:  # InputError, GraphError: a malformed file, sidecar or layer
                raise _bad_network(network_json, e) from None
        try:
            return zoo.build(model, batch=b, image=image, depth=depth,
                             layout=layout).with_framework(framework)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--model") from None

    return build


def _read_network(network_json: str) -> dict:
    try:
        return inputs.read_json(network_json, "network configuration")
    except ValueError as e:   # not JSON: refused before any JVM starts
        raise _bad_network(network_json, e) from None


def _bad_network(network_json: str, e: Exception) -> click.BadParameter:
    """The one error for a --network file pyd4j cannot read, naming the file, the cause and the fix."""
    return click.BadParameter(f"{network_json}: {e}; give a DL4J configuration JSON written by conf.toJson() "
                              "(examples/networks/ has six), or a zoo network with --model", param_hint="--network")


def _probe(network_json: str, doc: dict, batch: int):
    """What DL4J says of the network's opaque steps (`pyd4j.dl4j.probe`, as pyd4j.train.fit asks it of
    a live network), on the network built from the file: probed at `batch`, as pyd4j.train.fit probes it,
    and at any other batch (a search, DL4J's own fit() at the reference batch) from the line through
    probes at two small batches (`fitted`), as `pyd4j estimate` does, so that the two give one figure
    for fit(). A network DL4J cannot build or run is an error naming the file."""
    from pyd4j.jvm.errors import JavaError
    from pyd4j.dl4j.probe import FIT_BATCHES, fitted, of_configuration

    run = of_configuration(doc, network_json)
    line = fitted(run)
    exact: dict = {}

    def probe(shapes: list[tuple[int, ...]]) -> dict:
        given = shapes[0][0] == batch
        try:
            if not given:
                return line(shapes)
            key = tuple(map(tuple, shapes))
            if key not in exact:
                exact[key] = run(shapes)
            return exact[key]
        except (ValueError, JavaError) as e:   # EstimateError (DL4J cannot read it), or DL4J's own failure
            at = str(batch) if given else " and ".join(map(str, FIT_BATCHES))
            raise click.ClickException(f"{network_json}: DL4J's probe iteration of the network at batch {at} "
                                       f"failed: {e}") from None

    return probe


def _refuse_conflicts(model: str, network_json: str | None, depth: int | None, image: int | None,
                      max_depth: bool, max_batch: bool, others: dict[str, bool]) -> None:
    """Options that would be dropped without a word are refused instead."""
    json_model = network_json is not None or model.lower().endswith(".json")
    for search, on in (("--max-depth", max_depth), ("--max-batch", max_batch)):
        given = [o for o, v in {**others, "--depth": depth is not None and search == "--max-depth",
                                "--max-batch": max_batch and search == "--max-depth"}.items() if v]
        if on and given:
            raise click.UsageError(f"{search} searches and reports one number; it does not take "
                                   f"{', '.join(given)}: run the search first, then plan what it found with them")
    if depth is not None and (json_model or model.lower().replace("-", "") != "resnet"):
        raise click.BadParameter(f"{depth} is a depth for --model resnet only; {model!r} fixes its own depth: "
                                 "drop --depth, or give --model resnet --depth N", param_hint="--depth")
    if image is not None and json_model:
        raise click.BadParameter(f"{image}: a DL4J configuration JSON takes its input shape from <name>.input.json "
                                 "next to it, not --image; drop --image or edit that file", param_hint="--image")
    if model.lower().replace("-", "") == "resnet" and depth is None and not max_depth and not json_model:
        raise click.UsageError("--model resnet needs --depth N (e.g. --depth 152), or --max-depth to search it; "
                               "or name the network: resnet50, resnet101, resnet152")
