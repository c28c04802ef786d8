"""Random valid DL4J networks as hypothesis strategies: a network is drawn as a plain spec (JSON-able
dicts, printed when a property fails, shrunk by hypothesis to a minimal failing network) and built
with DL4J's own builders by `tests.dl4j.netbuild`.

Each step draws a layer or vertex that DL4J accepts for the activation it is given, tracked as a
type: ("ff", n), ("cnn", c, h, w), ("rnn", n, t), or ("tdff", n, t) -- a dense layer applied to every
time step of a sequence (DL4J's RnnToFeedForward / FeedForwardToRnn preprocessors around it). Sizes stay
small (a few channels, units, steps and pixels; batch 2-6) so that each network trains in well under a
second. Candidates are listed simplest first: hypothesis shrinks toward the first.
"""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

Type = tuple
Spec = dict[str, Any]

UPDATERS = ("default", "Sgd", "NoOp", "Adam", "AdaMax", "Nadam", "AMSGrad", "AdaDelta", "AdaGrad", "RmsProp",
            "Nesterovs", "AdaBelief")
GRAD_NORMS = ("None", "RenormalizeL2PerLayer", "RenormalizeL2PerParamType", "ClipElementWiseAbsoluteValue",
              "ClipL2PerLayer", "ClipL2PerParamType")
ACTIVATIONS = ("RELU", "TANH", "IDENTITY", "SIGMOID", "LEAKYRELU", "ELU", "SOFTSIGN")
# (loss, output activation, labels): labels are drawn to be valid for the loss
LOSSES = (("MCXENT", "SOFTMAX", "onehot"), ("MSE", "IDENTITY", "real"), ("NEGATIVELOGLIKELIHOOD", "SOFTMAX", "onehot"),
          ("XENT", "SIGMOID", "binary"), ("L2", "TANH", "real"), ("L1", "IDENTITY", "real"),
          ("MEAN_ABSOLUTE_ERROR", "IDENTITY", "real"), ("KL_DIVERGENCE", "SOFTMAX", "probs"),
          ("HINGE", "IDENTITY", "sign"), ("SQUARED_HINGE", "TANH", "sign"), ("COSINE_PROXIMITY", "TANH", "real"),
          ("POISSON", "SIGMOID", "count"), ("MEAN_SQUARED_LOGARITHMIC_ERROR", "SIGMOID", "positive"))
POOLING = ("MAX", "AVG", "PNORM")
GLOBAL_POOLING = ("MAX", "AVG", "SUM", "PNORM")
RECURRENT = ("LSTM", "SimpleRnn", "GravesLSTM")
INPUTS = ("ff", "cnn", "rnn", "cnnflat", "index", "seqindex")
MAX_SIDE = 10   # image height / width
MAX_FLAT = 96   # features of a flattened image a dense layer may take


def units(hi: int = 6) -> st.SearchStrategy[int]:
    return st.integers(1, hi)


@st.composite
def input_type(draw: Callable, kinds: tuple[str, ...] = INPUTS) -> Spec:
    """One network input: its kind and per-example sizes."""
    kind = draw(st.sampled_from(kinds))
    if kind == "ff":
        return {"kind": kind, "size": draw(units(8))}
    if kind in ("cnn", "cnnflat"):
        return {"kind": kind, "channels": draw(st.integers(1, 3)), "height": draw(st.integers(2, 8)),
                "width": draw(st.integers(2, 8))}
    if kind == "rnn":
        return {"kind": kind, "size": draw(units(5)), "steps": draw(st.integers(1, 6))}
    if kind == "index":
        return {"kind": kind, "vocab": draw(st.integers(2, 8))}
    return {"kind": kind, "vocab": draw(st.integers(2, 8)), "steps": draw(st.integers(1, 6))}


def input_state(spec: Spec) -> Type:
    kind = spec["kind"]
    if kind == "ff":
        return ("ff", spec["size"])
    if kind in ("cnn", "cnnflat"):
        return (kind, spec["channels"], spec["height"], spec["width"])
    if kind == "rnn":
        return ("rnn", spec["size"], spec["steps"])
    if kind == "index":
        return ("index", spec["vocab"])
    return ("seqindex", spec["vocab"], spec["steps"])


