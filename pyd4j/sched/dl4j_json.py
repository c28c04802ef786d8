"""DL4J configuration JSON -> planner IR.

Reads what `MultiLayerConfiguration.toJson()` and `ComputationGraphConfiguration.toJson()`
write (DL4J 1.0.0-M2.1) and builds a `Graph` at a given batch size. DL4J JSON does not record
the input shape of a MultiLayerNetwork (only preprocessors hint at it), so `input_shape`
((C, H, W) or (F,)) is taken from the caller, from a `FeedForwardToCnnPreProcessor`, or from the
first layer's `nin` for dense networks.

Mapping: ConvolutionLayer -> CONV (+ ACT unless identity), SubsamplingLayer / GlobalPoolingLayer
-> POOL, DenseLayer -> FC (+ ACT), OutputLayer -> FC + SOFTMAX (every output layer is planned
as a loss layer of the same memory footprint), BatchNormalization -> BN (DL4J applies no
activation after it), ActivationLayer -> ACT, DropoutLayer and any layer's `idropout` ->
DROPOUT, LocalResponseNormalization -> LRN, ElementWiseVertex Add -> JOIN (other ops ->
ELTWISE), MergeVertex -> CONCAT. Anything else raises `UnsupportedLayer` naming the type.
"""

from __future__ import annotations

from typing import Any

from pyd4j.inputs import InputError, parse_json
from pyd4j.sched.graph import Graph, GraphError


class UnsupportedLayer(GraphError):
    """A DL4J layer or vertex type the planner has no model for."""


_ACT = {"ActivationReLU": "relu", "ActivationTanH": "tanh", "ActivationSigmoid": "sigmoid",
        "ActivationLReLU": "relu", "ActivationReLU6": "relu", "ActivationELU": "relu",
        "ActivationSoftmax": "softmax", "ActivationIdentity": None}
_DTYPES = {"FLOAT": "float32", "HALF": "float16", "DOUBLE": "float64", "BFLOAT16": "bfloat16"}


def _simple(cls: str) -> str:
    return cls.rsplit(".", 1)[-1]


def _activation(layer: dict[str, Any]) -> str | None:
    fn = layer.get("activationFn")
    if not fn:
        return None
    name = _simple(fn["@class"])
    if name not in _ACT:
        raise UnsupportedLayer(f"activation {name} of layer {layer.get('layerName')!r} is not "
                               f"supported (supported: {sorted(_ACT)})")
    return _ACT[name]


MAX_SIZE = 2**31 - 1  # DL4J holds layer sizes, kernels and strides in Java ints


def _whole(v: Any, what: str, minimum: int = 1) -> int:
    """A size from the JSON: a whole number from `minimum` to Java's int (0 units or a negative
    kernel would plan negative memory)."""
    if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= MAX_SIZE:
        raise GraphError(f"{what} = {v!r} must be a whole number from {minimum} to {MAX_SIZE}; fix the network "
                         f"configuration (conf.toJson() writes valid ones)")
    return v


def _pair(v: Any, what: str = "size", minimum: int = 1) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        if len(v) != 2:
            raise GraphError(f"{what} = {v!r} must be one number or a pair")
        return _whole(v[0], what, minimum), _whole(v[1], what, minimum)
    n = _whole(v, what, minimum)
    return n, n


class _Builder:
    def __init__(self, g: Graph) -> None:
        self.g = g

    def layer(self, layer: dict[str, Any], x: int) -> int:
        g = self.g
        kind = _simple(layer["@class"])
        name = layer.get("layerName")
        drop = layer.get("idropout")
        if drop and kind != "DropoutLayer":
            x = g.dropout(x, 1.0 - float(drop.get("p", 1.0)), name=f"{name}_idropout")
        if kind in ("ConvolutionLayer", "Convolution2D"):
            kh, kw = _pair(layer["kernelSize"], f"{name}: kernelSize")
            sh, _ = _pair(layer["stride"], f"{name}: stride")
            if layer.get("convolutionMode") == "Same":
                ph, pw = (kh - 1) // 2, (kw - 1) // 2
            else:
                ph, pw = _pair(layer.get("padding", [0, 0]), f"{name}: padding", minimum=0)
            x = g.conv(x, _whole(layer["nout"], f"{name}: nOut"), (kh, kw), sh, (ph, pw),
                       bias=bool(layer.get("hasBias", True)), name=name)
            return self._act(layer, x, name)
        if kind in ("DenseLayer", "OutputLayer"):
            x = g.fc(x, _whole(layer["nout"], f"{name}: nOut"), bias=bool(layer.get("hasBias", True)), name=name)
            if kind == "OutputLayer":
                return g.softmax(x, name=f"{name}_loss")
            return self._act(layer, x, name)
        if kind == "SubsamplingLayer":
            k, _ = _pair(layer["kernelSize"], f"{name}: kernelSize")
            s, _ = _pair(layer["stride"], f"{name}: stride")
            p, _ = _pair(layer.get("padding", [0, 0]), f"{name}: padding", minimum=0)
            mode = {"MAX": "max", "AVG": "avg"}.get(layer.get("poolingType", "MAX"))
            if mode is None:
                raise UnsupportedLayer(f"pooling type {layer.get('poolingType')} of {name!r}")
            same = layer.get("convolutionMode") == "Same"
            return g.pool(x, k, s, 0 if same else p, mode, name=name, ceil=same)
        if kind == "GlobalPoolingLayer":
            return g.global_pool(x, name=name)
        if kind == "BatchNormalization":
            return g.bn(x, name=name)
        if kind == "ActivationLayer":
            return self._act(layer, x, name, force=True)
        if kind == "DropoutLayer":
            p = float((drop or {}).get("p", 0.5))
            return g.dropout(x, 1.0 - p, name=name)
        if kind == "LocalResponseNormalization":
            return g.lrn(x, _whole(layer.get("n", 5), f"{name}: n"), float(layer.get("alpha", 1e-4)),
                         float(layer.get("beta", 0.75)), float(layer.get("k", 2.0)), name=name)
        raise UnsupportedLayer(f"DL4J layer type {kind} ({layer['@class']}) of layer {name!r} "
                               "is not supported by the planner")

    def _act(self, layer: dict[str, Any], x: int, name: str | None, force: bool = False) -> int:
        fn = _activation(layer)
        if fn is None and not force:
            return x
        if fn == "softmax":
            raise UnsupportedLayer(f"softmax activation outside an output layer ({name!r})")
        return self.g.act(x, fn or "relu", name=f"{name}_act" if not force else name)


