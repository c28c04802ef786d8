"""A DL4J network's configuration: read from a file, JSON text or a live Java object, checked before
DL4J sees it, and turned into DL4J's own configuration and an initialised network.

The one place pyd4j tells a MultiLayerConfiguration from a ComputationGraphConfiguration (`kind_of`)
and calls DL4J's `fromJson`: every command, the planner's graph, the probe and the server read a
network here, so that they accept and refuse the same configurations with the same words.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyd4j.jvm
from pyd4j.inputs import JAVA_INT_MAX, InputError, parse_json, read_text
from pyd4j.dl4j.sizecheck import check_parameters_fit
from pyd4j.jvm import java_errors, translate
from pyd4j.output import stdout_to_stderr

MULTILAYER = "MultiLayerNetwork"
GRAPH = "ComputationGraph"
KINDS = (MULTILAYER, GRAPH)
FIX = ("give a DL4J configuration JSON written by MultiLayerConfiguration.toJson() / "
       "ComputationGraphConfiguration.toJson() (conf.toJson(); examples/networks/ has several)")


class ConfigurationError(InputError):
    """A DL4J network configuration pyd4j cannot read; the message names what is wrong and the fix."""


def kind_of(doc: Any) -> str | None:
    """'MultiLayerNetwork' or 'ComputationGraph' for a configuration document, None for anything else."""
    if not isinstance(doc, dict):
        return None
    if "vertices" in doc and "networkInputs" in doc:
        return GRAPH
    if "confs" in doc:
        return MULTILAYER
    return None


def is_graph(doc: dict[str, Any]) -> bool:
    return kind_of(doc) == GRAPH


def check_document(doc: Any, where: str) -> str:
    """The kind of a configuration document, its layers checked; ConfigurationError naming what is wrong."""
    if not isinstance(doc, dict):
        raise ConfigurationError(f"{where} holds a JSON {type(doc).__name__}, not a DL4J configuration object")
    kind = kind_of(doc)
    if kind is None:
        raise ConfigurationError(
            f"{where} is JSON but not a DL4J network configuration (no 'confs' for a MultiLayerConfiguration, "
            f"no 'vertices' and 'networkInputs' for a ComputationGraphConfiguration); write it with conf.toJson()")
    _check_layers(doc, kind, where)
    return kind


def layer_documents(doc: dict[str, Any], kind: str | None = None, where: str = "the configuration") -> list[tuple[str, Any]]:
    """(label, layer object) of every layer of a configuration: a MultiLayer's `confs`, a graph's layer vertices."""
    kind = kind or kind_of(doc)
    if kind == MULTILAYER:
        confs = doc["confs"]
        if not isinstance(confs, list) or not confs or not all(isinstance(c, dict) for c in confs):
            raise ConfigurationError(f"{where}: 'confs' must be a non-empty list of layer configurations; "
                                     "write it with conf.toJson()")
        return [(f"layer {i}", c.get("layer")) for i, c in enumerate(confs)]
    vertices = doc["vertices"]
    if not isinstance(vertices, dict) or not vertices:
        raise ConfigurationError(f"{where}: 'vertices' must be a non-empty object; write it with conf.toJson()")
    return [(f"vertex {name!r}", v["layerConf"].get("layer") if isinstance(v["layerConf"], dict) else None)
            for name, v in vertices.items() if isinstance(v, dict) and "layerConf" in v]


def _check_layers(doc: dict[str, Any], kind: str, where: str) -> None:
    """A layer of 0 or fewer units would give a negative memory report and negative flags."""
    for label, layer in layer_documents(doc, kind, where):
        if not isinstance(layer, dict):
            raise ConfigurationError(f"{where}: {label} has no layer object; write the configuration with conf.toJson()")
        for key in ("nin", "nout", "nIn", "nOut"):
            value = layer.get(key)
            # 0: DL4J writes it for a size it infers (a dropout vertex's nIn); a negative size is refused
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 0 <= value <= JAVA_INT_MAX):
                name = layer.get("layerName") or label
                builder = {"nin": "nIn", "nout": "nOut"}.get(key, key)   # the builder's name for the JSON key
                raise ConfigurationError(f"{where}: {label} ({name}) has {builder} = {value!r} (JSON key {key!r}); "
                                         "a layer's size must be a "
                                         f"whole number from 0 (inferred by DL4J) to {JAVA_INT_MAX}: fix the network "
                                         "configuration")


def parse_document(text: str, where: str = "network JSON text") -> tuple[dict[str, Any], str]:
    """(document, kind) of configuration JSON text, checked without a JVM."""
    try:
        doc = parse_json(text, where)
    except InputError as err:
        raise ConfigurationError(f"{err}; {FIX}") from None
    return doc, check_document(doc, where)


def read_document_file(path: str | Path) -> tuple[str, dict[str, Any], str]:
    """(JSON text, document, kind) of a configuration file, checked without a JVM."""
    try:
        text = read_text(path, "network configuration")
    except InputError as err:
        raise ConfigurationError(f"{err}; {FIX}") from None
    doc, kind = parse_document(text, f"network configuration {str(path)!r}")
    return text, doc, kind


def read_config_file(path: str | Path) -> tuple[str, str]:
    """(JSON text, kind) of a DL4J configuration file, checked without a JVM."""
    text, _, kind = read_document_file(path)
    return text, kind


def start_jvm() -> Any:
    """The in-process JVM (started with defaults if nothing started it yet)."""
    with stdout_to_stderr():
        return pyd4j.jvm.start() if not pyd4j.jvm.is_started() else pyd4j.jvm.info()


_UNKNOWN_TYPE = re.compile(r"Could not resolve type id '([^']+)'|Unknown layer type[^:]*: ?([\w.$]+)|"
                           r"ClassNotFoundException:? ?([\w.$]+)")


def java_configuration(text: str, kind: str, where: str) -> Any:
    """DL4J's own configuration object of checked JSON text (in the in-process JVM, started if needed)."""
    import jpype  # noqa: PLC0415

    start_jvm()
    cls = jpype.JClass("org.deeplearning4j.nn.conf." + ("ComputationGraphConfiguration" if kind == GRAPH
                                                         else "MultiLayerConfiguration"))
    try:
        with stdout_to_stderr():
            return cls.fromJson(text)
    except jpype.JException as exc:
        match = _UNKNOWN_TYPE.search(_all_messages(exc))
        if match:
            bad = next(g for g in match.groups() if g)
            raise ConfigurationError(
                f"{where}: unknown layer/vertex type {bad!r} — it is not a class of DL4J 1.0.0-M2.1 on pyd4j's "
                f"classpath; use a built-in DL4J layer, or put the jar with your custom layer on PYD4J_CLASSPATH"
            ) from None
        raise ConfigurationError(f"{where}: DL4J cannot read this configuration: {translate(exc)}") from None


