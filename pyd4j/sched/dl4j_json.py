"""DL4J configuration JSON -> the DL4J-faithful planner graph.

Reads what `MultiLayerConfiguration.toJson()` and `ComputationGraphConfiguration.toJson()` write
(DL4J 1.0.0-M2.1) and builds a `Graph` at a given batch size with one node per DL4J layer or
graph vertex -- exactly the steps DL4J runs -- plus one DATA node per network input:

- a DL4J layer applies its activation and its input dropout itself, so a DenseLayer with ReLU is
  one FC node (`attrs["act"]`), a layer with `idropout` keeps one node (`attrs["idropout"]`, the
  retain probability), and a layer's input preprocessor (CnnToFeedForward, ...) belongs to its node;
- ConvolutionLayer -> CONV, DenseLayer -> FC, OutputLayer -> SOFTMAX (the loss node, with the
  output layer's weights), SubsamplingLayer / GlobalPoolingLayer -> POOL, BatchNormalization -> BN
  (4 parameters per channel: gamma, beta, global mean, global variance or log-std),
  ActivationLayer -> ACT, DropoutLayer -> DROPOUT, LocalResponseNormalization -> LRN;
  ElementWiseVertex Add -> JOIN (other ops -> ELTWISE), MergeVertex -> CONCAT. Average pooling
  and global pooling carry `attrs["variant"]` (`avg`, `global_max`, `global_avg`): the dependency
  model's entries differ (average pooling's backward does not read its input).
  Anything else raises `UnsupportedLayer` naming the type;
- shapes follow DL4J's rules (ConvolutionMode Same: ceil(in / stride); Truncate: floor);
- graph vertices come in DL4J's own topological order (`ComputationGraph.topologicalSortOrder()`,
  Kahn's algorithm over inputs-then-vertices in JSON order), so a plan's forward steps run in the
  order DL4J's `fit()` runs them.

Each node's `attrs["dl4j"]` names what it is in the network: `{"layer": i, "class": ...}` for a
MultiLayerNetwork layer, `{"vertex": name, "class": ...}` for a graph vertex, `{"input": k,
"vertex": name}` for a network input. `pyd4j.sched.training_plan` writes it into plan files; the
Java planned trainer (org.pyd4j.train) checks it against the live network.

DL4J JSON does not record a MultiLayerNetwork's input shape (only preprocessors hint at it), so
`input_shape` ((C, H, W) or (F,)) comes from the caller, from a FeedForwardToCnnPreProcessor, or
from the first layer's `nin` for dense networks.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from pyd4j.inputs import InputError, parse_json
from pyd4j.sched.graph import Graph, GraphError, LayerType


class UnsupportedLayer(GraphError):
    """A DL4J layer or vertex type the planner has no model for."""


_ACT = {"ActivationReLU": "relu", "ActivationTanH": "tanh", "ActivationSigmoid": "sigmoid",
        "ActivationLReLU": "leakyrelu", "ActivationReLU6": "relu6", "ActivationELU": "elu",
        "ActivationSoftmax": "softmax", "ActivationIdentity": "identity"}
_DTYPES = {"FLOAT": "float32", "HALF": "float16", "DOUBLE": "float64", "BFLOAT16": "bfloat16"}
_ELTWISE = {"Add": None, "Product": "prod", "Max": "max", "Average": "sum", "Subtract": "sum"}


def _simple(cls: str) -> str:
    return cls.rsplit(".", 1)[-1]


def _activation(layer: dict[str, Any]) -> str:
    fn = layer.get("activationFn")
    if not fn:
        return "identity"
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


def _check_nin(layer: dict[str, Any], kind: str, xs: tuple[int, ...], name: str) -> None:
    """A declared nIn must be what the layer is fed: DL4J builds its weights from nIn."""
    fed = {"ConvolutionLayer": 1, "Convolution2D": 1, "DenseLayer": 0, "OutputLayer": 0}.get(kind)
    if fed is None or layer.get("nin") is None:
        return
    want = xs[1] if fed == 1 and len(xs) == 4 else math.prod(xs[1:])
    nin = _whole(layer["nin"], f"{name}: nIn")
    if nin != want:
        raise GraphError(f"{name}: nIn = {nin}, but the layer is fed {want} {'channels' if fed else 'features'}; "
                         f"set nIn({want}) or let DL4J infer it (setInputType) and write the JSON again")


def _out_size(size: int, kernel: int, stride: int, pad: int, dilation: int, same: bool) -> int:
    """DL4J's output size (ConvolutionUtils.getOutputSize): Same rounds up, Truncate down."""
    if same:
        return -(-size // stride)
    eff = kernel + (kernel - 1) * (dilation - 1)
    return (size + 2 * pad - eff) // stride + 1


def _retain(layer: dict[str, Any]) -> float | None:
    """Retain probability of a layer's input dropout (DL4J's p), None without dropout."""
    drop = layer.get("idropout")
    if not drop:
        return None
    kind = _simple(drop["@class"])
    if kind != "Dropout":
        raise UnsupportedLayer(f"input dropout {kind} of layer {layer.get('layerName')!r} is not "
                               "supported (only Dropout)")
    return float(drop.get("p", 1.0))


class _Builder:
    """Adds one node per DL4J layer; shapes and FLOPs as DL4J computes them."""

    def __init__(self, g: Graph) -> None:
        self.g = g

    def layer(self, layer: dict[str, Any], x: int, dl4j: dict[str, Any],
              preprocessor: dict[str, Any] | None = None) -> int:
        g = self.g
        kind = _simple(layer["@class"])
        name = layer.get("layerName") or f"layer{dl4j.get('layer', len(g.layers))}"
        attrs: dict[str, Any] = {"dl4j": {**dl4j, "class": kind}}
        p = _retain(layer)
        if p is not None:
            attrs["idropout"] = p
        if preprocessor is not None:
            attrs["preprocessor"] = _simple(preprocessor["@class"])
        xs = g.shape(x)
        n = g.batch
        _check_nin(layer, kind, xs, name)
        if kind in ("ConvolutionLayer", "Convolution2D"):
            c, h, w = self._chw(xs, name)
            kh, kw = _pair(layer["kernelSize"], f"{name}: kernelSize")
            sh, sw = _pair(layer.get("stride", [1, 1]), f"{name}: stride")
            ph, pw = _pair(layer.get("padding", [0, 0]), f"{name}: padding", minimum=0)
            dh, dw = _pair(layer.get("dilation", [1, 1]), f"{name}: dilation")
            same = layer.get("convolutionMode") == "Same"
            oh, ow = _out_size(h, kh, sh, ph, dh, same), _out_size(w, kw, sw, pw, dw, same)
            cout = _whole(layer["nout"], f"{name}: nOut")
            params: tuple[tuple[int, ...], ...] = ((cout, c, kh, kw),)
            if layer.get("hasBias", True):
                params += ((cout,),)
            macs = n * cout * oh * ow * c * kh * kw
            return g._add(LayerType.CONV, (x,), (n, cout, oh, ow), name, params, 2.0 * macs,
                          4.0 * macs, kernel=(kh, kw), stride=sh, pad=(ph, pw), bias=bool(len(params) > 1),
                          act=_activation(layer), **attrs)
        if kind in ("DenseLayer", "OutputLayer"):
            f = math.prod(xs[1:])
            cout = _whole(layer["nout"], f"{name}: nOut")
            params = ((f, cout),) + (((cout,),) if layer.get("hasBias", True) else ())
            macs = n * f * cout
            ltype = LayerType.SOFTMAX if kind == "OutputLayer" else LayerType.FC
            if kind == "OutputLayer":
                attrs["loss"] = _simple(layer.get("lossFn", {}).get("@class", "?"))
            return g._add(ltype, (x,), (n, cout), name, params, 2.0 * macs, 4.0 * macs,
                          act=_activation(layer), bias=len(params) > 1, **attrs)
        if kind == "SubsamplingLayer":
            c, h, w = self._chw(xs, name)
            kh, kw = _pair(layer["kernelSize"], f"{name}: kernelSize")
            sh, sw = _pair(layer.get("stride", [1, 1]), f"{name}: stride")
            ph, pw = _pair(layer.get("padding", [0, 0]), f"{name}: padding", minimum=0)
            dh, dw = _pair(layer.get("dilation", [1, 1]), f"{name}: dilation")
            mode = {"MAX": "max", "AVG": "avg"}.get(layer.get("poolingType", "MAX"))
            if mode is None:
                raise UnsupportedLayer(f"pooling type {layer.get('poolingType')} of {name!r}")
            same = layer.get("convolutionMode") == "Same"
            oh, ow = _out_size(h, kh, sh, ph, dh, same), _out_size(w, kw, sw, pw, dw, same)
            return g._add(LayerType.POOL, (x,), (n, c, oh, ow), name, (),
                          float(n * c * oh * ow * kh * kw), kernel=kh, stride=sh, pad=ph,
                          mode=mode, **({"variant": "avg"} if mode == "avg" else {}), **attrs)
        if kind == "GlobalPoolingLayer":
            c, h, w = self._chw(xs, name)
            mode = {"MAX": "max", "AVG": "avg"}.get(layer.get("poolingType", "MAX"))
            if mode is None or not layer.get("collapseDimensions", True):
                raise UnsupportedLayer(f"global pooling {layer.get('poolingType')} of {name!r} "
                                       "(supported: MAX, AVG with collapsed dimensions)")
            return g._add(LayerType.POOL, (x,), (n, c), name, (), float(n * c * h * w),
                          kernel=h, stride=h, pad=0, mode=mode, global_pool=True,
                          variant=f"global_{mode}", **attrs)
        if kind == "BatchNormalization":
            c = xs[1]
            return g._add(LayerType.BN, (x,), xs, name, ((4 * c,),), 8.0 * math.prod(xs),
                          **attrs)
        if kind == "ActivationLayer":
            fn = _activation(layer)
            if fn == "softmax":
                raise UnsupportedLayer(f"softmax activation outside an output layer ({name!r})")
            return g._add(LayerType.ACT, (x,), xs, name, fn=fn, **attrs)
        if kind == "DropoutLayer":  # its dropout is the node itself, not an input dropout
            attrs.pop("idropout", None)
            return g._add(LayerType.DROPOUT, (x,), xs, name, p=1.0 - (p if p is not None else 1.0),
                          **attrs)
        if kind == "LocalResponseNormalization":
            self._chw(xs, name)
            size = _whole(layer.get("n", 5), f"{name}: n")
            return g._add(LayerType.LRN, (x,), xs, name, fwd=float(math.prod(xs) * (size + 4)),
                          size=size, alpha=float(layer.get("alpha", 1e-4)),
                          beta=float(layer.get("beta", 0.75)), k=float(layer.get("k", 2.0)), **attrs)
        raise UnsupportedLayer(f"DL4J layer type {kind} ({layer['@class']}) of layer {name!r} "
                               "is not supported by the planner")

    @staticmethod
    def _chw(shape: tuple[int, ...], name: str) -> tuple[int, int, int]:
        if len(shape) != 4:
            raise GraphError(f"layer {name!r} expects an NCHW input, got {shape}")
        return shape[1], shape[2], shape[3]


def graph_from_dl4j_json(text: str | dict[str, Any], batch: int = 32,
                         input_shape: tuple[int, ...] | None = None,
                         profile: str = "dl4j") -> Graph:
    """Build the DL4J-faithful graph from configuration JSON (a string or the parsed document),
    under the dependency profile `profile` (DL4J's own by default; see `pyd4j.sched.deps`).

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
        graph = _multilayer(doc, batch, input_shape) if "confs" in doc else _graph(doc, batch, input_shape)
    except GraphError:
        raise
    except (KeyError, TypeError, AttributeError, IndexError, ValueError, OverflowError) as err:
        what = f"no {err}" if isinstance(err, KeyError) else f"{type(err).__name__}: {err}"
        raise GraphError(f"malformed DL4J configuration JSON ({what}); write it with conf.toJson()") from None
    return graph.with_profile(profile)


def network_kind(doc: dict[str, Any]) -> str:
    """'MultiLayerNetwork' or 'ComputationGraph' for a configuration document."""
    return "MultiLayerNetwork" if "confs" in doc else "ComputationGraph"


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


def _reshape_input(g: Graph, x: int, pre: dict[str, Any] | None) -> None:
    """A FeedForwardToCnn preprocessor on layer 0 reshapes the flat input: plan on its shape."""
    if pre and _simple(pre["@class"]) == "FeedForwardToCnnPreProcessor":
        c, h, w = int(pre["numChannels"]), int(pre["inputHeight"]), int(pre["inputWidth"])
        layer = g.layers[x]
        if math.prod(layer.out_shape[1:]) != c * h * w:
            raise GraphError(f"input of shape {layer.out_shape[1:]} does not reshape to ({c}, {h}, {w})")
        layer.out_shape = (g.batch, c, h, w)


def _multilayer(doc: dict[str, Any], batch: int, input_shape: tuple[int, ...] | None) -> Graph:
    layers = [c["layer"] for c in doc["confs"]]
    shape = tuple(input_shape) if input_shape else _infer_input(doc, layers[0])
    pres = doc.get("inputPreProcessors") or {}
    g = Graph("dl4j_multilayer", batch, _dtype(doc))
    b = _Builder(g)
    x = g.data(*shape, name="input")
    g.layers[x].attrs["dl4j"] = {"input": 0}
    for i, layer in enumerate(layers):
        pre = pres.get(str(i))
        if i == 0:
            _reshape_input(g, x, pre)
        x = b.layer(layer, x, {"layer": i}, pre)
    g.validate()
    return g


def dl4j_topological_order(doc: dict[str, Any]) -> list[str]:
    """Vertex names (inputs first) in the order ComputationGraph.topologicalSortOrder() gives:
    indices are the network inputs, then the vertices in configuration order; Kahn's algorithm
    with a FIFO queue seeded and extended in ascending index order."""
    names = list(doc["networkInputs"]) + [v for v in doc["vertices"] if v not in doc["networkInputs"]]
    index = {name: i for i, name in enumerate(names)}
    vin: dict[str, list[str]] = doc.get("vertexInputs", {})
    inputs = {index[v]: {index[s] for s in vin.get(v, [])} for v in names}
    outputs: dict[int, set[int]] = {i: set() for i in range(len(names))}
    for v, srcs in inputs.items():
        for s in srcs:
            outputs[s].add(v)
    queue = deque(i for i in sorted(inputs) if not inputs[i])
    order: list[int] = []
    while queue:
        i = queue.popleft()
        order.append(i)
        for o in sorted(outputs[i]):
            inputs[o].discard(i)
            if not inputs[o]:
                queue.append(o)
    if len(order) != len(names):
        stuck = sorted(names[i] for i in inputs if inputs[i])
        raise GraphError(f"graph has a cycle or unknown inputs among {stuck}")
    return [names[i] for i in order]


def _graph(doc: dict[str, Any], batch: int, input_shape: tuple[int, ...] | None) -> Graph:
    inputs = doc["networkInputs"]
    if len(inputs) != 1:
        raise GraphError(f"only single-input graphs are supported, got inputs {inputs}")
    if input_shape is None:
        raise GraphError("DL4J ComputationGraph JSON does not record input shapes: pass "
                         "input_shape (C, H, W) or (features,)")
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
    b = _Builder(g)
    ids: dict[str, int] = {}
    for name in dl4j_topological_order(doc):
        if name in inputs:
            ids[name] = g.data(*input_shape, name=name)
            g.layers[ids[name]].attrs["dl4j"] = {"input": inputs.index(name), "vertex": name}
        else:
            ids[name] = _vertex(b, name, vertices[name], [ids[s] for s in vin.get(name, [])])
    g.validate()
    return g


def _vertex(b: _Builder, name: str, vertex: dict[str, Any], xs: list[int]) -> int:
    kind = _simple(vertex["@class"])
    g = b.g
    dl4j = {"vertex": name, "class": kind}
    if kind == "LayerVertex":
        if len(xs) != 1:
            raise GraphError(f"layer vertex {name!r} has {len(xs)} inputs")
        layer = dict(vertex["layerConf"]["layer"])
        layer["layerName"] = name
        return b.layer(layer, xs[0], {"vertex": name}, vertex.get("preProcessor"))
    if kind == "ElementWiseVertex":
        op = vertex.get("op", "Add")
        if op not in _ELTWISE:
            raise UnsupportedLayer(f"ElementWiseVertex op {op} of vertex {name!r}")
        i = g.join(xs, name=name) if op == "Add" else g.eltwise(xs, _ELTWISE[op], name=name)
        g.layers[i].attrs.update(dl4j={**dl4j, "op": op})
        return i
    if kind == "MergeVertex":
        shapes = [g.shape(x) for x in xs]
        if all(len(s) == 2 for s in shapes):  # merging feature vectors
            i = g._add(LayerType.CONCAT, tuple(xs), (g.batch, sum(s[1] for s in shapes)), name)
        else:
            i = g.concat(xs, name=name)
        g.layers[i].attrs["dl4j"] = dl4j
        return i
    raise UnsupportedLayer(f"DL4J vertex type {kind} ({vertex['@class']}) of vertex {name!r} "
                           "is not supported by the planner")
