"""Layers and vertices without a measured model run as opaque steps, planned from what DL4J itself
says of them (`org.pyd4j.train.LayerProbe`: DL4J's shapes from a forward pass, the working memory
and kept bytes of a probe iteration of each opaque step), in the session JVM with real DL4J."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pyd4j.dl4j.graph import graph_from_dl4j_json
from pyd4j.sched.graph import LayerType
from tests.train.conftest import NETWORKS
from tests.train.test_refusals import network

pytestmark = pytest.mark.jvm


def test_the_probe_gives_dl4j_shapes_and_measures_each_opaque_step(jvm) -> None:
    import jpype

    from pyd4j.train import planned_graph

    net = network("lstm")
    doc = json.loads((NETWORKS / "lstm.json").read_text())
    before = net.params().dup()
    rng = jpype.JClass("org.nd4j.linalg.factory.Nd4j").getRandom()
    state = (rng.rootState(), rng.nodeState())
    info = json.loads(str(jpype.JClass("org.pyd4j.train.LayerProbe").describe(
        net, jpype.JArray(jpype.JLong)([4, 32, 50]))))
    # the probe leaves the network and the random state as they were (planning changes no training)
    assert net.params().equals(before) and (rng.rootState(), rng.nodeState()) == state
    # DL4J's own shapes (a forward pass) agree with the planner's rules, layer by layer
    rules = graph_from_dl4j_json(doc, 4, (32, 50))
    assert {k: v["shape"] for k, v in info.items()} == {l.name: list(l.out_shape[1:]) for l in rules.layers[1:]}
    assert {k: v["params"] for k, v in info.items()} == {l.name: l.param_elems for l in rules.layers[1:]}
    # each LSTM step is measured: its backward recomputes the forward pass (gate activations for
    # every time step: at least 4 gates x (N, 128, T) floats) in the working memory
    for name in ("layer0", "layer1"):
        m = info[name]["measured"]
        assert info[name]["opaque"] and m["ws_backward"] >= 4 * 4 * 128 * 50 * 4, (name, m)
    assert "measured" not in info["layer2"]   # the loss layer has its profile entry
    # the plan pyd4j.train.fit makes carries the measurements
    g = planned_graph(net, doc, 4, (32, 50))
    opaque = [l for l in g.layers if l.type is LayerType.OPAQUE]
    assert [l.attrs["measured"] for l in opaque] == [info["layer0"]["measured"], info["layer1"]["measured"]]
    assert max(g.deps.ws_bwd) >= info["layer0"]["measured"]["ws_backward"]


def test_a_recurrent_network_trains_planned_exactly_without_masks(jvm) -> None:
    """LSTM -> LSTM -> RnnOutputLayer (standard BPTT, no masks) under planned training: the
    gradient and score of one planned iteration are DL4J's own, bit for bit."""
    import jpype

    from pyd4j.nd import from_numpy
    from pyd4j.sched.choose import IN_MEMORY, choose_plan
    from pyd4j.dl4j.plan_file import plan_document
    from pyd4j.train import planned_graph

    doc = json.loads((NETWORKS / "lstm.json").read_text())
    x = np.random.default_rng(1).random((3, 32, 50), dtype=np.float32) - 0.5
    y = np.zeros((3, 10, 50), dtype=np.float32)
    y[np.arange(3), np.arange(3) % 10, :] = 1.0
    ref = network("lstm")
    net = network("lstm")
    net.setParams(ref.params().dup())
    g = planned_graph(net, doc, 3, (32, 50))
    Nd4j = jpype.JClass("org.nd4j.linalg.factory.Nd4j")
    ref.setInput(from_numpy(x, copy=True))
    ref.setLabels(from_numpy(y, copy=True))
    Nd4j.getRandom().setSeed(jpype.JLong(7))
    ref.computeGradientAndScore()
    for policy in ("liveness", IN_MEMORY):
        plan, result = choose_plan(g, policy=policy)
        plan_file = jpype.JClass("org.pyd4j.train.PlanFile").parse(json.dumps(plan_document(plan, result, "MultiLayerNetwork")), "test")
        with jpype.JClass("org.pyd4j.train.PlannedTrainer").attach(net, plan_file, None) as t:
            net.setInput(from_numpy(x, copy=True))
            net.setLabels(from_numpy(y, copy=True))
            Nd4j.getRandom().setSeed(jpype.JLong(7))
            t.computeGradientAndScore()
        a = np.asarray(ref.gradient().gradient().dup().data().asDouble())
        b = np.asarray(net.gradient().gradient().dup().data().asDouble())
        assert a.size == b.size > 0 and np.array_equal(a, b), policy
        assert net.score() == ref.score(), policy


