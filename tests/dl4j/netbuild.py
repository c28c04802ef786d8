"""A generated network spec (`tests.dl4j.netgen`) built with DL4J's own builders through JPype, and
random data valid for it: features, labels valid for each loss, masks for sequences (each example a
prefix of its steps)."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from tests.dl4j.netgen import Spec

ITERATIONS = 2   # batches per generated network: the second iteration sees the updater's state


@cache
def J(name: str) -> Any:  # noqa: N802 - a Java class
    import jpype

    return jpype.JClass(name if name.startswith("org.") else f"org.deeplearning4j.nn.conf.{name}")


def enum(cls: str, value: str) -> Any:
    return getattr(J(cls), value)


def activation(name: str) -> Any:
    return enum("org.nd4j.linalg.activations.Activation", name)


def updater(spec: Spec) -> Any:
    name, lr = spec["updater"], spec["lr"]
    cls = J(f"org.nd4j.linalg.learning.config.{name}")
    if name == "NoOp":
        return cls()
    if name == "AdaDelta":
        return cls()
    if name == "Nesterovs":
        return cls(lr, 0.9)
    return cls(lr)


def pooling(name: str) -> Any:
    return enum("layers.SubsamplingLayer$PoolingType", name)


def ints(values: list[int]) -> Any:
    import jpype

    return jpype.JArray(jpype.JInt)([int(v) for v in values])


def _window(cls: str, s: Spec, *first: Any) -> Any:
    """A 2-d window layer's builder (by its (kernel, stride, padding) constructor: JPype resolves the
    no-argument one to the varargs kernel constructor, which DL4J refuses)."""
    b = J(f"layers.{cls}$Builder")(*first, ints(s["kernel"]), ints(s["stride"]), ints(s["padding"]))
    return b.convolutionMode(enum("ConvolutionMode", s["mode"]))


def _loss(s: Spec) -> Any:
    return enum("org.nd4j.linalg.lossfunctions.LossFunctions$LossFunction", s["loss"])


def layer(s: Spec) -> Any:
    """DL4J's layer configuration of one layer spec (`dropOut`: its own input dropout)."""
    conf = _layer(s)
    if "dropOut" in s:
        conf.setIDropout(J("dropout.Dropout")(float(s["dropOut"])))
    return conf


def _layer(s: Spec) -> Any:
    c = s["class"]
    act = activation(s["act"]) if "act" in s else None
    if c in ("DenseLayer", "AutoEncoder", "EmbeddingLayer", "ElementWiseMultiplicationLayer"):
        b = J("layers.misc.ElementWiseMultiplicationLayer$Builder" if c == "ElementWiseMultiplicationLayer"
              else f"layers.{c}$Builder")().nOut(s["nOut"]).activation(act)
        if c == "DenseLayer":
            b = b.hasBias(s["bias"])
        if c == "AutoEncoder":
            b = b.corruptionLevel(0.0)
        if "nIn" in s:
            b = b.nIn(s["nIn"])
        return b.build()
    if c == "EmbeddingSequenceLayer":
        return J("layers.EmbeddingSequenceLayer$Builder")().nIn(s["nIn"]).nOut(s["nOut"]).inputLength(s["steps"]).build()
    if c in ("LSTM", "SimpleRnn", "GravesLSTM", "GravesBidirectionalLSTM"):
        return J(f"layers.recurrent.SimpleRnn$Builder" if c == "SimpleRnn" else f"layers.{c}$Builder")() \
            .nOut(s["nOut"]).activation(act).build()
    if c == "Bidirectional":
        return J("layers.recurrent.Bidirectional")(enum("layers.recurrent.Bidirectional$Mode", s["mode"]), layer(s["layer"]))
    if c in ("LastTimeStep", "TimeDistributed"):
        return J(f"layers.recurrent.{c}")(layer(s["layer"]))
    if c == "MaskZeroLayer":
        return J("layers.util.MaskZeroLayer")(layer(s["layer"]), 0.0)
    if c == "VariationalAutoencoder":
        dist = J("layers.variational.GaussianReconstructionDistribution")(activation("IDENTITY"))
        return (J("layers.variational.VariationalAutoencoder$Builder")().nOut(s["nOut"]).activation(act)
                .encoderLayerSizes(s["hidden"]).decoderLayerSizes(s["hidden"]).reconstructionDistribution(dist).build())
    if c in ("FrozenLayerWithBackprop", "FrozenLayer"):
        return J(f"layers.misc.{c}")(layer(s["layer"]))
    if c == "MaskLayer":
        return J("layers.util.MaskLayer")()
    if c in ("SelfAttentionLayer", "LearnedSelfAttentionLayer", "RecurrentAttentionLayer"):
        b = J(f"layers.{c}$Builder")().nOut(s["nOut"]).nHeads(s["heads"]).headSize(s["nOut"]).projectInput(True)
        if c == "LearnedSelfAttentionLayer":
            b = b.nQueries(s["queries"])
        if c == "RecurrentAttentionLayer":
            b = b.activation(act)
        return b.build()
    if c == "RepeatVector":
        return J("layers.misc.RepeatVector$Builder")(s["n"]).build()
    if c == "ActivationLayer":
        return J("layers.ActivationLayer$Builder")().activation(act).build()
    if c == "DropoutLayer":
        return J("layers.DropoutLayer$Builder")(float(s["p"])).build()
    if c == "PReLULayer":   # DL4J leaves a convolutional input's shape unset: give it
        import jpype

        return J("layers.PReLULayer$Builder")().inputShape(jpype.JArray(jpype.JLong)(s["shape"])).build()
    if c in ("BatchNormalization", "LocalResponseNormalization"):
        return J(f"layers.{c}$Builder")().build()
    if c == "GlobalPoolingLayer":
        b = J("layers.GlobalPoolingLayer$Builder")(enum("layers.PoolingType", s["pooling"]))
        return (b.pnorm(2) if s["pooling"] == "PNORM" else b).build()
    conf = _window_layer(s, act)
    return conf if conf is not None else output(s)


