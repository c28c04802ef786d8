"""A network to estimate, plan or serve: its configuration (a JSON file, JSON text or a live DL4J
object) and its input types (given, from the sidecar, or from the configuration), read once."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyd4j.dl4j.config import (GRAPH, ConfigurationError, configuration_of, java_configuration, parse_document,
                               read_document_file, start_jvm)
from pyd4j.dl4j.input_types import check_input_spec, derive_inputs, parse_input_spec, read_sidecar, sidecar_path


@dataclass
class Loaded:
    name: str
    kind: str
    conf: Any                            # DL4J's configuration object
    inputs: list[dict[str, Any]]         # input types, as sidecar entries
    doc: dict[str, Any] = field(default_factory=dict)   # the configuration JSON, for the planner's graph
    live: Any = None                     # the network itself, when a live one was given


def given_inputs(input: str | dict | list | None) -> list[dict[str, Any]] | None:  # noqa: A002
    """Input types from `--input` specs ('cnn:32x32x3,ff:6'), one sidecar entry, or a list of either."""
    if isinstance(input, str):
        return [parse_input_spec(s) for s in input.split(",")]
    if isinstance(input, dict):
        return [check_input_spec(input, "input")]
    if isinstance(input, list):
        return [parse_input_spec(s) if isinstance(s, str) else check_input_spec(s, "input") for s in input]
    return None


def load(model: Any, input: str | dict | list | None = None) -> Loaded:  # noqa: A002
    """A network configuration from a JSON path, JSON text or a live DL4J object, plus its input types.
    JSON read here is checked whole (layers, input types) before DL4J sees it."""
    inputs = given_inputs(input)
    text = live = None
    if isinstance(model, (str, Path)) and not str(model).lstrip().startswith("{"):
        path = Path(model)
        text, doc, kind = read_document_file(path)
        where = str(path)
        name = path.name[: -len(".json")] if path.name.endswith(".json") else path.name
        if inputs is None and sidecar_path(path).exists():
            inputs = read_sidecar(sidecar_path(path))
    elif isinstance(model, str):
        doc, kind = parse_document(model, "network JSON text")
        text, where, name = model, "network JSON text", "network"
    else:
        start_jvm()
        conf, kind = configuration_of(model)
        doc = json.loads(str(conf.toJson()))
        name = str(model.getClass().getSimpleName())
        live = None if conf is model else model
    if inputs is None and kind == GRAPH and doc.get("networkInputTypes"):
        raise ConfigurationError("this graph's JSON records input types DL4J cannot map back; pass --input "
                                 "(e.g. cnn:32x32x3)")
    if inputs is None:
        inputs = derive_inputs(doc, kind)
    if not inputs:
        raise ConfigurationError(
            f"cannot tell the input type of {name}: give --input (ff:SIZE, cnn:HxWxC, cnnflat:HxWxC, rnn:SIZExSTEPS) "
            f"or write a sidecar {name}.input.json like examples/networks/*.input.json")
    if text is not None:
        conf = java_configuration(text, kind, where)
    return Loaded(name=name, kind=kind, conf=conf, inputs=inputs, doc=doc, live=live)