def _all_messages(exc: Any) -> str:
    parts = []
    cur = exc
    while cur is not None:
        parts.append(f"{cur.getClass().getName()}: {cur.getMessage()}")
        cur = cur.getCause()
    return " | ".join(parts)


def configuration_of(obj: Any) -> tuple[Any, str]:
    """(DL4J configuration, kind) of a live configuration or network object."""
    name = str(obj.getClass().getName()) if hasattr(obj, "getClass") else type(obj).__name__
    if name.endswith("MultiLayerConfiguration"):
        return obj, MULTILAYER
    if name.endswith("ComputationGraphConfiguration"):
        return obj, GRAPH
    if name.endswith("MultiLayerNetwork"):
        return obj.getLayerWiseConfigurations(), MULTILAYER
    if name.endswith("ComputationGraph"):
        return obj.getConfiguration(), GRAPH
    raise ConfigurationError(f"cannot read a {name} as a DL4J network: give a DL4J JSON file, a "
                             "MultiLayerConfiguration, a ComputationGraphConfiguration, a MultiLayerNetwork "
                             "or a ComputationGraph")


def document_of(obj: Any) -> tuple[dict[str, Any], str]:
    """(configuration document, kind) of a live configuration or network (DL4J's own toJson())."""
    conf, kind = configuration_of(obj)
    return json.loads(str(conf.toJson())), kind


def network_of(conf: Any, kind: str, init: bool = True, where: str = "the network configuration",
               budget: int | None = None) -> Any:
    """A MultiLayerNetwork or ComputationGraph of a DL4J configuration object; `init`: parameters from
    the configuration's seed, as DL4J's own `init()` makes them, once `pyd4j.dl4j.sizecheck` found
    that they fit `budget` and this machine (TooLargeError before anything is allocated otherwise)."""
    import jpype  # noqa: PLC0415

    cls = jpype.JClass("org.deeplearning4j.nn.graph.ComputationGraph" if kind == GRAPH
                       else "org.deeplearning4j.nn.multilayer.MultiLayerNetwork")
    if init:
        with java_errors():
            check_parameters_fit(conf, where, budget)
    with java_errors(), stdout_to_stderr():
        net = cls(conf)
        if init:
            net.init()
    return net


def build_network(source: str | dict[str, Any], where: str = "the network configuration", init: bool = True) -> Any:
    """An initialised network from configuration JSON text or its parsed document."""
    if isinstance(source, str):
        doc, kind = parse_document(source, where)
        text = source
    else:
        kind, text = check_document(source, where), json.dumps(source)
    return network_of(java_configuration(text, kind, where), kind, init, where)
