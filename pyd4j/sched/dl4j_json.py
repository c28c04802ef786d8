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
"vertex": name}` for a network input. `pyd4j.sched.training_plan` writes it into plan files; the
Java planned trainer (org.pyd4j.train) checks it against the live network.

DL4J JSON does not record a MultiLayerNetwork's input shape (only preprocessors hint at it), so
`input_shape` ((C, H, W) or (F,)) comes from the caller, from a FeedForwardToCnnPreProcessor, or
from the first layer's `nin` for dense networks.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Callable, Sequence

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
    """The activation's short name. Any DL4J activation is accepted: it does not change what a
    step reads or keeps (the profile's ACT entry covers the activations measured), only its name."""
    fn = layer.get("activationFn")
    if not fn:
        return "identity"
    name = _simple(fn["@class"])
    return _ACT.get(name) or name.removeprefix("Activation").lower()


MAX_SIZE = 2**31 - 1  # DL4J holds layer sizes, kernels and strides in Java ints


def _whole(v: Any, what: str, minimum: int = 1) -> int:
    """A size from the JSON: a whole number from `minimum` to Java's int (0 units or a negative
    kernel would plan negative memory). DL4J writes some sizes as doubles (LRN's `n`: 5.0): a
    whole-valued double is that whole number."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
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
    """DL4J's output size (ConvolutionUtils.getOutputSize): Same rounds up, Truncate down -- with
    Java's integer division, which rounds toward zero: a 1x1 map under a 2x2 window of stride 2
    gives 1 (VGG16 at 16x16), not 0."""
    if same:
        return -(-size // stride)
    eff = kernel + (kernel - 1) * (dilation - 1)
    span = size + 2 * pad - eff
    return (span // stride if span >= 0 else -(-span // stride)) + 1


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


_LOSS_LAYERS = ("LossLayer", "CnnLossLayer", "RnnLossLayer", "Cnn3DLossLayer", "RnnOutputLayer",
                "CenterLossOutputLayer", "Yolo2OutputLayer")


def _opaque_shape(kind: str, conf: dict[str, Any], shapes: list[tuple[int, ...]], name: str,
                  network_inputs: dict[str, tuple[int, ...]] | None = None) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """(output shape, parameter shapes) of an OPAQUE layer or vertex by DL4J's rules (NCHW maps,
    NCW sequences; `network_inputs`: the graph's inputs by name, which some vertices refer to);
    UnsupportedLayer where there is no rule (DL4J's shape inference then gives them)."""
    xs = shapes[0]
    n = xs[0]
    bias = bool(conf.get("hasBias", True))

    def spatial(h: int, w: int) -> tuple[int, int]:
        kh, kw = _pair(conf["kernelSize"], f"{name}: kernelSize")
        sh, sw = _pair(conf.get("stride", [1, 1]), f"{name}: stride")
        ph, pw = _pair(conf.get("padding", [0, 0]), f"{name}: padding", minimum=0)
        dh, dw = _pair(conf.get("dilation", [1, 1]), f"{name}: dilation")
        same = conf.get("convolutionMode") == "Same"
        return _out_size(h, kh, sh, ph, dh, same), _out_size(w, kw, sw, pw, dw, same)

    def four(v: Any, what: str) -> tuple[int, int, int, int]:
        v = v if isinstance(v, list) else [v]
        v = v * 4 if len(v) == 1 else ([v[0], v[0], v[1], v[1]] if len(v) == 2 else v)
        t, b, l, r = (_whole(d, f"{name}: {what}", 0) for d in v)
        return t, b, l, r

    if kind in ("SeparableConvolution2D", "DepthwiseConvolution2D", "Deconvolution2D"):
        if len(xs) != 4:
            raise GraphError(f"layer {name!r} expects an NCHW input, got {xs}")
        c, h, w = xs[1:]
        kh, kw = _pair(conf["kernelSize"], f"{name}: kernelSize")
        if kind == "Deconvolution2D":
            sh, sw = _pair(conf.get("stride", [1, 1]), f"{name}: stride")
            ph, pw = _pair(conf.get("padding", [0, 0]), f"{name}: padding", minimum=0)
            dh, dw = _pair(conf.get("dilation", [1, 1]), f"{name}: dilation")
            if conf.get("convolutionMode") == "Same":
                oh, ow = h * sh, w * sw
            else:
                oh = sh * (h - 1) + kh + (kh - 1) * (dh - 1) - 2 * ph
                ow = sw * (w - 1) + kw + (kw - 1) * (dw - 1) - 2 * pw
            cout = _whole(conf["nout"], f"{name}: nOut")
            params: tuple[tuple[int, ...], ...] = ((c, cout, kh, kw),) + (((cout,),) if bias else ())
            return (n, cout, oh, ow), params
        oh, ow = spatial(h, w)
        dm = _whole(conf.get("depthMultiplier", 1), f"{name}: depthMultiplier")
        if kind == "DepthwiseConvolution2D":
            return (n, c * dm, oh, ow), ((kh, kw, c, dm),) + (((c * dm,),) if bias else ())
        cout = _whole(conf["nout"], f"{name}: nOut")
        return (n, cout, oh, ow), ((dm, c, kh, kw), (cout, c * dm, 1, 1)) + (((cout,),) if bias else ())
    if kind in ("ZeroPaddingLayer", "Cropping2D"):
        t, b, l, r = four(conf.get("padding") if kind == "ZeroPaddingLayer" else conf.get("cropping"), kind)
        sign = 1 if kind == "ZeroPaddingLayer" else -1
        return (n, xs[1], xs[2] + sign * (t + b), xs[3] + sign * (l + r)), ()
    if kind == "Upsampling2D":
        sh, sw = _pair(conf.get("size", [1, 1]), f"{name}: size")
        return (n, xs[1], xs[2] * sh, xs[3] * sw), ()
    if kind == "SpaceToDepthLayer":
        bs = _whole(conf.get("blockSize", 2), f"{name}: blockSize")
        return (n, xs[1] * bs * bs, xs[2] // bs, xs[3] // bs), ()
    if kind in ("GravesLSTM", "LSTM", "SimpleRnn", "GravesBidirectionalLSTM"):
        if len(xs) != 3:
            raise GraphError(f"recurrent layer {name!r} expects an (N, C, T) input, got {xs}")
        nin, nout = xs[1], _whole(conf["nout"], f"{name}: nOut")
        if kind == "SimpleRnn":
            params = ((nin, nout), (nout, nout), (nout,))
        else:
            rw = 4 * nout + (3 if kind.startswith("Graves") else 0)
            params = ((nin, 4 * nout), (nout, rw), (4 * nout,))
        if kind == "GravesBidirectionalLSTM":
            params = params * 2
        return (n, nout, xs[2]), params
    if kind in ("EmbeddingSequenceLayer",):
        nin, nout = _whole(conf["nin"], f"{name}: nIn"), _whole(conf["nout"], f"{name}: nOut")
        return (n, nout, xs[-1]), ((nin, nout),) + (((nout,),) if bias else ())
    if kind == "Bidirectional":   # two copies of the wrapped layer; CONCAT doubles the channels
        inner = conf["fwd"]
        shape, params = _opaque_shape(_simple(inner["@class"]), inner, shapes, name)
        if conf.get("mode", "CONCAT") == "CONCAT":
            shape = (shape[0], 2 * shape[1], *shape[2:])
        return shape, params * 2
    if kind == "LastTimeStep":   # the wrapped layer's last time step: (N, C)
        inner = conf["underlying"]
        shape, params = _opaque_shape(_simple(inner["@class"]), inner, shapes, name)
        return shape[:2], params
    if kind in ("ScaleVertex", "ShiftVertex", "L2NormalizeVertex", "PoolHelperVertex"):
        if kind == "PoolHelperVertex":
            return (n, xs[1], xs[2] - 1, xs[3] - 1), ()
        return xs, ()
    if kind == "LastTimeStepVertex":   # (N, C, T) -> (N, C): each example's last (unmasked) step
        if len(xs) != 3:
            raise GraphError(f"vertex {name!r} expects an (N, C, T) input, got {xs}")
        return xs[:2], ()
    if kind == "DuplicateToTimeSeriesVertex":   # (N, C) repeated over the steps of the network input it names
        ref = (network_inputs or {}).get(str(conf.get("inputName")))
        if ref is None or len(ref) != 3 or len(xs) != 2:
            raise UnsupportedLayer(f"vertex {name!r} duplicates {xs} to the length of network input "
                                   f"{conf.get('inputName')!r}, which is not a time series input here")
        return (n, xs[1], ref[2]), ()
    if kind == "SubsetVertex":
        lo, hi = int(conf["from"]), int(conf["to"])
        return (n, hi - lo + 1, *xs[2:]), ()
    if kind == "StackVertex":
        return (n * len(shapes), *xs[1:]), ()
    if kind == "UnstackVertex":
        return (n // int(conf["stackSize"]), *xs[1:]), ()
    raise UnsupportedLayer(f"DL4J {'vertex' if kind.endswith('Vertex') else 'layer'} type {kind} of "
                           f"{name!r} has no shape rule in the planner: its shape comes from DL4J itself, by a probe "
                           "iteration (org.pyd4j.train.LayerProbe), which pyd4j.train.fit(memory='superneurons'), "
                           "`pyd4j plan` and `pyd4j tune --plan` run (probed_graph)")


class _Builder:
    """Adds one node per DL4J layer; shapes and FLOPs as DL4J computes them."""

    def __init__(self, g: Graph, info: dict[str, dict[str, Any]] | None = None) -> None:
        self.g = g
        self.info = info or {}

    def layer(self, layer: dict[str, Any], x: int, dl4j: dict[str, Any],
              preprocessor: dict[str, Any] | None = None) -> int:
        g = self.g
        kind = _simple(layer["@class"])
        name = layer.get("layerName") or f"layer{dl4j.get('layer', len(g.layers))}"
        attrs: dict[str, Any] = {"dl4j": {**dl4j, "class": kind}}
        p = _retain(layer)
        if p is not None:
            attrs["idropout"] = p
        for key, field in (("updater", "iupdater"), ("bias_updater", "biasUpdater")):
            if isinstance(layer.get(field), dict) and layer[field].get("@class"):
                attrs[key] = _simple(layer[field]["@class"])   # what fit()'s updater keeps (pyd4j.sched.fitmem)
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
            same = layer.get("convolutionMode") == "Same"
            oh, ow = _out_size(h, kh, sh, ph, dh, same), _out_size(w, kw, sw, pw, dw, same)
            if mode is None:   # PNORM: not measured, an opaque step
                return g._add(LayerType.OPAQUE, (x,), (n, c, oh, ow), name, (),
                              float(n * c * oh * ow * kh * kw), **attrs)
            return g._add(LayerType.POOL, (x,), (n, c, oh, ow), name, (),
                          float(n * c * oh * ow * kh * kw), kernel=kh, stride=sh, pad=ph,
                          mode=mode, **({"variant": "avg"} if mode == "avg" else {}), **attrs)
        if kind == "GlobalPoolingLayer":
            mode = {"MAX": "max", "AVG": "avg"}.get(layer.get("poolingType", "MAX"))
            collapse = layer.get("collapseDimensions", True)
            if len(xs) != 4:   # over time (N, C, T) or a 3-D map (N, C, D, H, W): DL4J's own step, opaque
                out = (n, xs[1]) if collapse else (n, xs[1], *(1,) * (len(xs) - 2))
                return g._add(LayerType.OPAQUE, (x,), out, name, (), float(math.prod(xs)), **attrs)
            c, h, w = self._chw(xs, name)
            if mode is None or not collapse:   # not measured: opaque
                out = (n, c) if collapse else (n, c, 1, 1)
                return g._add(LayerType.OPAQUE, (x,), out, name, (), float(n * c * h * w), **attrs)
            return g._add(LayerType.POOL, (x,), (n, c), name, (), float(n * c * h * w),
                          kernel=h, stride=h, pad=0, mode=mode, global_pool=True,
                          variant=f"global_{mode}", **attrs)
        if kind == "BatchNormalization":
            c = xs[1]
            return g._add(LayerType.BN, (x,), xs, name, ((4 * c,),), 8.0 * math.prod(xs),
                          **attrs)
        if kind == "ActivationLayer":
            return g._add(LayerType.ACT, (x,), xs, name, fn=_activation(layer), **attrs)
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
        if kind in _LOSS_LAYERS:
            return self._loss(kind, layer, x, name, attrs)
        return self._opaque(kind, layer, (x,), name, attrs)

    def _loss(self, kind: str, layer: dict[str, Any], x: int, name: str, attrs: dict[str, Any]) -> int:
        """A loss layer other than OutputLayer: the loss node (its backward step starts the
        gradient), with DL4J's parameters (RnnOutputLayer: W, b; CenterLossOutputLayer: W, b and
        the class centres; the others none)."""
        g, xs, n = self.g, self.g.shape(x), self.g.batch
        attrs["loss"] = _simple(layer.get("lossFn", {}).get("@class", kind))
        if kind in ("RnnOutputLayer", "CenterLossOutputLayer"):
            f = xs[1] if kind == "RnnOutputLayer" else math.prod(xs[1:])
            cout = _whole(layer["nout"], f"{name}: nOut")
            params: tuple[tuple[int, ...], ...] = ((f, cout),)
            if layer.get("hasBias", True):
                params += ((cout,),)
            if kind == "CenterLossOutputLayer":
                params += ((cout, f),)
            out = (n, cout, *xs[2:]) if kind == "RnnOutputLayer" else (n, cout)
            macs = math.prod(out) * f
            return g._add(LayerType.SOFTMAX, (x,), out, name, params, 2.0 * macs, 4.0 * macs,
                          act=_activation(layer), **attrs)
        return g._add(LayerType.SOFTMAX, (x,), xs, name, fwd=5.0 * math.prod(xs), act=_activation(layer), **attrs)

    def _opaque(self, kind: str, conf: dict[str, Any], xs: tuple[int, ...], name: str,
                attrs: dict[str, Any]) -> int:
        """A layer or vertex without a measured model: an OPAQUE node, its output shape and
        parameter shapes from the rules below or from DL4J's own shape inference (`info`)."""
        g = self.g
        attrs["dl4j"]["class"] = kind
        known = self.info.get(name)
        inputs = ({layer.name: tuple(layer.out_shape) for layer in g.layers if layer.type is LayerType.DATA}
                  if kind == "DuplicateToTimeSeriesVertex" else None)   # the one rule that names a network input
        try:
            shape, params = _opaque_shape(kind, conf, [g.shape(x) for x in xs], name, inputs)
        except UnsupportedLayer:
            if known is None:
                raise
            shape, params = None, None
        if known is not None:   # DL4J's own shape inference and parameter count win
            dl4j = (g.batch, *known["shape"]) if known.get("shape") is not None else shape
            # but not a series' length where the rule has one: DL4J's input types cannot carry it past a
            # DuplicateToTimeSeriesVertex (which takes another input's length at run time; its type says 1)
            same_series = shape is not None and dl4j is not None and len(shape) == len(dl4j) == 3 and shape[:2] == dl4j[:2]
            shape = shape if same_series else dl4j
            if params is None or sum(math.prod(p) for p in params) != known.get("params", 0):
                params = ((int(known["params"]),),) if known.get("params") else ()
            if known.get("measured"):
                attrs["measured"] = known["measured"]
        assert shape is not None
        fwd = float(max(math.prod(shape), sum(math.prod(g.shape(x)) for x in xs)))
        if params:
            fwd = max(fwd, 2.0 * math.prod(shape[:1]) * sum(math.prod(p) for p in params))
        return g._add(LayerType.OPAQUE, tuple(xs), tuple(int(d) for d in shape), name, params or (), fwd, **attrs)

    @staticmethod
    def _chw(shape: tuple[int, ...], name: str) -> tuple[int, int, int]:
        if len(shape) != 4:
            raise GraphError(f"layer {name!r} expects an NCHW input, got {shape}")
        return shape[1], shape[2], shape[3]


def graph_from_dl4j_json(text: str | dict[str, Any], batch: int = 32,
                         input_shape: tuple[int, ...] | Sequence[tuple[int, ...]] | None = None,
                         profile: str = "dl4j", info: dict[str, dict[str, Any]] | None = None) -> Graph:
    """Build the DL4J-faithful graph from configuration JSON (a string or the parsed document),
    under the dependency profile `profile` (DL4J's own by default; see `pyd4j.sched.deps`).
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
        graph = (_multilayer(doc, batch, input_shape, info) if "confs" in doc
                 else _graph(doc, batch, input_shape, info))
    except GraphError:
        raise
    except (KeyError, TypeError, AttributeError, IndexError, ValueError, OverflowError) as err:
        what = f"no {err}" if isinstance(err, KeyError) else f"{type(err).__name__}: {err}"
        raise GraphError(f"malformed DL4J configuration JSON ({what}); write it with conf.toJson()") from None
    return graph.with_profile(profile)


def _document(text: str | dict[str, Any]) -> dict[str, Any]:
    """The configuration document of a DL4J configuration JSON (a string or already parsed)."""
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
    return doc


# What DL4J itself says of a network at these input shapes (batch first, one per network input):
# `pyd4j.memory.probe` answers with org.pyd4j.train.LayerProbe's JSON (see graph_from_dl4j_json's `info`).
Probe = Callable[[list[tuple[int, ...]]], dict[str, dict[str, Any]]]


def probed_graph(text: str | dict[str, Any], batch: int = 32,
                 input_shape: tuple[int, ...] | Sequence[tuple[int, ...]] | None = None,
                 probe: Probe | None = None, profile: str = "dl4j") -> Graph:
    """The planner's graph of a DL4J network, with what DL4J itself says where the rules here do not
    suffice: when the graph has OPAQUE nodes (their working memory is then measured, not guessed) or a
    layer has no shape rule here, `probe` runs a probe iteration at the planned input shapes and the
    graph is built again with its answer (`info`). Without a probe, as graph_from_dl4j_json. The one
    way pyd4j.train.fit (the live network), `pyd4j plan` and the agent route (`training_plan.plan_for_job`:
    a network built from its configuration) plan a DL4J network, so that they accept the same networks."""
    doc = _document(text)
    try:
        graph = graph_from_dl4j_json(doc, batch, input_shape, profile)
    except UnsupportedLayer:
        if probe is None or input_shape is None:
            raise
        given = _segment(doc, _shapes(input_shape))
        inputs = [(batch, *s) for s in (given if given and isinstance(given[0], tuple) else (given,))]
    else:
        if probe is None or not any(layer.type is LayerType.OPAQUE for layer in graph.layers):
            return graph
        inputs = [tuple(layer.out_shape) for layer in graph.layers if layer.type is LayerType.DATA]
    return graph_from_dl4j_json(doc, batch, input_shape, profile, info=probe(inputs))


def _shapes(given: Any) -> tuple[int, ...] | tuple[tuple[int, ...], ...]:
    """One input shape (whole numbers), or one per network input (a sequence of shapes)."""
    if isinstance(given, (list, tuple)) and given and all(isinstance(d, (list, tuple)) for d in given):
        return tuple(tuple(_whole(d, f"input shape {k}") for d in shape) for k, shape in enumerate(given))
    return tuple(_whole(d, "input shape") for d in given)


def _segment(doc: dict[str, Any], shape: tuple) -> tuple:
    """The input shape one iteration sees. Under truncated BPTT DL4J's fit() cuts each sequence into
    segments of tbpttFwdLength steps and trains one iteration per segment, so a (features, T) input is
    planned at (features, min(T, tbpttFwdLength)); a graph's inputs that are not sequences stay whole, as
    DL4J keeps them."""
    if doc.get("backpropType") != "TruncatedBPTT":
        return shape
    fwd = _whole(doc.get("tbpttFwdLength"), "tbpttFwdLength")
    if "confs" in doc:
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


def _multilayer(doc: dict[str, Any], batch: int, input_shape: tuple[int, ...] | None,
                info: dict[str, dict[str, Any]] | None = None) -> Graph:
    layers = [c["layer"] for c in doc["confs"]]
    input_shape = _one_shape(input_shape)
    shape = tuple(input_shape) if input_shape else _infer_input(doc, layers[0])
    pres = doc.get("inputPreProcessors") or {}
    g = Graph("dl4j_multilayer", batch, _dtype(doc))
    b = _Builder(g, info)
    x = g.data(*shape, name="input")
    g.layers[x].attrs["dl4j"] = {"input": 0}
    for i, layer in enumerate(layers):
        pre = pres.get(str(i))
        if i == 0:
            _reshape_input(g, x, pre)
        x = b.layer(layer, x, {"layer": i}, pre)
    _check_outputs(g)
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
    b = _Builder(g, info)
    ids: dict[str, int] = {}
    for name in dl4j_topological_order(doc):
        if name in inputs:
            ids[name] = g.data(*shapes[inputs.index(name)], name=name)
            g.layers[ids[name]].attrs["dl4j"] = {"input": inputs.index(name), "vertex": name}
        else:
            ids[name] = _vertex(b, name, vertices[name], [ids[s] for s in vin.get(name, [])])
    _check_outputs(g)
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
        if all(len(s) in (2, 3) for s in shapes):  # merging feature vectors or sequences (N, C, T)
            if len({s[2:] for s in shapes}) != 1:
                raise GraphError(f"merge vertex {name!r}: inputs {shapes} differ beyond the channels")
            i = g._add(LayerType.CONCAT, tuple(xs), (g.batch, sum(s[1] for s in shapes), *shapes[0][2:]), name)
        else:
            i = g.concat(xs, name=name)
        g.layers[i].attrs["dl4j"] = dl4j
        return i
    return b._opaque(kind, vertex, tuple(xs), name, {"dl4j": dl4j})
