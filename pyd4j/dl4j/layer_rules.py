"""DL4J's rules for one layer or vertex, read from its configuration JSON: sizes (whole numbers within
Java's int), output shapes (DL4J's ConvolutionUtils and each layer's own rule), activations, input
dropout; UnsupportedLayer where the planner has no rule (DL4J's own shape inference then gives it)."""

from __future__ import annotations

import math
from typing import Any

from pyd4j.sched.graph import GraphError


class UnsupportedLayer(GraphError):
    """A DL4J layer or vertex type the planner has no model for."""


ACTIVATIONS = {"ActivationReLU": "relu", "ActivationTanH": "tanh", "ActivationSigmoid": "sigmoid",
        "ActivationLReLU": "leakyrelu", "ActivationReLU6": "relu6", "ActivationELU": "elu",
        "ActivationSoftmax": "softmax", "ActivationIdentity": "identity"}
DTYPES = {"FLOAT": "float32", "HALF": "float16", "DOUBLE": "float64", "BFLOAT16": "bfloat16"}
ELTWISE_OPS = {"Add": None, "Product": "prod", "Max": "max", "Average": "sum", "Subtract": "sum"}


def simple_name(cls: str) -> str:
    return cls.rsplit(".", 1)[-1]


def activation(layer: dict[str, Any]) -> str:
    """The activation's short name. Any DL4J activation is accepted: it does not change what a
    step reads or keeps (the framework's ACT entry covers the activations measured), only its name."""
    fn = layer.get("activationFn")
    if not fn:
        return "identity"
    name = simple_name(fn["@class"])
    return ACTIVATIONS.get(name) or name.removeprefix("Activation").lower()


MAX_SIZE = 2**31 - 1  # DL4J holds layer sizes, kernels and strides in Java ints