def out_size(size: int, kernel: int, stride: int, pad: int, same: bool) -> int:
    """DL4J's output size of a window (Same: ceil(size / stride); Truncate: floor)."""
    return -(-size // stride) if same else (size + 2 * pad - kernel) // stride + 1


@st.composite
def window(draw: Callable, h: int, w: int, modes: tuple[str, ...] = ("Truncate", "Same")) -> Spec | None:
    """Kernel, stride, padding and convolution mode of a 2-d window that fits an h x w map."""
    mode = draw(st.sampled_from(modes))
    kh, kw = draw(st.integers(1, min(3, h + 2))), draw(st.integers(1, min(3, w + 2)))
    sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    # padding below the kernel: libnd4j's pooling with a 1-wide kernel and padding 1 corrupts the native heap
    # (DL4J's own fit() of a DOUBLE network then dies with "double free or corruption")
    ph, pw = (0, 0) if mode == "Same" else (draw(st.integers(0, min(1, kh - 1))), draw(st.integers(0, min(1, kw - 1))))
    same = mode == "Same"
    if not same and (h + 2 * ph < kh or w + 2 * pw < kw):
        return None
    oh, ow = out_size(h, kh, sh, ph, same), out_size(w, kw, sw, pw, same)
    return {"kernel": [kh, kw], "stride": [sh, sw], "padding": [ph, pw], "mode": mode, "out": [oh, ow]}


def _ff(draw: Callable, n: int) -> list[tuple[Spec, Type]]:
    act = draw(st.sampled_from(ACTIVATIONS))
    k = draw(units())
    return [({"class": "DenseLayer", "nOut": k, "act": act, "bias": draw(st.booleans())}, ("ff", k)),
            ({"class": "ActivationLayer", "act": act}, ("ff", n)),
            ({"class": "DropoutLayer", "p": draw(st.sampled_from((0.5, 0.8)))}, ("ff", n)),
            ({"class": "BatchNormalization"}, ("ff", n)),
            ({"class": "PReLULayer", "shape": [n]}, ("ff", n)),
            ({"class": "ElementWiseMultiplicationLayer", "nOut": n, "act": act}, ("ff", n)),
            ({"class": "AutoEncoder", "nOut": k, "act": act}, ("ff", k)),
            ({"class": "RepeatVector", "n": draw(st.integers(1, 4))}, None),
            ({"class": "VariationalAutoencoder", "nOut": k, "hidden": draw(units(4)), "act": act}, ("ff", k)),
            ({"class": draw(st.sampled_from(("FrozenLayerWithBackprop", "FrozenLayer"))),
              "layer": {"class": "DenseLayer", "nOut": k, "act": act, "bias": True}}, ("ff", k)),
            ({"class": "MaskLayer"}, ("ff", n))]


# what DL4J takes on a flattened image (convolutionalFlat): the layers that reshape it (FeedForwardToCnn)
# and dense layers; the others do not read DL4J's CNNFlat input type
FLAT_READERS = ("ConvolutionLayer", "SubsamplingLayer", "SeparableConvolution2D", "DepthwiseConvolution2D",
                "Deconvolution2D", "ZeroPaddingLayer", "Cropping2D", "Upsampling2D", "DenseLayer")


def _cnnflat(draw: Callable, c: int, h: int, w: int) -> list[tuple[Spec, Type]]:
    return [(layer, out) for layer, out in _cnn(draw, c, h, w) if layer["class"] in FLAT_READERS]


def _cnn(draw: Callable, c: int, h: int, w: int) -> list[tuple[Spec, Type]]:
    out: list[tuple[Spec, Type]] = []
    act = draw(st.sampled_from(ACTIVATIONS))
    k = draw(st.integers(1, 4))
    win = draw(window(h, w))
    if win:
        oh, ow = win["out"]
        out += [({"class": "ConvolutionLayer", "nOut": k, "act": act, **win}, ("cnn", k, oh, ow)),
                ({"class": "SubsamplingLayer", "pooling": draw(st.sampled_from(POOLING)), **win}, ("cnn", c, oh, ow))]
        dm = draw(st.integers(1, 2))
        out += [({"class": "SeparableConvolution2D", "nOut": k, "depthMultiplier": dm, "act": act, **win},
                 ("cnn", k, oh, ow)),
                ({"class": "DepthwiseConvolution2D", "depthMultiplier": dm, "act": act, **win}, ("cnn", c * dm, oh, ow))]
    out += [({"class": "BatchNormalization"}, ("cnn", c, h, w)),
            ({"class": "ActivationLayer", "act": act}, ("cnn", c, h, w)),
            ({"class": "GlobalPoolingLayer", "pooling": draw(st.sampled_from(GLOBAL_POOLING))}, ("ff", c)),
            ({"class": "LocalResponseNormalization"}, ("cnn", c, h, w)),
            ({"class": "DropoutLayer", "p": 0.7}, ("cnn", c, h, w))]
    if c * h * w <= MAX_FLAT:
        out.append(({"class": "DenseLayer", "nOut": k, "act": act, "bias": True}, ("ff", k)))
    deconv = draw(window(h, w, ("Truncate", "Same")))
    if deconv:
        (kh, kw), (sh, sw), (ph, pw) = deconv["kernel"], deconv["stride"], deconv["padding"]
        same = deconv["mode"] == "Same"
        oh, ow = (h * sh, w * sw) if same else (sh * (h - 1) + kh - 2 * ph, sw * (w - 1) + kw - 2 * pw)
        if 1 <= oh <= MAX_SIDE and 1 <= ow <= MAX_SIDE:
            out.append(({"class": "Deconvolution2D", "nOut": k, "act": act, **deconv}, ("cnn", k, oh, ow)))
    pad = [draw(st.integers(0, 1)) for _ in range(4)]
    if h + pad[0] + pad[1] <= MAX_SIDE and w + pad[2] + pad[3] <= MAX_SIDE:
        out.append(({"class": "ZeroPaddingLayer", "padding": pad}, ("cnn", c, h + pad[0] + pad[1], w + pad[2] + pad[3])))
    if h - pad[0] - pad[1] >= 1 and w - pad[2] - pad[3] >= 1:
        out.append(({"class": "Cropping2D", "cropping": pad}, ("cnn", c, h - pad[0] - pad[1], w - pad[2] - pad[3])))
    if 2 * h <= MAX_SIDE and 2 * w <= MAX_SIDE:
        out.append(({"class": "Upsampling2D", "size": 2}, ("cnn", c, 2 * h, 2 * w)))
    if h % 2 == 0 and w % 2 == 0:
        out.append(({"class": "SpaceToDepthLayer", "blocks": 2}, ("cnn", 4 * c, h // 2, w // 2)))
    out.append(({"class": "PReLULayer", "shape": [c, h, w]}, ("cnn", c, h, w)))
    local = draw(window(h, w, ("Truncate",)))
    if local:
        out.append(({"class": "LocallyConnected2D", "nOut": k, "act": act, **local}, ("cnn", k, *local["out"])))
    return out


def _recurrent(draw: Callable, kind: str, k: int) -> Spec:
    return {"class": kind, "nOut": k, "act": draw(st.sampled_from(("TANH", "RELU", "SOFTSIGN")))}


def _rnn(draw: Callable, n: int, t: int) -> list[tuple[Spec, Type]]:
    k = draw(units(5))
    cell = _recurrent(draw, draw(st.sampled_from(RECURRENT)), k)
    mode = draw(st.sampled_from(("CONCAT", "ADD", "MUL", "AVERAGE")))
    kernel = draw(st.integers(1, 3))
    conv_mode = draw(st.sampled_from(("Same", "Truncate")))
    out = [(cell, ("rnn", k, t)),
           ({"class": "Bidirectional", "mode": mode, "layer": cell}, ("rnn", 2 * k if mode == "CONCAT" else k, t)),
           ({"class": "LastTimeStep", "layer": cell}, ("ff", k)),
           ({"class": "GlobalPoolingLayer", "pooling": draw(st.sampled_from(GLOBAL_POOLING))}, ("ff", n)),
           ({"class": "GravesBidirectionalLSTM", "nOut": k, "act": "TANH"}, ("rnn", k, t)),
           ({"class": "DenseLayer", "nOut": k, "act": draw(st.sampled_from(ACTIVATIONS)), "bias": True}, ("tdff", k, t)),
           ({"class": "TimeDistributed", "layer": {"class": "DenseLayer", "nOut": k, "act": "TANH", "bias": True}},
            ("rnn", k, t)),
           ({"class": "MaskZeroLayer", "layer": cell}, ("rnn", k, t)),
           ({"class": "ActivationLayer", "act": draw(st.sampled_from(ACTIVATIONS))}, ("rnn", n, t)),
           ({"class": "SelfAttentionLayer", "nOut": k, "heads": draw(st.integers(1, 2))}, ("rnn", k, t)),
           ({"class": "LearnedSelfAttentionLayer", "nOut": k, "heads": draw(st.integers(1, 2)),
             "queries": draw(st.integers(1, 3))}, None),
           ({"class": "RecurrentAttentionLayer", "nOut": k, "heads": 1, "act": "TANH"}, ("rnn", k, t)),
           ({"class": "DropoutLayer", "p": 0.6}, ("rnn", n, t))]
    if kernel <= t:
        out.append(({"class": "LocallyConnected1D", "nOut": k, "kernel": kernel, "act": "TANH"},
                    ("rnn", k, t - kernel + 1)))
    if conv_mode == "Same" or kernel <= t:
        ot = t if conv_mode == "Same" else t - kernel + 1
        out += [({"class": "Convolution1DLayer", "nOut": k, "kernel": kernel, "mode": conv_mode, "act": "TANH"},
                 ("rnn", k, ot)),
                ({"class": "Subsampling1DLayer", "pooling": draw(st.sampled_from(POOLING)), "kernel": kernel,
                  "mode": conv_mode}, ("rnn", n, ot))]
    if 2 * t <= 8:
        out.append(({"class": "Upsampling1D", "size": 2}, ("rnn", n, 2 * t)))
    left, right = draw(st.integers(0, 1)), draw(st.integers(0, 1))
    out.append(({"class": "ZeroPadding1DLayer", "padding": [left, right]}, ("rnn", n, t + left + right)))
    if t - left - right >= 1:
        out.append(({"class": "Cropping1D", "cropping": [left, right]}, ("rnn", n, t - left - right)))
    return out


def _tdff(draw: Callable, n: int, t: int) -> list[tuple[Spec, Type]]:
    k = draw(units(5))
    return [({"class": "DenseLayer", "nOut": k, "act": draw(st.sampled_from(ACTIVATIONS)), "bias": True}, ("tdff", k, t)),
            (_recurrent(draw, draw(st.sampled_from(RECURRENT)), k), ("rnn", k, t))]


@st.composite
def hidden_layer(draw: Callable, state: Type) -> tuple[Spec, Type]:
    """One hidden layer DL4J accepts after an activation of type `state`, and the type it gives."""
    kind = state[0]
    if kind == "index":
        k = draw(units())
        return {"class": "EmbeddingLayer", "nIn": state[1], "nOut": k, "act": "IDENTITY"}, ("ff", k)
    if kind == "seqindex":
        k = draw(units(5))
        return {"class": "EmbeddingSequenceLayer", "nIn": state[1], "nOut": k, "steps": state[2]}, ("rnn", k, state[2])
    options = {"ff": _ff, "cnn": _cnn, "cnnflat": _cnnflat, "rnn": _rnn, "tdff": _tdff}[kind](draw, *state[1:])
    layer, out = draw(st.sampled_from(options))
    if layer["class"] == "RepeatVector":
        out = ("rnn", state[1], layer["n"])
    if layer["class"] == "LearnedSelfAttentionLayer":
        out = ("rnn", layer["nOut"], layer["queries"])
    return dict(layer), out


def needs_first(state: Type) -> bool:
    """Index inputs are read by an embedding layer first."""
    return state[0] in ("index", "seqindex")


READ_BY_LAYERS = ("index", "seqindex", "cnnflat")   # network inputs only a layer reads (no vertex)


@st.composite
def output_layer(draw: Callable, state: Type) -> tuple[Spec, Type]:
    """A layer with a loss DL4J's fit() trains on, for an activation of type `state`, and its labels' type."""
    loss, act, labels = draw(st.sampled_from(LOSSES))
    kind = state[0]
    k = draw(st.integers(1, 4)) if labels not in ("onehot", "probs") else draw(st.integers(2, 4))
    if kind in ("rnn", "tdff"):
        cls = draw(st.sampled_from(("RnnOutputLayer", "RnnLossLayer") if kind == "rnn" else ("RnnOutputLayer",)))
        if cls == "RnnLossLayer" and not (labels in ("onehot", "probs") and state[1] < 2):
            return {"class": cls, "loss": loss, "act": act, "labels": labels}, state
        return {"class": "RnnOutputLayer", "nOut": k, "loss": loss, "act": act, "labels": labels}, ("rnn", k, state[2])
    if kind == "cnnflat":   # a flattened image: DL4J's output layers read it as features
        state, kind = ("ff", state[1] * state[2] * state[3]), "ff"
    choices = ("OutputLayer", "CnnLossLayer") if kind == "cnn" else ("OutputLayer", "LossLayer", "CenterLossOutputLayer")
    cls = draw(st.sampled_from(choices))
    if cls == "CnnLossLayer":
        if labels in ("onehot", "probs") and state[1] < 2:
            cls = "OutputLayer"
        else:
            return {"class": cls, "loss": loss, "act": act, "labels": labels}, state
    if cls == "LossLayer" and not (labels in ("onehot", "probs") and state[1] < 2):
        return {"class": cls, "loss": loss, "act": act, "labels": labels}, ("ff", state[1])
    if cls == "CenterLossOutputLayer":
        loss, act, labels, k = "MCXENT", "SOFTMAX", "onehot", max(k, 2)
    if kind == "cnn" and state[1] * state[2] * state[3] > MAX_FLAT:
        return {"class": "CnnLossLayer", "loss": "MSE", "act": "IDENTITY", "labels": "real"}, state
    return {"class": "OutputLayer" if cls == "LossLayer" else cls, "nOut": k, "loss": loss, "act": act,
            "labels": labels}, ("ff", k)


@st.composite
def training(draw: Callable) -> Spec:
    """What the network-wide builder sets: data type, updater, regularization, gradient normalization, dropout."""
    updater = draw(st.sampled_from(UPDATERS))
    spec: Spec = {"dtype": draw(st.sampled_from(("FLOAT", "DOUBLE"))), "updater": updater,
                  "lr": draw(st.sampled_from((0.01, 0.1))), "seed": draw(st.integers(1, 2**16))}
    if draw(st.booleans()):
        spec["l1"] = draw(st.sampled_from((0.0, 1e-3)))
        spec["l2"] = draw(st.sampled_from((0.0, 1e-3)))
        spec["weightDecay"] = draw(st.sampled_from((0.0, 1e-3)))
    norm = draw(st.sampled_from(GRAD_NORMS))
    if norm != "None":
        spec["gradientNormalization"] = norm
        spec["threshold"] = draw(st.sampled_from((0.5, 1.0)))
    if draw(st.integers(0, 4)) == 0:
        spec["dropOut"] = draw(st.sampled_from((0.5, 0.9)))
    if draw(st.integers(0, 5)) == 0:
        spec["workspaces"] = "NONE"
    return spec


@st.composite
def multilayer(draw: Callable, max_layers: int = 5) -> Spec:
    """A MultiLayerConfiguration: one input, hidden layers, an output layer."""
    inp = draw(input_type())
    state = input_state(inp)
    layers: list[Spec] = []
    count = draw(st.integers(1 if needs_first(state) else 0, max_layers))
    for _ in range(count):
        layer, state = draw(hidden_layer(state))
        layers.append(layer)
    head, label = draw(output_layer(state))
    layers.append(head)
    spec = {"kind": "multilayer", **draw(training()), "batch": draw(st.integers(2, 6)), "inputs": [inp],
            "layers": layers, "labels": [label]}
    if inp["kind"] in ("rnn", "seqindex"):
        spec["mask"] = draw(st.booleans())
        # truncated BPTT: DL4J's fit() trains it only where the labels are as long as the input (it returns
        # without a step otherwise)
        if state[0] == "rnn" and state[2] == inp["steps"] and count > 0 and draw(st.integers(0, 5)) == 0:
            spec["tbptt"] = draw(st.integers(1, max(1, inp["steps"] - 1)))
    return spec