def values(a) -> np.ndarray:
    """An ND4J array's values, exactly (INDArray.equals compares within an epsilon)."""
    return np.asarray(a.dup().data().asDouble())


def sequences(rng: np.random.Generator, lengths: list[int], steps: int = 50) -> tuple[np.ndarray, ...]:
    """A batch of sequences of different lengths for the lstm network: features (N, 32, T), one-hot
    labels (N, 10, T), and DL4J's per-time-step masks (N, T): 1 up to each sequence's end, 0 after."""
    n = len(lengths)
    x = rng.random((n, 32, steps), dtype=np.float32) - 0.5
    y = np.zeros((n, 10, steps), dtype=np.float32)
    y[np.arange(n)[:, None], rng.integers(0, 10, (n, steps)), np.arange(steps)[None, :]] = 1.0
    mask = (np.arange(steps)[None, :] < np.asarray(lengths)[:, None]).astype(np.float32)
    x[mask[:, None, :].repeat(32, axis=1) == 0] = 0.0   # padding past the end, as a data loader writes it
    return x, y, mask, mask.copy()


def test_a_recurrent_network_with_masks_of_variable_lengths_trains_planned_exactly(jvm) -> None:
    """LSTM -> LSTM -> RnnOutputLayer on sequences of different lengths, with DL4J's feature and
    label masks: one planned iteration gives DL4J's own computeGradientAndScore() bit for bit
    (gradient and score), and 10 iterations of fit() with the plan installed end with the
    parameters of DL4J's own fit() on the same batches."""
    import jpype

    from pyd4j.nd import from_numpy
    from pyd4j.sched.choose import IN_MEMORY, choose_plan
    from pyd4j.dl4j.plan_file import plan_document
    from pyd4j.train import planned_graph

    Nd4j = jpype.JClass("org.nd4j.linalg.factory.Nd4j")
    DataSet = jpype.JClass("org.nd4j.linalg.dataset.DataSet")
    PlanFile = jpype.JClass("org.pyd4j.train.PlanFile")
    Trainer = jpype.JClass("org.pyd4j.train.PlannedTrainer")
    doc = json.loads((NETWORKS / "lstm.json").read_text())
    rng = np.random.default_rng(3)
    lengths = [50, 23, 6, 37]
    x, y, fm, lm = sequences(rng, lengths)

    def put(net, masks: bool = True) -> None:
        net.setInput(from_numpy(x, copy=True))
        net.setLabels(from_numpy(y, copy=True))
        net.setLayerMaskArrays(from_numpy(fm, copy=True) if masks else None, from_numpy(lm, copy=True) if masks else None)
        Nd4j.getRandom().setSeed(jpype.JLong(7))

    ref = network("lstm")
    put(ref)
    ref.computeGradientAndScore()
    bare = network("lstm")
    bare.setParams(ref.params().dup())
    put(bare, masks=False)
    bare.computeGradientAndScore()
    assert bare.score() != ref.score()   # the masks changed what DL4J computed: not a test of an unmasked batch
    expected = values(ref.gradient().gradient())

    net = network("lstm")
    net.setParams(ref.params().dup())
    g = planned_graph(net, doc, len(lengths), (32, 50))
    plans = {}
    for policy in ("liveness", IN_MEMORY):
        plan, result = choose_plan(g, policy=policy)
        plans[policy] = PlanFile.parse(json.dumps(plan_document(plan, result, "MultiLayerNetwork")), "test")
        with Trainer.attach(net, plans[policy], None) as t:
            put(net)
            t.computeGradientAndScore()
            assert t.stats().iterations == 1
        got = values(net.gradient().gradient())
        assert got.size == expected.size > 0 and np.array_equal(got, expected), policy
        assert net.score() == ref.score(), policy

    # 10 iterations: DL4J's fit() vs fit() under the plan, from the same parameters, on the same batches
    batches = [sequences(rng, [int(n) for n in rng.integers(1, 51, len(lengths))]) for _ in range(10)]

    def train(net) -> None:
        Nd4j.getRandom().setSeed(jpype.JLong(11))
        for bx, by, bfm, blm in batches:
            net.fit(DataSet(*(from_numpy(a, copy=True) for a in (bx, by, bfm, blm))))

    fitted = network("lstm")
    start = fitted.params().dup()
    train(fitted)
    for policy, plan_file in plans.items():
        planned = network("lstm")
        planned.setParams(start.dup())
        with Trainer.attach(planned, plan_file, None) as t:
            train(planned)
            assert t.stats().iterations == 10, policy
        assert planned.getIterationCount() == fitted.getIterationCount() == 10, policy
        assert np.array_equal(values(planned.params()), values(fitted.params())), policy   # bit for bit
        assert not np.array_equal(values(planned.params()), values(start)), policy   # it trained