def _window_layer(s: Spec, act: Any) -> Any:
    """A layer sliding a window over an image or a sequence, or padding, cropping or resampling one; None
    for any other class."""
    c = s["class"]
    if c == "LocallyConnected2D":
        return (J("layers.LocallyConnected2D$Builder")().nOut(s["nOut"]).activation(act).kernelSize(*s["kernel"])
                .stride(*s["stride"]).padding(*s["padding"]).convolutionMode(enum("ConvolutionMode", s["mode"])).build())
    if c == "LocallyConnected1D":
        return (J("layers.LocallyConnected1D$Builder")().nOut(s["nOut"]).activation(act).kernelSize(s["kernel"])
                .convolutionMode(enum("ConvolutionMode", "Truncate")).build())
    if c == "ConvolutionLayer":
        return _window(c, s).nOut(s["nOut"]).activation(act).build()
    if c == "SubsamplingLayer":
        b = _window(c, s, pooling(s["pooling"]))
        return (b.pnorm(2) if s["pooling"] == "PNORM" else b).build()
    if c in ("SeparableConvolution2D", "DepthwiseConvolution2D"):
        b = _window(c, s).depthMultiplier(s["depthMultiplier"]).activation(act)
        return (b.nOut(s["nOut"]) if "nOut" in s else b).build()
    if c == "Deconvolution2D":
        return _window(c, s).nOut(s["nOut"]).activation(act).build()
    if c == "ZeroPaddingLayer":
        return J("layers.ZeroPaddingLayer$Builder")(*s["padding"]).build()
    if c == "Cropping2D":
        return J("layers.convolutional.Cropping2D")(*s["cropping"])
    if c == "Upsampling2D":
        return J("layers.Upsampling2D$Builder")(s["size"]).build()
    if c == "SpaceToDepthLayer":
        return J("layers.SpaceToDepthLayer$Builder")(s["blocks"]).build()
    if c == "Convolution1DLayer":
        return (J("layers.Convolution1DLayer$Builder")(s["kernel"]).nOut(s["nOut"]).activation(act)
                .convolutionMode(enum("ConvolutionMode", s["mode"])).build())
    if c == "Subsampling1DLayer":
        b = J("layers.Subsampling1DLayer$Builder")(pooling(s["pooling"]), s["kernel"], 1)
        b = b.convolutionMode(enum("ConvolutionMode", s["mode"]))
        return (b.pnorm(2) if s["pooling"] == "PNORM" else b).build()
    if c == "Upsampling1D":
        return J("layers.Upsampling1D$Builder")(s["size"]).build()
    if c == "ZeroPadding1DLayer":
        return J("layers.ZeroPadding1DLayer")(*s["padding"])
    if c == "Cropping1D":
        return J("layers.convolutional.Cropping1D")(*s["cropping"])
    return None


def output(s: Spec) -> Any:
    """An output or loss layer."""
    c = s["class"]
    b = J(f"layers.{c}$Builder")(_loss(s)).activation(activation(s["act"]))
    if c == "CenterLossOutputLayer":
        b = J("layers.CenterLossOutputLayer$Builder")().lossFunction(_loss(s)).activation(activation(s["act"]))
    return (b.nOut(s["nOut"]) if "nOut" in s else b).build()