def graph_from_dl4j_json(text: str | dict[str, Any], batch: int = 32,
                         input_shape: tuple[int, ...] | None = None) -> Graph:
    """Build the IR from DL4J configuration JSON (a string or the parsed document).

    Anything that is not a DL4J configuration the planner can model raises GraphError (or its
    UnsupportedLayer) naming what is wrong, never a KeyError or TypeError from deep inside."""
    if isinstance(text, str):
        try:
            doc = parse_json(text, "DL4J configuration JSON")
        except InputError as err:
            raise GraphError(str(err)) from None
    else:
        doc = text
    if not isinstance(doc, dict) or not ("confs" in doc or "vertices" in doc):
        raise GraphError("not a DL4J MultiLayerConfiguration or ComputationGraphConfiguration JSON "
                         "(no 'confs' and no 'vertices')")
    if input_shape is not None:
        input_shape = tuple(_whole(d, "input shape") for d in input_shape)
    try:
        return _multilayer(doc, batch, input_shape) if "confs" in doc else _graph(doc, batch, input_shape)
    except GraphError:
        raise
    except (KeyError, TypeError, AttributeError, IndexError, ValueError, OverflowError) as err:
        what = f"no {err}" if isinstance(err, KeyError) else f"{type(err).__name__}: {err}"
        raise GraphError(f"malformed DL4J configuration JSON ({what}); write it with conf.toJson()") from None


def _dtype(doc: dict[str, Any]) -> str:
    return _DTYPES.get(doc.get("dataType", "FLOAT"), "float32")


def _infer_input(doc: dict[str, Any], first: dict[str, Any]) -> tuple[int, ...]:
    pre = (doc.get("inputPreProcessors") or {}).get("0")
    if pre and _simple(pre["@class"]) == "FeedForwardToCnnPreProcessor":
        return (_whole(pre["numChannels"], "preprocessor numChannels"), _whole(pre["inputHeight"], "preprocessor inputHeight"),
                _whole(pre["inputWidth"], "preprocessor inputWidth"))
    if _simple(first["@class"]) in ("DenseLayer", "OutputLayer"):
        return (_whole(first["nin"], "first layer nIn"),)
    raise GraphError("DL4J JSON does not record this network's input shape: pass input_shape "
                     "(C, H, W) or (features,)")


def _multilayer(doc: dict[str, Any], batch: int, input_shape: tuple[int, ...] | None) -> Graph:
    layers = [c["layer"] for c in doc["confs"]]
    shape = tuple(input_shape) if input_shape else _infer_input(doc, layers[0])
    g = Graph("dl4j_multilayer", batch, _dtype(doc))
    b = _Builder(g)
    x = g.data(*shape, name="input")
    for layer in layers:
        x = b.layer(layer, x)
    g.validate()
    return g


def _graph(doc: dict[str, Any], batch: int, input_shape: tuple[int, ...] | None) -> Graph:
    inputs = doc["networkInputs"]
    if len(inputs) != 1:
        raise GraphError(f"only single-input graphs are supported, got inputs {inputs}")
    if input_shape is None:
        raise GraphError("DL4J ComputationGraph JSON does not record input shapes: pass "
                         "input_shape (C, H, W) or (features,)")
    vin: dict[str, list[str]] = doc["vertexInputs"]
    vertices: dict[str, dict[str, Any]] = doc["vertices"]
    g = Graph("dl4j_graph", batch, _dtype(doc))
    b = _Builder(g)
    ids = {inputs[0]: g.data(*input_shape, name=inputs[0])}
    pending = [v for v in vertices]
    while pending:
        progressed = False
        for v in list(pending):
            srcs = vin.get(v, [])
            if not all(s in ids for s in srcs):
                continue
            ids[v] = _vertex(b, v, vertices[v], [ids[s] for s in srcs])
            pending.remove(v)
            progressed = True
        if not progressed:
            raise GraphError(f"graph has a cycle or unknown inputs among {pending}")
    g.validate()
    return g


def _vertex(b: _Builder, name: str, vertex: dict[str, Any], xs: list[int]) -> int:
    kind = _simple(vertex["@class"])
    g = b.g
    if kind == "LayerVertex":
        if len(xs) != 1:
            raise GraphError(f"layer vertex {name!r} has {len(xs)} inputs")
        layer = dict(vertex["layerConf"]["layer"])
        layer.setdefault("layerName", name)
        return b.layer(layer, xs[0])
    if kind == "ElementWiseVertex":
        op = vertex.get("op", "Add")
        if op == "Add":
            return g.join(xs, name=name)
        return g.eltwise(xs, {"Product": "prod", "Max": "max"}.get(op, "sum"), name=name)
    if kind == "MergeVertex":
        return g.concat(xs, name=name)
    raise UnsupportedLayer(f"DL4J vertex type {kind} ({vertex['@class']}) of vertex {name!r} "
                           "is not supported by the planner")