def whole(v: Any, what: str, minimum: int = 1) -> int:
    """A size from the JSON: a whole number from `minimum` to Java's int (0 units or a negative
    kernel would plan negative memory). DL4J writes some sizes as doubles (LRN's `n`: 5.0): a
    whole-valued double is that whole number."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= MAX_SIZE:
        raise GraphError(f"{what} = {v!r} must be a whole number from {minimum} to {MAX_SIZE}; fix the network "
                         f"configuration (conf.toJson() writes valid ones)")
    return v


def pair(v: Any, what: str = "size", minimum: int = 1) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        if len(v) != 2:
            raise GraphError(f"{what} = {v!r} must be one number or a pair")
        return whole(v[0], what, minimum), whole(v[1], what, minimum)
    n = whole(v, what, minimum)
    return n, n


def check_nin(layer: dict[str, Any], kind: str, xs: tuple[int, ...], name: str) -> None:
    """A declared nIn must be what the layer is fed: DL4J builds its weights from nIn."""
    fed = {"ConvolutionLayer": 1, "Convolution2D": 1, "DenseLayer": 0, "OutputLayer": 0}.get(kind)
    if fed is None or layer.get("nin") is None:
        return
    want = xs[1] if fed == 1 and len(xs) == 4 else math.prod(xs[1:])
    nin = whole(layer["nin"], f"{name}: nIn")
    if nin != want:
        raise GraphError(f"{name}: nIn = {nin}, but the layer is fed {want} {'channels' if fed else 'features'}; "
                         f"set nIn({want}) or let DL4J infer it (setInputType) and write the JSON again")


def out_size(size: int, kernel: int, stride: int, pad: int, dilation: int, same: bool) -> int:
    """DL4J's output size (ConvolutionUtils.getOutputSize): Same rounds up, Truncate down -- with
    Java's integer division, which rounds toward zero: a 1x1 map under a 2x2 window of stride 2
    gives 1 (VGG16 at 16x16), not 0."""
    if same:
        return -(-size // stride)
    eff = kernel + (kernel - 1) * (dilation - 1)
    span = size + 2 * pad - eff
    return (span // stride if span >= 0 else -(-span // stride)) + 1


# DL4J layers whose training forward pass applies their input dropout (`idropout`) to a copy of the input
# that they keep for their backward step (AbstractLayer.applyDropOutIfNecessary; measured:
# tests/dl4j/test_generator_findings.py). Every other layer ignores the setting -- BatchNormalization,
# ActivationLayer, pooling, padding and cropping, embeddings, AutoEncoder, loss layers without weights,
# wrappers -- and its backward step reads its producer's output. The output layers' dropout runs in backprop.
APPLIES_INPUT_DROPOUT = frozenset({
    "DenseLayer", "ConvolutionLayer", "Convolution2D", "Convolution1DLayer", "Convolution1D", "Deconvolution2D",
    "SeparableConvolution2D", "DepthwiseConvolution2D", "ElementWiseMultiplicationLayer", "PReLULayer", "LSTM",
    "GravesLSTM", "SimpleRnn", "RepeatVector", "SpaceToDepthLayer", "Upsampling1D", "Upsampling2D",
    "OutputLayer", "RnnOutputLayer", "CenterLossOutputLayer", "DropoutLayer"})


def retain(layer: dict[str, Any]) -> float | None:
    """Retain probability of a layer's input dropout (DL4J's p), None without dropout or for a layer
    that ignores it (not in APPLIES_INPUT_DROPOUT; a DropoutLayer's own dropout is its step)."""
    drop = layer.get("idropout")
    if not drop or simple_name(str(layer.get("@class", ""))) not in APPLIES_INPUT_DROPOUT:
        return None
    kind = simple_name(drop["@class"])
    if kind != "Dropout":
        raise UnsupportedLayer(f"input dropout {kind} of layer {layer.get('layerName')!r} is not "
                               "supported (only Dropout)")
    return float(drop.get("p", 1.0))


def preprocessed(pre: dict[str, Any] | None, shape: tuple[int, ...], batch: int, name: str) -> tuple[int, ...]:
    """The shape DL4J's layer is given after its input preprocessor (None: `shape` itself): images flattened
    or reshaped, and a sequence's steps as rows of the batch (RnnToFeedForward: (N, C, T) -> (N*T, C)) and
    back (FeedForwardToRnn: (N*T, C) -> (N, C, T), N the network's batch), as DL4J's preprocessors do."""
    if not pre:
        return shape
    kind = simple_name(str(pre.get("@class", "")))
    nwc = pre.get("rnnDataFormat") == "NWC"
    if kind == "ComposableInputPreProcessor":
        for inner in pre.get("inputPreProcessors") or []:
            shape = preprocessed(inner, shape, batch, name)
        return shape
    if kind in ("FeedForwardToCnnPreProcessor", "RnnToCnnPreProcessor"):
        chw = tuple(whole(pre[k], f"{name}: preprocessor {k}") for k in ("numChannels", "inputHeight", "inputWidth"))
        rows = shape[0]
        if kind == "RnnToCnnPreProcessor" and len(shape) == 3:   # every time step an image
            rows *= shape[1] if nwc else shape[2]
        if shape[0] * math.prod(shape[1:]) != rows * math.prod(chw):
            raise GraphError(f"layer {name!r}: its {kind} reshapes each example to {list(chw)} (channels, height, "
                             f"width), but it is given {list(shape)}; write the configuration with setInputType")
        return (rows, *chw)
    if kind == "CnnToFeedForwardPreProcessor":
        return (shape[0], math.prod(shape[1:]))
    if kind == "RnnToFeedForwardPreProcessor":
        if len(shape) != 3:
            return shape   # DL4J passes a 2-d input through
        return (shape[0] * shape[1], shape[2]) if nwc else (shape[0] * shape[2], shape[1])
    if kind in ("FeedForwardToRnnPreProcessor", "CnnToRnnPreProcessor"):
        if len(shape) == 3 and kind == "FeedForwardToRnnPreProcessor":
            return shape
        steps = shape[0] // batch if batch and shape[0] % batch == 0 else 1
        features = math.prod(shape[1:])
        return (shape[0] // steps, steps, features) if nwc else (shape[0] // steps, features, steps)
    raise UnsupportedLayer(f"input preprocessor {kind} of layer {name!r} has no shape rule in the planner; use "
                           "DL4J's own 2-d preprocessors (setInputType adds them) or train with DL4J's own fit()")


LOSS_LAYERS = ("LossLayer", "CnnLossLayer", "RnnLossLayer", "Cnn3DLossLayer", "RnnOutputLayer",
                "CenterLossOutputLayer", "Yolo2OutputLayer")


def opaque_shape(kind: str, conf: dict[str, Any], shapes: list[tuple[int, ...]], name: str,
                  network_inputs: dict[str, tuple[int, ...]] | None = None) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """(output shape, parameter shapes) of an OPAQUE layer or vertex by DL4J's rules (NCHW maps,
    NCW sequences; `network_inputs`: the graph's inputs by name, which some vertices refer to);
    UnsupportedLayer where there is no rule (DL4J's shape inference then gives them)."""
    xs = shapes[0]
    n = xs[0]
    if kind in ("SeparableConvolution2D", "DepthwiseConvolution2D", "Deconvolution2D"):
        return _convolution_shape(kind, conf, xs, name)
    if kind in ("ZeroPaddingLayer", "Cropping2D"):
        t, b, l, r = _four(conf.get("padding") if kind == "ZeroPaddingLayer" else conf.get("cropping"), kind, name)
        sign = 1 if kind == "ZeroPaddingLayer" else -1
        return (n, xs[1], xs[2] + sign * (t + b), xs[3] + sign * (l + r)), ()
    if kind == "Upsampling2D":
        sh, sw = pair(conf.get("size", [1, 1]), f"{name}: size")
        return (n, xs[1], xs[2] * sh, xs[3] * sw), ()
    if kind == "SpaceToDepthLayer":
        bs = whole(conf.get("blockSize", 2), f"{name}: blockSize")
        return (n, xs[1] * bs * bs, xs[2] // bs, xs[3] // bs), ()
    if kind in ("GravesLSTM", "LSTM", "SimpleRnn", "GravesBidirectionalLSTM"):
        return _recurrent_shape(kind, conf, xs, name)
    if kind in ("EmbeddingSequenceLayer",):
        nin, nout = whole(conf["nin"], f"{name}: nIn"), whole(conf["nout"], f"{name}: nOut")
        return (n, nout, xs[-1]), ((nin, nout),) + (((nout,),) if conf.get("hasBias", True) else ())
    if kind == "Bidirectional":   # two copies of the wrapped layer; CONCAT doubles the channels
        inner = conf["fwd"]
        shape, params = opaque_shape(simple_name(inner["@class"]), inner, shapes, name)
        if conf.get("mode", "CONCAT") == "CONCAT":
            shape = (shape[0], 2 * shape[1], *shape[2:])
        return shape, params * 2
    if kind == "LastTimeStep":   # the wrapped layer's last time step: (N, C)
        inner = conf["underlying"]
        shape, params = opaque_shape(simple_name(inner["@class"]), inner, shapes, name)
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


def window(conf: dict[str, Any], name: str) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]:
    """A convolution's or pooling's (kernel, stride, padding, dilation), each (height, width), as DL4J reads them."""
    return (pair(conf["kernelSize"], f"{name}: kernelSize"), pair(conf.get("stride", [1, 1]), f"{name}: stride"),
            pair(conf.get("padding", [0, 0]), f"{name}: padding", minimum=0),
            pair(conf.get("dilation", [1, 1]), f"{name}: dilation"))


def spatial(conf: dict[str, Any], h: int, w: int, name: str) -> tuple[int, int]:
    """A convolution's or pooling's output height and width by DL4J's rules (Same or Truncate)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = window(conf, name)
    same = conf.get("convolutionMode") == "Same"
    return out_size(h, kh, sh, ph, dh, same), out_size(w, kw, sw, pw, dw, same)


def _four(v: Any, what: str, name: str) -> tuple[int, int, int, int]:
    """Top, bottom, left, right from DL4J's one, two or four padding/cropping values."""
    v = v if isinstance(v, list) else [v]
    v = v * 4 if len(v) == 1 else ([v[0], v[0], v[1], v[1]] if len(v) == 2 else v)
    t, b, l, r = (whole(d, f"{name}: {what}", 0) for d in v)
    return t, b, l, r


def _convolution_shape(kind: str, conf: dict[str, Any], xs: tuple[int, ...], name: str
                       ) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """SeparableConvolution2D, DepthwiseConvolution2D and Deconvolution2D: output and parameter shapes."""
    if len(xs) != 4:
        raise GraphError(f"layer {name!r} expects an NCHW input, got {xs}")
    n, c, h, w = xs
    bias = bool(conf.get("hasBias", True))
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = window(conf, name)
    if kind == "Deconvolution2D":
        if conf.get("convolutionMode") == "Same":
            oh, ow = h * sh, w * sw
        else:
            oh = sh * (h - 1) + kh + (kh - 1) * (dh - 1) - 2 * ph
            ow = sw * (w - 1) + kw + (kw - 1) * (dw - 1) - 2 * pw
        cout = whole(conf["nout"], f"{name}: nOut")
        params: tuple[tuple[int, ...], ...] = ((c, cout, kh, kw),) + (((cout,),) if bias else ())
        return (n, cout, oh, ow), params
    oh, ow = spatial(conf, h, w, name)
    dm = whole(conf.get("depthMultiplier", 1), f"{name}: depthMultiplier")
    if kind == "DepthwiseConvolution2D":
        return (n, c * dm, oh, ow), ((kh, kw, c, dm),) + (((c * dm,),) if bias else ())
    cout = whole(conf["nout"], f"{name}: nOut")
    return (n, cout, oh, ow), ((dm, c, kh, kw), (cout, c * dm, 1, 1)) + (((cout,),) if bias else ())


def _recurrent_shape(kind: str, conf: dict[str, Any], xs: tuple[int, ...], name: str
                     ) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """GravesLSTM, LSTM, SimpleRnn and GravesBidirectionalLSTM on an (N, C, T) input."""
    if len(xs) != 3:
        raise GraphError(f"recurrent layer {name!r} expects an (N, C, T) input, got {xs}")
    nin, nout = xs[1], whole(conf["nout"], f"{name}: nOut")
    if kind == "SimpleRnn":
        params: tuple[tuple[int, ...], ...] = ((nin, nout), (nout, nout), (nout,))
    else:
        rw = 4 * nout + (3 if kind.startswith("Graves") else 0)
        params = ((nin, 4 * nout), (nout, rw), (4 * nout,))
    if kind == "GravesBidirectionalLSTM":
        params = params * 2
    return (xs[0], nout, xs[2]), params
