"""Layers and vertices without a measured model run as opaque steps, planned from what DL4J itself
says of them (`org.pyd4j.train.LayerProbe`: DL4J's shapes from a forward pass, the working memory
and kept bytes of a probe iteration of each opaque step), in the session JVM with real DL4J."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pyd4j.sched.dl4j_json import graph_from_dl4j_json
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
    from pyd4j.sched.training_plan import IN_MEMORY, choose_plan, plan_document
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