def tbptt_network(kind: str):
    """A recurrent network trained with truncated BPTT, as (configuration document, a fresh network, features,
    steps): the lstm example network (segments of 20 steps, backward length 12) as a MultiLayerNetwork, or
    LSTM -> RnnOutputLayer built as a ComputationGraph (segments of 10)."""
    import jpype

    if kind == "MultiLayerNetwork":
        doc = json.loads((NETWORKS / "lstm.json").read_text())
        doc.update(backpropType="TruncatedBPTT", tbpttFwdLength=20, tbpttBackLength=12)
        conf = jpype.JClass("org.deeplearning4j.nn.conf.MultiLayerConfiguration").fromJson(json.dumps(doc))
        net = jpype.JClass("org.deeplearning4j.nn.multilayer.MultiLayerNetwork")(conf)
        net.init()
        return doc, net, 32, 50
    Act = jpype.JClass("org.nd4j.linalg.activations.Activation")
    LSTM = jpype.JClass("org.deeplearning4j.nn.conf.layers.LSTM")
    Out = jpype.JClass("org.deeplearning4j.nn.conf.layers.RnnOutputLayer")
    Loss = jpype.JClass("org.nd4j.linalg.lossfunctions.LossFunctions$LossFunction")
    conf = (jpype.JClass("org.deeplearning4j.nn.conf.NeuralNetConfiguration$Builder")().seed(jpype.JLong(3))
            .updater(jpype.JClass("org.nd4j.linalg.learning.config.Adam")(1e-2)).graphBuilder().addInputs("in")
            .addLayer("lstm", LSTM.Builder().nIn(32).nOut(24).activation(Act.TANH).build(), "in")
            .addLayer("out", Out.Builder(Loss.MCXENT).nIn(24).nOut(10).activation(Act.SOFTMAX).build(), "lstm")
            .setOutputs("out").setInputTypes(jpype.JClass("org.deeplearning4j.nn.conf.inputs.InputType").recurrent(32))
            .backpropType(jpype.JClass("org.deeplearning4j.nn.conf.BackpropType").TruncatedBPTT)
            .tBPTTForwardLength(10).tBPTTBackwardLength(10).build())
    text = str(conf.toJson())
    net = jpype.JClass("org.deeplearning4j.nn.graph.ComputationGraph")(
        jpype.JClass("org.deeplearning4j.nn.conf.ComputationGraphConfiguration").fromJson(text))
    net.init()
    return json.loads(text), net, 32, 25


