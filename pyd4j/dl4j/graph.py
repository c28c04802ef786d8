"""DL4J configuration JSON -> the DL4J-faithful planner graph.

Reads what `MultiLayerConfiguration.toJson()` and `ComputationGraphConfiguration.toJson()` write
(DL4J 1.0.0-M2.1) and builds a `Graph` at a given batch size with one node per DL4J layer or
graph vertex -- exactly the steps DL4J runs -- plus one DATA node per network input:

- a DL4J layer applies its activation and its input dropout itself, so a DenseLayer with ReLU is
  one FC node (`attrs["act"]`), a layer with `idropout` keeps one node (`attrs["idropout"]`, the
  retain probability), and a layer's input preprocessor (CnnToFeedForward, ...) belongs to its node;
- ConvolutionLayer -> CONV, DenseLayer -> FC, OutputLayer -> SOFTMAX (the loss node, with the
  output layer's weights), SubsamplingLayer / GlobalPoolingLayer (of NCHW maps) -> POOL, BatchNormalization -> BN
  (4 parameters per channel: gamma, beta, global mean, global variance or log-std),
  ActivationLayer -> ACT, DropoutLayer -> DROPOUT, LocalResponseNormalization -> LRN;
  ElementWiseVertex Add -> JOIN (other ops -> ELTWISE), MergeVertex -> CONCAT. Average pooling
  and global pooling carry `attrs["variant"]` (`avg`, `global_max`, `global_avg`): the dependency
  model's entries differ (global average pooling's backward does not need its input).
  Loss layers other than OutputLayer (LossLayer, CnnLossLayer, RnnOutputLayer,
  CenterLossOutputLayer, Yolo2OutputLayer, ...) -> SOFTMAX (the loss node). Every other layer or
  vertex -> OPAQUE: run as DL4J runs it, its inputs and output kept for its backward step, never
  recomputed; its shape by DL4J's rule here (padding, cropping, upsampling, space-to-depth,
  separable / depthwise / transposed convolutions, recurrent layers on (N, C, T), Bidirectional,
  LastTimeStep, the zoo's vertices) or from DL4J's own shape inference (`info`), its working
  memory from a probe iteration (`info`; `probed_graph` runs one); a type with neither raises
  `UnsupportedLayer` naming it.
  Under truncated BPTT one iteration is one segment of tbpttFwdLength time steps: the graph is built
  at that length;
- shapes follow DL4J's rules (ConvolutionMode Same: ceil(in / stride); Truncate: floor);
- graph vertices come in DL4J's own topological order (`ComputationGraph.topologicalSortOrder()`,
  Kahn's algorithm over inputs-then-vertices in JSON order), so a plan's forward steps run in the
  order DL4J's `fit()` runs them.

Each node's `attrs["dl4j"]` names what it is in the network: `{"layer": i, "class": ...}` for a
MultiLayerNetwork layer, `{"vertex": name, "class": ...}` for a graph vertex, `{"input": k,
"vertex": name}` for a network input. `pyd4j.dl4j.plan_file` writes it into plan files; the
Java planned trainer (org.pyd4j.train) checks it against the live network.

DL4J JSON does not record a MultiLayerNetwork's input shape (only preprocessors hint at it), so
`input_shape` ((C, H, W) or (F,)) comes from the caller, from a FeedForwardToCnnPreProcessor, or
from the first layer's `nin` for dense networks.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Sequence

from pyd4j.dl4j.config import MULTILAYER, ConfigurationError, check_document, is_graph, kind_of, parse_document
from pyd4j.dl4j.probe import Probe
from pyd4j.dl4j.updater_state import layer_state_elements
from pyd4j.dl4j.builder import Builder, vertex
from pyd4j.dl4j.layer_rules import DTYPES, UnsupportedLayer, simple_name, whole
from pyd4j.sched.graph import Graph, GraphError, LayerType

__all__ = ["UnsupportedLayer", "dl4j_topological_order", "graph_from_dl4j_json", "network_kind", "probed_graph"]


def graph_from_dl4j_json(text: str | dict[str, Any], batch: int = 32,
                         input_shape: tuple[int, ...] | Sequence[tuple[int, ...]] | None = None,
                         framework: str = "dl4j", info: dict[str, dict[str, Any]] | None = None) -> Graph:
    """Build the DL4J-faithful graph from configuration JSON (a string or the parsed document),
    under the dependencies of `framework` (DL4J's own by default; see `pyd4j.sched.deps`).
    `input_shape`: one shape without the batch, or for a graph with several inputs one shape per
    network input, in the order of its `networkInputs`.

    `info` (layer or vertex name -> {"shape": per-sample output shape, "params": count,
    "measured": {"ws_forward", "ws_backward", "saved"}}) is what DL4J itself says of its OPAQUE
    nodes: its shape inference and a probe iteration (`org.pyd4j.train.LayerProbe`; `probed_graph`
    runs it); layers without a rule here need it.

    Anything that is not a DL4J configuration the planner can model raises GraphError (or its
    UnsupportedLayer) naming what is wrong, never a KeyError or TypeError from deep inside."""
    doc = _document(text)
    if input_shape is not None:
        input_shape = _segment(doc, _shapes(input_shape))
    try:
        graph = (_graph(doc, batch, input_shape, info) if is_graph(doc)
                 else _multilayer(doc, batch, input_shape, info))
    except GraphError:
        raise
    except (KeyError, TypeError, AttributeError, IndexError, ValueError, OverflowError) as err:
        what = f"no {err}" if isinstance(err, KeyError) else f"{type(err).__name__}: {err}"
        raise GraphError(f"malformed DL4J configuration JSON ({what}); write it with conf.toJson()") from None
    return graph.with_framework(framework)


def _document(text: str | dict[str, Any]) -> dict[str, Any]:
    """The configuration document of a DL4J configuration JSON (a string or already parsed)."""
    try:
        if isinstance(text, str):
            return parse_document(text, "DL4J configuration JSON")[0]
        check_document(text, "the DL4J configuration")
    except ConfigurationError as err:
        raise GraphError(str(err)) from None
    return text


def probed_graph(text: str | dict[str, Any], batch: int = 32,
                 input_shape: tuple[int, ...] | Sequence[tuple[int, ...]] | None = None,
                 probe: Probe | None = None, framework: str = "dl4j") -> Graph:
    """The planner's graph of a DL4J network, with what DL4J itself says where the rules here do not
    suffice: when the graph has OPAQUE nodes (their working memory is then measured, not guessed) or a
    layer has no shape rule here, `probe` runs a probe iteration at the planned input shapes and the
    graph is built again with its answer (`info`). Without a probe, as graph_from_dl4j_json. The one
    way pyd4j.train.fit (the live network), `pyd4j plan` and the agent route (`pyd4j.dl4j.plan_file.plan_for_job`:
    a network built from its configuration) plan a DL4J network, so that they accept the same networks."""
    doc = _document(text)
    try:
        graph = graph_from_dl4j_json(doc, batch, input_shape, framework)
    except UnsupportedLayer:
        if probe is None or input_shape is None:
            raise
        given = _segment(doc, _shapes(input_shape))
        inputs = [(batch, *s) for s in (given if given and isinstance(given[0], tuple) else (given,))]
    else:
        if probe is None or not any(layer.type is LayerType.OPAQUE for layer in graph.layers):
            return graph
        inputs = [tuple(layer.out_shape) for layer in graph.layers if layer.type is LayerType.DATA]
    return graph_from_dl4j_json(doc, batch, input_shape, framework, info=probe(inputs))


def _shapes(given: Any) -> tuple[int, ...] | tuple[tuple[int, ...], ...]:
    """One input shape (whole numbers), or one per network input (a sequence of shapes)."""
    if isinstance(given, (list, tuple)) and given and all(isinstance(d, (list, tuple)) for d in given):
        return tuple(tuple(whole(d, f"input shape {k}") for d in shape) for k, shape in enumerate(given))
    return tuple(whole(d, "input shape") for d in given)


def _segment(doc: dict[str, Any], shape: tuple) -> tuple:
    """The input shape one iteration sees. Under truncated BPTT DL4J's fit() cuts each sequence into
    segments of tbpttFwdLength steps and trains one iteration per segment, so a (features, T) input is
    planned at (features, min(T, tbpttFwdLength)); a graph's inputs that are not sequences stay whole, as
    DL4J keeps them."""
    if doc.get("backpropType") != "TruncatedBPTT":
        return shape
    fwd = whole(doc.get("tbpttFwdLength"), "tbpttFwdLength")
    if not is_graph(doc):
        one = _one_shape(shape)
        if len(one) != 2:
            raise GraphError(f"the network trains with truncated BPTT: its input is a sequence (features, time steps); "
                             f"got input shape {list(one)}")
        return (one[0], min(one[1], fwd))
    shapes = list(shape) if shape and isinstance(shape[0], tuple) else [shape]
    cut = tuple((s[0], min(s[1], fwd)) if len(s) == 2 else s for s in shapes)
    return cut if shape and isinstance(shape[0], tuple) else cut[0]


def _one_shape(shape: tuple | None) -> tuple[int, ...] | None:
    """The single input shape of a MultiLayerNetwork (a list of one shape is that shape)."""
    if shape and isinstance(shape[0], tuple):
        if len(shape) != 1:
            raise GraphError(f"a MultiLayerNetwork has one input; got {len(shape)} input shapes {list(shape)}")
        return shape[0]
    return shape


def _input_shapes(shape: tuple | None, inputs: list[str]) -> list[tuple[int, ...]]:
    """One shape per network input of a graph, from one shape (one input) or one per input."""
    if shape is None:
        raise GraphError("DL4J ComputationGraph JSON does not record input shapes: pass "
                         "input_shape (C, H, W) or (features,)" + (f", one per input {inputs}" if len(inputs) > 1 else ""))
    shapes = list(shape) if shape and isinstance(shape[0], tuple) else [shape]
    if len(shapes) != len(inputs):
        raise GraphError(f"the graph has {len(inputs)} inputs {inputs}; got {len(shapes)} input shape(s) "
                         f"{[list(s) for s in shapes]}: pass one shape per input, in this order")
    return shapes


def network_kind(doc: dict[str, Any]) -> str:
    """'MultiLayerNetwork' or 'ComputationGraph' for a configuration document."""
    return kind_of(doc) or MULTILAYER


def _dtype(doc: dict[str, Any]) -> str:
    return DTYPES.get(doc.get("dataType", "FLOAT"), "float32")


def _infer_input(doc: dict[str, Any], first: dict[str, Any]) -> tuple[int, ...]:
    pre = (doc.get("inputPreProcessors") or {}).get("0")
    if pre and simple_name(pre["@class"]) == "FeedForwardToCnnPreProcessor":
        return (whole(pre["numChannels"], "preprocessor numChannels"), whole(pre["inputHeight"], "preprocessor inputHeight"),
                whole(pre["inputWidth"], "preprocessor inputWidth"))
    if simple_name(first["@class"]) in ("DenseLayer", "OutputLayer"):
        return (whole(first["nin"], "first layer nIn"),)
    raise GraphError("DL4J JSON does not record this network's input shape: pass input_shape "
                     "(C, H, W) or (features,)")


def _reshape_input(g: Graph, x: int, pre: dict[str, Any] | None) -> None:
    """A FeedForwardToCnn preprocessor on layer 0 reshapes the flat input: plan on its shape."""
    if pre and simple_name(pre["@class"]) == "FeedForwardToCnnPreProcessor":
        c, h, w = int(pre["numChannels"]), int(pre["inputHeight"]), int(pre["inputWidth"])
        layer = g.layers[x]
        if math.prod(layer.out_shape[1:]) != c * h * w:
            raise GraphError(f"input of shape {layer.out_shape[1:]} does not reshape to ({c}, {h}, {w})")
        layer.out_shape = (g.batch, c, h, w)


def _multilayer(doc: dict[str, Any], batch: int, input_shape: tuple[int, ...] | None,
                info: dict[str, dict[str, Any]] | None = None) -> Graph:
    layers = [c["layer"] for c in doc["confs"]]
    input_shape = _one_shape(input_shape)
    shape = tuple(input_shape) if input_shape else _infer_input(doc, layers[0])
    pres = doc.get("inputPreProcessors") or {}
    g = Graph("dl4j_multilayer", batch, _dtype(doc))
    b = Builder(g, info)
    x = g.data(*shape, name="input")
    g.layers[x].attrs["dl4j"] = {"input": 0}
    for i, layer in enumerate(layers):
        pre = pres.get(str(i))
        if i == 0:
            _reshape_input(g, x, pre)
        x = b.layer(layer, x, {"layer": i}, pre)
    _check_outputs(g)
    _record_updater_state(g)
    g.validate()
    return g


def _java_hash_set_order(values: list[int]) -> list[int]:
    """The iteration order of a java.util.HashSet<Integer> filled with `values` in that order:
    by bucket (the value's low bits for the table's capacity: 16, doubled past 3/4 full), then
    insertion order within a bucket."""
    cap = 16
    while len(values) > 0.75 * cap:
        cap *= 2
    return sorted(values, key=lambda v: (v ^ (v >> 16)) & (cap - 1))


def _record_updater_state(g: Graph) -> None:
    """Each layer's updater-state elements, as DL4J's fit() keeps them, for the planner's M tensor."""
    for layer in g.layers:
        if layer.param_shapes:
            layer.attrs["state_elems"] = layer_state_elements(layer)


def _check_outputs(g: Graph) -> None:
    """Every network output must be an output or loss layer: there is nothing to train otherwise."""
    for layer in g.layers:
        if not g.consumers[layer.id] and layer.type is not LayerType.SOFTMAX:
            cls = layer.attrs.get("dl4j", {}).get("class", layer.type.value)
            raise GraphError(f"the network ends in {layer.name!r} ({cls}), which is not an output or loss layer: "
                             "there is no loss to train (DL4J's fit() cannot train it either); end it in an "
                             "OutputLayer or LossLayer")


def dl4j_topological_order(doc: dict[str, Any]) -> list[str]:
    """Vertex names (inputs first) in the order ComputationGraph.topologicalSortOrder() gives:
    the order the configuration recorded (`topologicalOrderStr`, written once a network computed
    it) when present; else Kahn's algorithm as DL4J runs it -- indices are the network inputs, then
    the vertices in configuration order; a FIFO queue seeded in ascending index order and extended
    with each vertex's consumers in the iteration order of DL4J's HashSet of them."""
    recorded = doc.get("topologicalOrderStr")
    names = list(doc["networkInputs"]) + [v for v in doc["vertices"] if v not in doc["networkInputs"]]
    if recorded and sorted(recorded) == sorted(names):
        return list(recorded)
    index = {name: i for i, name in enumerate(names)}
    vin: dict[str, list[str]] = doc.get("vertexInputs", {})
    inputs = {index[v]: {index[s] for s in vin.get(v, [])} for v in names}
    outputs: dict[int, list[int]] = {i: [] for i in range(len(names))}
    for v, srcs in inputs.items():   # consumers in insertion order (ascending vertex index)
        for s in srcs:
            if v not in outputs[s]:
                outputs[s].append(v)
    queue = deque(i for i in sorted(inputs) if not inputs[i])
    order: list[int] = []
    while queue:
        i = queue.popleft()
        order.append(i)
        for o in _java_hash_set_order(outputs[i]):
            inputs[o].discard(i)
            if not inputs[o]:
                queue.append(o)
    if len(order) != len(names):
        stuck = sorted(names[i] for i in inputs if inputs[i])
        raise GraphError(f"graph has a cycle or unknown inputs among {stuck}")
    return [names[i] for i in order]


def _graph(doc: dict[str, Any], batch: int, input_shape: tuple[int, ...] | None,
           info: dict[str, dict[str, Any]] | None = None) -> Graph:
    inputs = doc["networkInputs"]
    shapes = _input_shapes(input_shape, inputs)
    vin: dict[str, list[str]] = doc["vertexInputs"]
    vertices: dict[str, dict[str, Any]] = doc["vertices"]
    unknown = sorted({s for srcs in vin.values() for s in srcs} - set(vertices) - set(inputs))
    if unknown:
        raise GraphError(f"graph vertices read unknown vertices {unknown}")
    outputs = doc.get("networkOutputs")
    if not isinstance(outputs, list) or not outputs or any(o not in vertices for o in outputs):
        raise GraphError(f"networkOutputs {outputs!r} must name vertices of the graph "
                         f"(it has {sorted(vertices)[:8]}); write the configuration with conf.toJson()")
    g = Graph("dl4j_graph", batch, _dtype(doc))
    b = Builder(g, info)
    ids: dict[str, int] = {}
    for name in dl4j_topological_order(doc):
        if name in inputs:
            ids[name] = g.data(*shapes[inputs.index(name)], name=name)
            g.layers[ids[name]].attrs["dl4j"] = {"input": inputs.index(name), "vertex": name}
        else:
            ids[name] = vertex(b, name, vertices[name], [ids[s] for s in vin.get(name, [])])
    _check_outputs(g)
    _record_updater_state(g)
    g.validate()
    return g