def vertex(s: Spec) -> Any:
    """DL4J's vertex configuration of one vertex spec."""
    c = s["class"]
    if c == "ElementWiseVertex":
        return J("graph.ElementWiseVertex")(enum("graph.ElementWiseVertex$Op", s["op"]))
    if c == "AttentionVertex":
        n = s["nIn"]
        return (J("graph.AttentionVertex$Builder")().nInQueries(n).nInKeys(n).nInValues(n).nOut(s["nOut"])
                .nHeads(s["heads"]).headSize(s["nOut"]).projectInput(True).build())
    if c in ("MergeVertex", "L2Vertex", "StackVertex", "L2NormalizeVertex", "PoolHelperVertex"):
        return J(f"graph.{c}")()
    if c == "SubsetVertex":
        return J("graph.SubsetVertex")(s["from"], s["to"])
    if c == "UnstackVertex":
        return J("graph.UnstackVertex")(s["from"], s["stackSize"])
    if c in ("ScaleVertex", "ShiftVertex"):
        return J(f"graph.{c}")(float(s["value"]))
    if c in ("LastTimeStepVertex", "ReverseTimeSeriesVertex"):
        return J(f"graph.rnn.{c}")(s["maskInput"])
    if c == "DuplicateToTimeSeriesVertex":
        return J("graph.rnn.DuplicateToTimeSeriesVertex")(s["input"])
    c_, h, w = s["shape"]
    if c == "ReshapeVertex":
        import jpype

        return J("graph.ReshapeVertex")("c", jpype.JArray(jpype.JInt)([-1, c_ * h * w]), None)
    if s["to"] == "ff":
        return J("graph.PreprocessorVertex")(J("preprocessor.CnnToFeedForwardPreProcessor")(h, w, c_))
    return J("graph.PreprocessorVertex")(J("preprocessor.FeedForwardToCnnPreProcessor")(h, w, c_))


VERTEX_CLASSES = ("AttentionVertex", "ElementWiseVertex", "MergeVertex", "L2Vertex", "StackVertex", "UnstackVertex", "L2NormalizeVertex",
                  "PoolHelperVertex", "SubsetVertex", "ScaleVertex", "ShiftVertex", "LastTimeStepVertex",
                  "ReverseTimeSeriesVertex", "DuplicateToTimeSeriesVertex", "ReshapeVertex", "PreprocessorVertex")


def input_type(s: Spec) -> Any:
    it = J("inputs.InputType")
    k = s["kind"]
    if k == "ff":
        return it.feedForward(s["size"])
    if k == "index":
        return it.feedForward(1)
    if k == "cnn":
        return it.convolutional(s["height"], s["width"], s["channels"])
    if k == "cnnflat":
        return it.convolutionalFlat(s["height"], s["width"], s["channels"])
    return it.recurrent(s["size"] if k == "rnn" else 1, s["steps"])


def base(spec: Spec, dtype: str | None = None) -> Any:
    """The network-wide builder: seed, data type, updater, regularization, normalization, dropout."""
    b = J("NeuralNetConfiguration$Builder")().seed(spec["seed"])
    b = b.dataType(enum("org.nd4j.linalg.api.buffer.DataType", dtype or spec["dtype"]))
    if spec["updater"] != "default":
        b = b.updater(updater(spec))
    for key in ("l1", "l2", "weightDecay"):
        if spec.get(key):
            b = getattr(b, key)(float(spec[key]))
    if "gradientNormalization" in spec:
        b = b.gradientNormalization(enum("GradientNormalization", spec["gradientNormalization"]))
        b = b.gradientNormalizationThreshold(float(spec["threshold"]))
    if "dropOut" in spec:
        b = b.dropOut(float(spec["dropOut"]))
    if "workspaces" in spec:
        mode = enum("WorkspaceMode", spec["workspaces"])
        b = b.trainingWorkspaceMode(mode).inferenceWorkspaceMode(mode)
    return b


def configuration(spec: Spec, dtype: str | None = None) -> Any:
    """DL4J's MultiLayerConfiguration or ComputationGraphConfiguration of a spec."""
    if spec["kind"] == "multilayer":
        # an embedding's nIn is its vocabulary, not the width of its input of indices: keep the nIn given
        lb = base(spec, dtype).list(*[layer(s) for s in spec["layers"]]).overrideNinUponBuild(False)
        lb = lb.setInputType(input_type(spec["inputs"][0]))
        if "tbptt" in spec:
            lb = lb.backpropType(enum("BackpropType", "TruncatedBPTT")).tBPTTLength(spec["tbptt"])
        return lb.build()
    gb = base(spec, dtype).graphBuilder().addInputs(*[f"in{k}" for k in range(len(spec["inputs"]))])
    for s in spec["layers"]:
        if s["class"] in VERTEX_CLASSES:
            gb = gb.addVertex(s["name"], vertex(s), *s["inputs"])
        else:
            gb = gb.addLayer(s["name"], layer(s), *s["inputs"])
    gb = gb.setOutputs(*spec["outputs"]).setInputTypes(*[input_type(s) for s in spec["inputs"]])
    if "tbptt" in spec:
        gb = gb.backpropType(enum("BackpropType", "TruncatedBPTT")).tBPTTLength(spec["tbptt"])
    conf = gb.build()
    for s in spec["layers"]:   # the graph builder sets an embedding's nIn to its input's width: its vocabulary again
        if s["class"] in ("EmbeddingLayer", "EmbeddingSequenceLayer"):
            conf.getVertices().get(s["name"]).getLayerConf().getLayer().setNIn(int(s["nIn"]))
    return conf


