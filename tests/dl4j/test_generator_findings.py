"""What the network generator (tests/dl4j/netgen.py) found, each shrunk to its smallest network and
fixed at its cause; real DL4J in the session JVM. `check` trains each network with DL4J's own fit()
and planned (liveness, the smallest plan, utp on the disk tier) and compares the parameters."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pyd4j.dl4j.layer_rules import APPLIES_INPUT_DROPOUT
from tests.dl4j import netbuild
from tests.dl4j.netcheck import check, planner_shapes

pytestmark = pytest.mark.jvm

BASE = {"dtype": "FLOAT", "updater": "Adam", "lr": 0.01, "seed": 7, "batch": 3}
RNN_IN = [{"kind": "rnn", "size": 3, "steps": 4}]


def spec(layers: list[dict], inputs: list[dict], labels: list, **more) -> dict:
    return {"kind": "multilayer", **BASE, "inputs": inputs, "layers": layers, "labels": labels, **more}


def exact(s: dict, modes: tuple[str, ...] = ("liveness", "smallest", "offload")) -> None:
    outcome = check(s, modes)
    assert outcome.status == "exact", outcome.report(s)


def graph_of(s: dict):
    from pyd4j.dl4j.graph import graph_from_dl4j_json

    doc = json.loads(str(netbuild.configuration(s).toJson()))
    return graph_from_dl4j_json(doc, s["batch"], planner_shapes(s))


def test_a_dense_layer_on_a_sequence_runs_on_every_time_step(jvm) -> None:
    """DL4J's RnnToFeedForward preprocessor makes (N, C, T) rows of (N*T, C): the planner took the
    sequence as N rows of C*T features and refused the layer ("nIn = 3, but it is fed 12 features")."""
    s = spec([{"class": "DenseLayer", "nOut": 5, "act": "TANH", "bias": True},
              {"class": "RnnOutputLayer", "nOut": 2, "loss": "MSE", "act": "IDENTITY", "labels": "real"}],
             RNN_IN, [["rnn", 2, 4]], mask=True)
    g = graph_of(s)
    assert [layer.out_shape for layer in g.layers] == [(3, 3, 4), (3 * 4, 5), (3, 2, 4)]
    assert [layer.param_elems for layer in g.layers[1:]] == [3 * 5 + 5, 5 * 2 + 2]
    exact(s)


def test_a_flattened_image_read_by_a_graph_layer_is_reshaped_first(jvm) -> None:
    """A layer vertex's FeedForwardToCnn preprocessor (convolutionalFlat input) was ignored: the planner
    refused the valid graph ("expects an NCHW input, got (3, 30)")."""
    s = {"kind": "graph", **BASE, "inputs": [{"kind": "cnnflat", "channels": 2, "height": 3, "width": 5}],
         "layers": [{"class": "SubsamplingLayer", "pooling": "MAX", "kernel": [2, 2], "stride": [1, 1],
                     "padding": [0, 0], "mode": "Truncate", "name": "pool", "inputs": ["in0"]},
                    {"class": "OutputLayer", "nOut": 2, "loss": "MCXENT", "act": "SOFTMAX", "labels": "onehot",
                     "name": "out", "inputs": ["pool"]}],
         "outputs": ["out"], "labels": [["ff", 2]]}
    assert graph_of(s).layers[1].out_shape == (3, 2, 2, 4)
    exact(s)


def test_a_wrapper_layer_is_checked_by_its_own_class(jvm) -> None:
    """MaskZeroLayer's instance answers conf() with the layer it wraps: the trainer refused every plan of
    it ("plan node 1 is layer0 (MaskZeroLayer); the network's layer 0 is a SimpleRnn")."""
    exact(spec([{"class": "MaskZeroLayer", "layer": {"class": "SimpleRnn", "nOut": 3, "act": "TANH"}},
                {"class": "RnnOutputLayer", "nOut": 2, "loss": "MSE", "act": "IDENTITY", "labels": "real"}],
               RNN_IN, [["rnn", 2, 4]], mask=True))


# (input, layer) pairs: one DL4J layer class each, on an input it reads
DROPOUT_PROBES = [
    ({"kind": "ff", "size": 4}, {"class": "DenseLayer", "nOut": 3, "act": "TANH", "bias": True}),
    ({"kind": "ff", "size": 4}, {"class": "BatchNormalization"}),
    ({"kind": "ff", "size": 4}, {"class": "ActivationLayer", "act": "TANH"}),
    ({"kind": "ff", "size": 4}, {"class": "AutoEncoder", "nOut": 3, "act": "TANH"}),
    ({"kind": "ff", "size": 4}, {"class": "PReLULayer", "shape": [4]}),
    ({"kind": "index", "vocab": 5}, {"class": "EmbeddingLayer", "nIn": 5, "nOut": 3, "act": "IDENTITY"}),
    ({"kind": "cnn", "channels": 2, "height": 4, "width": 4},
     {"class": "ConvolutionLayer", "nOut": 2, "act": "RELU", "kernel": [2, 2], "stride": [1, 1], "padding": [0, 0],
      "mode": "Truncate"}),
    ({"kind": "cnn", "channels": 2, "height": 4, "width": 4},
     {"class": "SubsamplingLayer", "pooling": "MAX", "kernel": [2, 2], "stride": [1, 1], "padding": [0, 0],
      "mode": "Truncate"}),
    ({"kind": "cnn", "channels": 2, "height": 4, "width": 4}, {"class": "ZeroPaddingLayer", "padding": [1, 0, 0, 1]}),
    ({"kind": "cnn", "channels": 2, "height": 4, "width": 4}, {"class": "Upsampling2D", "size": 2}),
    ({"kind": "cnn", "channels": 2, "height": 4, "width": 4}, {"class": "SpaceToDepthLayer", "blocks": 2}),
    ({"kind": "rnn", "size": 3, "steps": 4}, {"class": "LSTM", "nOut": 2, "act": "TANH"}),
    ({"kind": "seqindex", "vocab": 5, "steps": 4}, {"class": "EmbeddingSequenceLayer", "nIn": 5, "nOut": 2, "steps": 4}),
]


def test_the_layers_that_apply_their_input_dropout_are_the_ones_dl4j_applies_it_in(jvm) -> None:
    """The planner freed a producer's output early behind every layer with input dropout, taking the
    dropped copy the layer keeps for its own; BatchNormalization, ActivationLayer, pooling, padding and the
    embeddings ignore their input dropout and read the producer's output in backprop (the trainer refused:
    "BACKWARD layer0 reads its input input:Y, which the plan freed")."""
    import jpype

    from pyd4j.nd import from_numpy

    abstract = jpype.JClass("org.deeplearning4j.nn.layers.AbstractLayer")
    for inp, layer in DROPOUT_PROBES:
        loss = {"cnn": "CnnLossLayer", "rnn": "RnnLossLayer", "seqindex": "RnnLossLayer"}.get(inp["kind"], "LossLayer")
        s = spec([layer, {"class": loss, "loss": "MSE", "act": "IDENTITY", "labels": "real"}], [inp], [], dropOut=0.5)
        net = netbuild.network(netbuild.configuration(s))
        net.feedForward(from_numpy(netbuild.features(inp, 3, np.random.default_rng(0)).astype(np.float32), copy=True), True)
        applied = bool(net.getLayer(0).isDropoutApplied()) if isinstance(net.getLayer(0), abstract) else False
        assert applied == (layer["class"] in APPLIES_INPUT_DROPOUT), layer["class"]


def test_input_dropout_on_layers_that_ignore_it_trains_planned_exactly(jvm) -> None:
    exact(spec([{"class": "EmbeddingLayer", "nIn": 4, "nOut": 3, "act": "IDENTITY"},
                {"class": "ActivationLayer", "act": "TANH"},
                {"class": "OutputLayer", "nOut": 2, "loss": "MCXENT", "act": "SOFTMAX", "labels": "onehot"}],
               [{"kind": "index", "vocab": 4}], [["ff", 2]], dropOut=0.5))
    exact(spec([{"class": "Bidirectional", "mode": "ADD", "layer": {"class": "LSTM", "nOut": 2, "act": "TANH"}},
                {"class": "RnnLossLayer", "loss": "MSE", "act": "IDENTITY", "labels": "real"}],
               RNN_IN, [["rnn", 2, 4]], dropOut=0.5))


def test_a_loss_layer_computing_its_gradient_in_place_on_its_input(jvm) -> None:
    """A LossLayer with a sigmoid writes its input gradient over its input (the merge's output): the plan
    freed that output after the loss's backward step and the merge's backward read a closed array ("Op.X
    argument was closed before call"). The trainer now keeps such a gradient apart."""
    exact({"kind": "graph", **BASE, "inputs": [{"kind": "ff", "size": 1}, {"kind": "ff", "size": 1}],
           "layers": [{"class": "DenseLayer", "nOut": 1, "act": "RELU", "bias": False, "name": "dense0", "inputs": ["in0"]},
                      {"class": "MergeVertex", "name": "merge1", "inputs": ["in1", "dense0"]},
                      {"class": "LossLayer", "loss": "XENT", "act": "SIGMOID", "labels": "binary", "name": "loss2",
                       "inputs": ["merge1"]}],
           "outputs": ["loss2"], "labels": [["ff", 2]]})


@pytest.mark.parametrize("cls", ["LocalResponseNormalization", "BatchNormalization", "ActivationLayer"])
def test_a_layer_that_ignores_its_input_dropout_gives_the_same_output_with_it(jvm, cls: str) -> None:
    """The same training forward pass with and without the layer's own input dropout: identical (no mask
    is drawn), so a plan may free its producer's output only after its backward step, and slice it."""
    import jpype

    from pyd4j.nd import from_numpy, to_numpy

    assert cls not in APPLIES_INPUT_DROPOUT
    inp = {"kind": "cnn", "channels": 3, "height": 4, "width": 4}
    layers = [{"class": "ConvolutionLayer", "nOut": 6, "act": "RELU", "kernel": [1, 1], "stride": [1, 1],
               "padding": [0, 0], "mode": "Truncate"}, {"class": cls, "act": "TANH"},
              {"class": "CnnLossLayer", "loss": "MSE", "act": "IDENTITY", "labels": "real"}]
    outs = []
    for dropped in (False, True):
        doc = json.loads(str(netbuild.configuration(spec(layers, [inp], [])).toJson()))
        if dropped:
            doc["confs"][1]["layer"]["idropout"] = {"@class": "org.deeplearning4j.nn.conf.dropout.Dropout", "p": 0.5}
        net = netbuild.network(jpype.JClass("org.deeplearning4j.nn.conf.MultiLayerConfiguration").fromJson(json.dumps(doc)))
        x = netbuild.features(inp, 2, np.random.default_rng(0)).astype(np.float32)
        jpype.JClass("org.nd4j.linalg.factory.Nd4j").getRandom().setSeed(jpype.JLong(1))
        outs.append(to_numpy(net.feedForward(from_numpy(x, copy=True), True).get(2), copy=True))
    assert np.array_equal(outs[0], outs[1])


@pytest.mark.parametrize("kind", ["multilayer", "graph"])
def test_a_layer_dropping_its_input_in_place_as_dl4j_lets_it(jvm, kind: str) -> None:
    """DL4J's fit() lets every layer after the first apply its input dropout in place on its input, and
    ElementWiseMultiplicationLayer computes from the array it was given -- dropped only when in place.
    The trainer forbade input modification, so that layer ignored its dropout in the forward pass
    (parameters off by 5e-4 after one step); it now drops its own copy in place."""
    layers = [{"class": "DenseLayer", "nOut": 3, "act": "TANH", "bias": False, "name": "dense", "inputs": ["in0"]},
              {"class": "ElementWiseMultiplicationLayer", "nOut": 3, "act": "TANH", "dropOut": 0.5, "name": "mul",
               "inputs": ["dense"]},
              {"class": "OutputLayer", "nOut": 2, "loss": "MSE", "act": "IDENTITY", "labels": "real", "name": "out",
               "inputs": ["mul"]}]
    s = {"kind": kind, **BASE, "batch": 6, "inputs": [{"kind": "ff", "size": 4}], "layers": layers,
         "labels": [["ff", 2]], **({"outputs": ["out"]} if kind == "graph" else {})}
    exact(s)


def test_lrn_with_input_dropout_runs_in_batch_chunks(jvm) -> None:
    """The trainer refused a plan that slices an LRN with an input dropout setting ("fit() draws one mask
    for the whole batch"): LRN draws none. The smallest plan slices it, within DL4J's float32 error."""
    s = spec([{"class": "ConvolutionLayer", "nOut": 6, "act": "RELU", "kernel": [1, 1], "stride": [1, 1],
               "padding": [0, 0], "mode": "Truncate"},
              {"class": "LocalResponseNormalization", "dropOut": 0.5},
              {"class": "OutputLayer", "nOut": 2, "loss": "MSE", "act": "IDENTITY", "labels": "real"}],
             [{"kind": "cnn", "channels": 2, "height": 3, "width": 3}], [["ff", 2]], batch=4)
    outcome = check(s, ("smallest",))
    assert outcome.status == "exact" and outcome.chunked == ["smallest"], outcome.report(s)


def test_a_layer_dl4j_cannot_run_at_the_planned_shape_is_named(jvm) -> None:
    """Under truncated BPTT a plan is made for one segment: here 1 step, which the cropping leaves empty.
    The probe's forward pass failed with DL4J's bare words ("Indexes shouldn't be empty"); the refusal now
    names the layer DL4J fails at and the shape."""
    s = spec([{"class": "LSTM", "nOut": 2, "act": "TANH"}, {"class": "Cropping1D", "cropping": [0, 1]},
              {"class": "LSTM", "nOut": 2, "act": "TANH"},
              {"class": "RnnOutputLayer", "nOut": 2, "loss": "MSE", "act": "IDENTITY", "labels": "real"}],
             RNN_IN, [["rnn", 2, 3]], tbptt=1)
    outcome = check(s)
    assert outcome.status == "refused" and outcome.stage == "plan", outcome.report(s)
    assert "fails at 'layer" in outcome.detail and "[3, 3, 1]" in outcome.detail, outcome.detail
    # a graph runs up to a layer only: the search names the first layer whose prefix fails
    g = {**s, "kind": "graph", "outputs": ["out"],
         "layers": [{**layer, "name": name, "inputs": [src]} for layer, name, src in
                    zip(s["layers"], ["lstm", "crop", "lstm2", "out"], ["in0", "lstm", "crop", "lstm2"])]}
    outcome = check(g)
    assert outcome.status == "refused" and "fails at 'lstm2' (LSTM)" in outcome.detail, outcome.report(g)


def test_a_graph_reading_a_flattened_image_flat_and_as_an_image_is_planned_from_its_sidecar(jvm) -> None:
    """`pyd4j plan` planned a convolutionalFlat input as (C, H, W) and probed the graph with 4-d features,
    which a dense layer reading the flat input refuses ("Input that is not a matrix ... rank 4"); a
    flattened image is now planned flat, as DL4J is given it, and reshaped where a layer's preprocessor does."""
    from pyd4j.dl4j.input_types import planner_shape

    assert planner_shape({"type": "convolutionalFlat", "height": 3, "width": 5, "channels": 2}) == (30,)
    s = {"kind": "graph", **BASE, "inputs": [{"kind": "cnnflat", "channels": 2, "height": 3, "width": 5}],
         "layers": [{"class": "DenseLayer", "nOut": 3, "act": "TANH", "bias": True, "name": "dense", "inputs": ["in0"]},
                    {"class": "ConvolutionLayer", "nOut": 2, "act": "RELU", "kernel": [2, 2], "stride": [1, 1],
                     "padding": [0, 0], "mode": "Truncate", "name": "conv", "inputs": ["in0"]},
                    {"class": "SeparableConvolution2D", "nOut": 2, "depthMultiplier": 1, "act": "TANH", "kernel": [1, 1],
                     "stride": [1, 1], "padding": [0, 0], "mode": "Truncate", "name": "sep", "inputs": ["conv"]},
                    {"class": "OutputLayer", "nOut": 2, "loss": "MSE", "act": "IDENTITY", "labels": "real", "name": "out",
                     "inputs": ["dense"]},
                    {"class": "CnnLossLayer", "loss": "MSE", "act": "IDENTITY", "labels": "real", "name": "img",
                     "inputs": ["sep"]}],
         "outputs": ["out", "img"], "labels": [["ff", 2], ["cnn", 2, 2, 4]]}
    assert [layer.out_shape for layer in graph_of(s).layers][:2] == [(3, 30), (3, 3)]
    outcome = check(s, cli=True)
    assert outcome.status == "exact", outcome.report(s)


@pytest.mark.parametrize("kind", ["multilayer", "graph"])
def test_layers_below_a_frozen_layer_get_no_gradient_as_in_fit(jvm, kind: str) -> None:
    """DL4J's FrozenLayer passes no gradient back, and DL4J's backprop stops there (the layers below keep
    their parameters); the trainer refused ("BACKWARD layer0 has no gradient of its output"). In the graph
    the layer below also feeds a live branch, whose gradient it gets."""
    frozen = {"class": "FrozenLayer", "layer": {"class": "DenseLayer", "nOut": 5, "act": "ELU", "bias": True}}
    if kind == "multilayer":
        s = spec([{"class": "DenseLayer", "nOut": 3, "act": "SIGMOID", "bias": True}, frozen,
                  {"class": "OutputLayer", "nOut": 2, "loss": "MSE", "act": "IDENTITY", "labels": "real"}],
                 [{"kind": "ff", "size": 4}], [["ff", 2]], l2=1e-3)
    else:
        s = {"kind": "graph", **BASE, "l2": 1e-3, "dropOut": 0.5, "inputs": [{"kind": "ff", "size": 4}],
             "layers": [{"class": "DenseLayer", "nOut": 3, "act": "SIGMOID", "bias": True, "name": "d", "inputs": ["in0"]},
                        {**frozen, "name": "f", "inputs": ["d"]},
                        {"class": "DenseLayer", "nOut": 5, "act": "TANH", "bias": True, "name": "e", "inputs": ["d"]},
                        {"class": "ElementWiseVertex", "op": "Add", "name": "add", "inputs": ["f", "e"]},
                        {"class": "OutputLayer", "nOut": 2, "loss": "MSE", "act": "IDENTITY", "labels": "real",
                         "name": "out", "inputs": ["add"]}],
             "outputs": ["out"], "labels": [["ff", 2]]}
    exact(s)


def test_a_loss_layer_behind_a_pass_through_preprocessor(jvm) -> None:
    """Global pooling over time feeds a LossLayer through an RnnToFeedForward preprocessor that passes the
    2-d array through: the loss layer's tanh gradient, written over that array, was closed by the trainer
    as the preprocessor's dead intermediate, and the score read a closed array."""
    exact(spec([{"class": "DenseLayer", "nOut": 3, "act": "TANH", "bias": True}, {"class": "RepeatVector", "n": 2},
                {"class": "GlobalPoolingLayer", "pooling": "MAX"},
                {"class": "LossLayer", "loss": "L2", "act": "TANH", "labels": "real"}],
               [{"kind": "ff", "size": 3}], [["ff", 3]]))


def test_a_wrapped_layer_keeps_its_dropped_input_when_its_producer_is_recomputed(jvm) -> None:
    """LastTimeStep(LSTM) with input dropout behind an ActivationLayer the smallest plan recomputes: the
    trainer took the wrapper for a layer without dropout and gave the LSTM the recomputed, undropped input
    for its backward step (parameters off by 0.07)."""
    exact(spec([{"class": "ActivationLayer", "act": "SIGMOID"},
                {"class": "LastTimeStep", "layer": {"class": "LSTM", "nOut": 4, "act": "SOFTSIGN"}},
                {"class": "DenseLayer", "nOut": 4, "act": "TANH", "bias": True},
                {"class": "OutputLayer", "nOut": 1, "loss": "SQUARED_HINGE", "act": "TANH", "labels": "sign"}],
               [{"kind": "rnn", "size": 1, "steps": 1}], [["ff", 1]], dropOut=0.5, updater="Sgd", lr=0.1, batch=4))


def test_a_samediff_layer_with_input_dropout_gets_its_input_as_fit_gives_it(jvm) -> None:
    """SelfAttentionLayer (a SameDiff layer) ignores its input dropout, but the trainer gave it a contiguous
    copy of the embedding's strided output to drop in place: another BLAS path, parameters 1 ulp off
    (32 of 252 after 2 iterations)."""
    emb = {"class": "EmbeddingSequenceLayer", "nIn": 8, "nOut": 5, "steps": 5}
    out = {"class": "RnnOutputLayer", "nOut": 2, "loss": "MCXENT", "act": "SOFTMAX", "labels": "onehot"}
    exact(spec([emb, {"class": "SelfAttentionLayer", "nOut": 5, "heads": 2}, out],
               [{"kind": "seqindex", "vocab": 8, "steps": 5}], [["rnn", 2, 5]], dropOut=0.5, updater="Sgd", lr=0.1,
               seed=971, batch=2), modes=("liveness",))


def test_the_probe_leaves_the_gradient_view_as_it_found_it(jvm) -> None:
    """The probe's backward steps wrote into the network's gradient view and left it there: a layer fit()
    gives no gradient (below a FrozenLayer) was then updated with the probe's gradient (PReLU, an opaque
    layer the probe measures; parameters off by 0.015)."""
    exact(spec([{"class": "PReLULayer", "shape": [5]},
                {"class": "FrozenLayer", "layer": {"class": "DenseLayer", "nOut": 6, "act": "RELU", "bias": True}},
                {"class": "OutputLayer", "nOut": 3, "loss": "MCXENT", "act": "SOFTMAX", "labels": "onehot"}],
               [{"kind": "ff", "size": 5}], [["ff", 3]], updater="Sgd", lr=0.1, batch=5))


def test_a_shared_activation_dropped_in_place_by_its_last_reader_is_refused_by_name(jvm) -> None:
    """DL4J's fit() lets the last reader of 'td' (c5) drop it in place; lc4 (a SameDiff layer, no dropout
    of its own) read that same array and computes its backward step from the dropped values. Planned
    training gave lc4 the intact activation (parameters off by 0.1); it now refuses, naming both."""
    s = {"kind": "graph", **BASE, "updater": "Sgd", "lr": 0.1, "dropOut": 0.5, "batch": 2,
         "inputs": [{"kind": "rnn", "size": 4, "steps": 6}],
         "layers": [{"class": "TimeDistributed", "layer": {"class": "DenseLayer", "nOut": 3, "act": "TANH", "bias": True},
                     "name": "td", "inputs": ["in0"]},
                    {"class": "LocallyConnected1D", "nOut": 1, "kernel": 1, "act": "TANH", "name": "lc4", "inputs": ["td"]},
                    {"class": "Convolution1DLayer", "nOut": 5, "kernel": 1, "mode": "Same", "act": "TANH", "name": "c5",
                     "inputs": ["td"]},
                    {"class": "RnnOutputLayer", "nOut": 4, "loss": "MSE", "act": "IDENTITY", "labels": "real",
                     "name": "out", "inputs": ["lc4"]},
                    {"class": "RnnOutputLayer", "nOut": 4, "loss": "MSE", "act": "IDENTITY", "labels": "real",
                     "name": "out2", "inputs": ["c5"]}],
         "outputs": ["out", "out2"], "labels": [["rnn", 4, 6], ["rnn", 4, 6]]}
    outcome = check(s)
    assert outcome.status == "refused", outcome.report(s)
    assert "vertex 'c5' applies its input dropout in place on the output of 'td'" in outcome.detail
    assert "'lc4' computes its backward step" in outcome.detail
    without = {**s, "dropOut": None}
    without.pop("dropOut")
    exact(without)


def test_a_layer_two_levels_below_a_frozen_layer_gets_no_gradient_either(jvm) -> None:
    """Backprop stops at a FrozenLayer for every layer below it, not only the next one: the trainer cut
    the layer right below and then refused the one under it ("BACKWARD layer0 has no gradient of its
    output"). Generated: FrozenLayer, PReLU, FrozenLayer, output."""
    def frozen(n: int) -> dict:
        return {"class": "FrozenLayer", "layer": {"class": "DenseLayer", "nOut": n, "act": "ELU", "bias": True}}
    s = spec([frozen(4), {"class": "DenseLayer", "nOut": 3, "act": "SIGMOID", "bias": True}, frozen(5),
              {"class": "OutputLayer", "nOut": 2, "loss": "MSE", "act": "IDENTITY", "labels": "real"}],
             [{"kind": "ff", "size": 4}], [["ff", 2]], updater="AMSGrad")
    exact(s)


def test_a_vertex_combining_a_stacked_batch_with_the_batch_is_refused_by_name(jvm) -> None:
    """A StackVertex doubles the batch; an ElementWiseVertex adding its output to a network input (batch
    N and 2N) was refused by the planner's join with no layer named ("JOIN needs >= 2 inputs of one
    shape"). Now the vertex is named with both batches; stacking and unstacking again plans as DL4J runs it."""
    from pyd4j.sched.graph import GraphError

    cnn = {"kind": "cnn", "channels": 1, "height": 3, "width": 2}
    out = {"class": "CnnLossLayer", "loss": "MCXENT", "act": "SOFTMAX", "labels": "onehot", "name": "loss"}
    bad = {"kind": "graph", **BASE, "batch": 2, "inputs": [cnn, cnn],
           "layers": [{"class": "StackVertex", "name": "stack", "inputs": ["in0", "in1"]},
                      {"class": "ElementWiseVertex", "op": "Add", "name": "add", "inputs": ["in0", "stack"]},
                      {**out, "inputs": ["add"]}],
           "outputs": ["loss"], "labels": [["cnn", 1, 3, 2]]}
    with pytest.raises(GraphError, match=r"ElementWiseVertex 'add' combines inputs of batch sizes \[2, 4\]"):
        graph_of(bad)
    good = {**bad, "layers": [bad["layers"][0],
                              {"class": "UnstackVertex", "from": 1, "stackSize": 2, "name": "un", "inputs": ["stack"]},
                              {"class": "ElementWiseVertex", "op": "Add", "name": "add", "inputs": ["in0", "un"]},
                              {**out, "inputs": ["add"]}]}
    g = graph_of(good)
    assert [layer.out_shape[0] for layer in g.layers] == [2, 2, 4, 2, 2, 2]
    exact(good)