@pytest.mark.parametrize("kind", ["MultiLayerNetwork", "ComputationGraph"])
def test_truncated_bptt_trains_planned_exactly(jvm, kind: str) -> None:
    """Under truncated BPTT DL4J's fit() trains each batch as one iteration per segment of tbpttFwdLength
    steps, each starting from the state the segment before left: the lstm network on masked sequences of
    50 steps (20 + 20 + 10), and a graph LSTM -> RnnOutputLayer on 25 (10 + 10 + 5). The plan is made for one
    segment; 6 batches of fit() under it end with the parameters of DL4J's own fit(), bit for bit."""
    import jpype

    from pyd4j.nd import from_numpy
    from pyd4j.sched.choose import IN_MEMORY, choose_plan
    from pyd4j.dl4j.plan_file import plan_document
    from pyd4j.train import planned_graph

    Nd4j = jpype.JClass("org.nd4j.linalg.factory.Nd4j")
    DataSet = jpype.JClass("org.nd4j.linalg.dataset.DataSet")
    PlanFile = jpype.JClass("org.pyd4j.train.PlanFile")
    Trainer = jpype.JClass("org.pyd4j.train.PlannedTrainer")
    doc, fitted, features, steps = tbptt_network(kind)
    segment = doc["tbpttFwdLength"]
    rng = np.random.default_rng(5)
    batches = [sequences(rng, [int(n) for n in rng.integers(1, steps + 1, 4)], steps) for _ in range(6)]

    def train(net) -> None:
        Nd4j.getRandom().setSeed(jpype.JLong(13))
        for bx, by, bfm, blm in batches:
            net.fit(DataSet(*(from_numpy(a, copy=True) for a in (bx, by, bfm, blm))))

    start = fitted.params().dup()
    train(fitted)
    assert fitted.getIterationCount() == 18   # three segments a batch: DL4J really trained truncated
    standard = tbptt_network(kind)[1]
    conf = standard.getLayerWiseConfigurations() if kind == "MultiLayerNetwork" else standard.getConfiguration()
    conf.setBackpropType(jpype.JClass("org.deeplearning4j.nn.conf.BackpropType").Standard)
    train(standard)
    assert not np.array_equal(values(standard.params()), values(fitted.params()))   # truncation changed the result

    net = tbptt_network(kind)[1]
    g = planned_graph(net, doc, 4, (features, steps))
    assert list(g.layers[0].out_shape) == [4, features, segment]   # one segment
    for policy in ("liveness", IN_MEMORY):
        plan, result = choose_plan(g, policy=policy)
        plan_file = PlanFile.parse(json.dumps(plan_document(plan, result, kind)), "test")
        planned = tbptt_network(kind)[1]
        planned.setParams(start.dup())
        with Trainer.attach(planned, plan_file, None) as t:
            train(planned)
            assert t.stats().iterations == 18, policy
        assert planned.getIterationCount() == 18, policy
        assert np.array_equal(values(planned.params()), values(fitted.params())), policy   # bit for bit
        assert not np.array_equal(values(planned.params()), values(start)), policy


@pytest.mark.parametrize("pooling", ["MAX", "AVG"])
def test_global_pooling_over_time_plans_and_trains_exactly(jvm, pooling: str) -> None:
    """DL4J's GlobalPoolingLayer pools a recurrent input over time ((N, C, T) -> (N, C)): the
    planner takes it (DL4J's own step, run as it runs it) and planned fit() is DL4J's, bit for bit."""
    import jpype

    from pyd4j.data import NumpyBatches
    from pyd4j.train import fit

    j = jpype.JClass
    lstm = j("org.deeplearning4j.nn.conf.layers.LSTM").Builder().nOut(8).build()
    pool = j("org.deeplearning4j.nn.conf.layers.GlobalPoolingLayer").Builder(
        j("org.deeplearning4j.nn.conf.layers.PoolingType").valueOf(pooling)).build()
    out = (j("org.deeplearning4j.nn.conf.layers.OutputLayer").Builder(
        j("org.nd4j.linalg.lossfunctions.LossFunctions$LossFunction").MCXENT).nOut(3)
        .activation(j("org.nd4j.linalg.activations.Activation").SOFTMAX).build())
    conf = (j("org.deeplearning4j.nn.conf.NeuralNetConfiguration").Builder().seed(4).list(lstm, pool, out)
            .setInputType(j("org.deeplearning4j.nn.conf.inputs.InputType").recurrent(5, 10)).build())
    g = graph_from_dl4j_json(str(conf.toJson()), 2, (5, 10))
    assert [tuple(l.out_shape) for l in g.layers] == [(2, 5, 10), (2, 8, 10), (2, 8), (2, 3)]

    def make():
        net = j("org.deeplearning4j.nn.multilayer.MultiLayerNetwork")(conf.clone())
        net.init()
        return net

    rng = np.random.default_rng(3)
    x = rng.random((8, 5, 10), dtype=np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 8)]
    random = j("org.nd4j.linalg.factory.Nd4j").getRandom()
    plain, planned = make(), make()
    random.setSeed(jpype.JLong(2))
    fit(plain, NumpyBatches(x, y, 4, shuffle=False), progress=False)
    random.setSeed(jpype.JLong(2))
    result = fit(planned, NumpyBatches(x, y, 4, shuffle=False), progress=False, memory="superneurons")
    assert result.plan["trainer"]["iterations"] == 2
    assert planned.params().equals(plain.params())