def network(conf: Any) -> Any:
    cls = "org.deeplearning4j.nn.graph.ComputationGraph" if "Graph" in str(conf.getClass().getName()) \
        else "org.deeplearning4j.nn.multilayer.MultiLayerNetwork"
    net = J(cls)(conf)
    net.init()
    return net


def features(s: Spec, n: int, rng: np.random.Generator) -> np.ndarray:
    k = s["kind"]
    if k == "ff":
        return rng.standard_normal((n, s["size"]))
    if k == "cnn":
        return rng.standard_normal((n, s["channels"], s["height"], s["width"]))
    if k == "cnnflat":
        return rng.standard_normal((n, s["channels"] * s["height"] * s["width"]))
    if k == "rnn":
        return rng.standard_normal((n, s["size"], s["steps"]))
    if k == "index":
        return rng.integers(0, s["vocab"], (n, 1)).astype(float)
    return rng.integers(0, s["vocab"], (n, 1, s["steps"])).astype(float)


def labels(t: tuple, kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Labels valid for a loss: one-hot or probabilities along the channels, 0/1, +-1, counts, reals."""
    shape = (n, *t[1:])
    if kind in ("onehot", "probs"):
        if kind == "probs":
            y = rng.random(shape) + 0.1
            return y / y.sum(axis=1, keepdims=True)
        hot = rng.integers(0, t[1], (n, *t[2:]))
        return np.moveaxis(np.eye(t[1])[hot], -1, 1)
    if kind == "binary":
        return rng.integers(0, 2, shape).astype(float)
    if kind == "sign":
        return rng.choice([-1.0, 1.0], shape)
    if kind == "count":
        return rng.integers(0, 3, shape).astype(float)
    if kind == "positive":
        return rng.random(shape)
    return rng.standard_normal(shape)


def mask(n: int, steps: int, rng: np.random.Generator) -> np.ndarray:
    """Each example a prefix of its steps, at least one; the first example whole."""
    lengths = rng.integers(1, steps + 1, n)
    lengths[0] = steps
    return (np.arange(steps)[None, :] < lengths[:, None]).astype(float)


def batches(spec: Spec, dtype: str | None = None) -> list[tuple]:
    """ITERATIONS batches for the spec, in its data type (or `dtype`): (features, labels[, masks])."""
    rng = np.random.default_rng(spec["seed"])
    np_type = np.float64 if (dtype or spec["dtype"]) == "DOUBLE" else np.float32
    b = spec["batch"]
    n = b * ITERATIONS
    xs = [features(s, n, rng) for s in spec["inputs"]]
    heads = [s for s in spec["layers"] if s["name"] in spec["outputs"]] if spec["kind"] == "graph" else spec["layers"][-1:]
    ys = [labels(t, h["labels"], n, rng) for t, h in zip(spec["labels"], heads)]
    seq = [s for s in spec["inputs"] if s["kind"] in ("rnn", "seqindex")]
    fms = [mask(n, s["steps"], rng) if spec.get("mask") and s["kind"] in ("rnn", "seqindex") else None
           for s in spec["inputs"]]
    lms = []
    for t, h in zip(spec["labels"], heads):
        same = spec.get("mask") and seq and t[0] == "rnn" and t[2] == seq[0]["steps"] and (
            spec["kind"] == "multilayer" or h.get("labelMask"))
        lms.append(fms[spec["inputs"].index(seq[0])] if same else None)
    cast = lambda arrays: [None if a is None else np.ascontiguousarray(a, dtype=np_type) for a in arrays]  # noqa: E731
    xs, ys, fms, lms = cast(xs), cast(ys), cast(fms), cast(lms)
    out = []
    for i in range(ITERATIONS):
        sl = slice(i * b, (i + 1) * b)
        cut = lambda arrays: [None if a is None else a[sl] for a in arrays]  # noqa: E731
        parts = (cut(xs), cut(ys), cut(fms), cut(lms))
        if spec["kind"] == "multilayer" or (len(xs) == 1 and len(ys) == 1):
            parts = tuple(p[0] for p in parts)
        out.append(parts if any(m is not None for m in fms + lms) else parts[:2])
    return out
