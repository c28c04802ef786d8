"""Planned training refuses what it cannot replay exactly -- before training, naming the layer or
setting and the fix -- and runs in one line from Java code (real DL4J in the session JVM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyd4j.dl4j.input_types import sidecar_shapes
from pyd4j.dl4j.graph import graph_from_dl4j_json, network_kind
from pyd4j.sched.choose import choose_plan
from pyd4j.dl4j.plan_file import write_plan
from tests.train.conftest import NETWORKS

pytestmark = pytest.mark.jvm


def plan_file(tmp_path: Path, name: str, batch: int = 4, policy: str | None = None) -> str:
    config = NETWORKS / f"{name}.json"
    doc = json.loads(config.read_text())
    plan, result = choose_plan(graph_from_dl4j_json(doc, batch, sidecar_shapes(config)), policy=policy)
    path = tmp_path / f"{name}.{plan.policy}.json"
    return str(write_plan(path, plan, result, network_kind(doc), str(config)))


def network(name: str):
    import jpype

    text = (NETWORKS / f"{name}.json").read_text()
    if '"vertices"' in text:
        conf = jpype.JClass("org.deeplearning4j.nn.conf.ComputationGraphConfiguration").fromJson(text)
        net = jpype.JClass("org.deeplearning4j.nn.graph.ComputationGraph")(conf)
    else:
        conf = jpype.JClass("org.deeplearning4j.nn.conf.MultiLayerConfiguration").fromJson(text)
        net = jpype.JClass("org.deeplearning4j.nn.multilayer.MultiLayerNetwork")(conf)
    net.init()
    return net


def problems(net, path: str) -> list[str]:
    import jpype

    PlanFile = jpype.JClass("org.pyd4j.train.PlanFile")
    return [str(p) for p in jpype.JClass("org.pyd4j.train.PlannedTrainer").check(net, PlanFile.read(path))]


def test_a_plan_of_this_network_is_accepted(jvm, tmp_path: Path) -> None:
    assert problems(network("lenet"), plan_file(tmp_path, "lenet")) == []
    assert problems(network("resnet_graph"), plan_file(tmp_path, "resnet_graph")) == []


def test_a_plan_of_another_network_is_refused(jvm, tmp_path: Path) -> None:
    out = problems(network("lenet"), plan_file(tmp_path, "mlp"))
    assert len(out) == 1 and "has 4 nodes; this network needs 7" in out[0]
    assert "write the plan from this network's configuration" in out[0]


def test_recurrent_layers_are_accepted_as_opaque_steps(jvm, tmp_path: Path) -> None:
    # LSTM and RnnOutputLayer have no measured model: they run as opaque steps, accepted
    path = plan_file(tmp_path, "lstm")
    nodes = json.loads(Path(path).read_text())["nodes"]
    assert [n["type"] for n in nodes] == ["DATA", "OPAQUE", "OPAQUE", "SOFTMAX"]
    assert nodes[1]["shape"] == [4, 128, 50]   # (N, C, T)
    assert problems(network("lstm"), path) == []


def test_a_plan_recomputing_a_recurrent_layer_under_truncated_bptt_is_refused_by_name(jvm, tmp_path: Path) -> None:
    """Truncated BPTT is replayed (tests/train/test_opaque_layers.py), but a plan that recomputes a
    recurrent layer is refused: its forward pass stores the state the next segment starts from."""
    import jpype

    from pyd4j.dl4j.plan_file import plan_document

    net = network("lstm")
    net.getLayerWiseConfigurations().setBackpropType(jpype.JClass("org.deeplearning4j.nn.conf.BackpropType").TruncatedBPTT)
    lstm = json.loads((NETWORKS / "lstm.json").read_text())
    plan, result = choose_plan(graph_from_dl4j_json(lstm, 4, (32, 50)), policy="liveness")
    assert problems(net, plan_file(tmp_path, "lstm")) == []
    document = plan_document(plan, result, "MultiLayerNetwork")
    backward = next(r for r in document["records"] if r[0] == "BACKWARD" and r[1] == 1)
    document["records"].insert(document["records"].index(backward), ["RECOMPUTE", *backward[1:]])
    path = tmp_path / "recomputes.json"
    path.write_text(json.dumps(document))
    out = problems(net, str(path))
    assert any("recomputes" in p and "truncated BPTT" in p for p in out), out


def test_weight_noise_other_dropouts_and_activation_listeners_are_refused(jvm, tmp_path: Path) -> None:
    import jpype

    net = network("mlp")
    layer1 = net.getLayers()[1].conf().getLayer()
    layer1.setWeightNoise(jpype.JClass("org.deeplearning4j.nn.conf.weightnoise.DropConnect")(0.5))
    net.getLayers()[2].conf().getLayer().setIDropout(jpype.JClass("org.deeplearning4j.nn.conf.dropout.AlphaDropout")(0.5))

    @jpype.JImplements("org.deeplearning4j.optimize.api.TrainingListener")
    class ActivationWatcher:  # reads every layer's activations: planned training frees them
        @jpype.JOverride
        def iterationDone(self, model, iteration, epoch): pass

        @jpype.JOverride
        def onEpochStart(self, model): pass

        @jpype.JOverride
        def onEpochEnd(self, model): pass

        @jpype.JOverride
        def onForwardPass(self, model, activations): pass

        @jpype.JOverride
        def onGradientCalculation(self, model): pass

        @jpype.JOverride
        def onBackwardPass(self, model): pass

    net.addListeners(ActivationWatcher())
    out = problems(net, plan_file(tmp_path, "mlp"))
    assert any("'layer1' (index 1) uses weight noise" in p for p in out), out
    assert any("'layer2' (index 2) uses AlphaDropout" in p for p in out), out
    assert any("reads every layer's activations (onForwardPass)" in p for p in out), out
    attach = jpype.JClass("org.pyd4j.train.PlannedTrainer").attach
    with pytest.raises(Exception, match="planned training cannot run this network"):
        attach(net, jpype.JClass("org.pyd4j.train.PlanFile").read(plan_file(tmp_path, "lenet")), None)


def test_an_offloading_plan_needs_a_tier(jvm, tmp_path: Path) -> None:
    import jpype

    plan = jpype.JClass("org.pyd4j.train.PlanFile").read(plan_file(tmp_path, "lenet", policy="utp"))
    assert plan.offloads()
    with pytest.raises(Exception, match="offloads activations: give an OffloadTier"):
        jpype.JClass("org.pyd4j.train.PlannedTrainer").attach(network("lenet"), plan, None)


def test_one_line_from_java_trains_with_dl4j_own_loop(jvm, tmp_path: Path) -> None:
    import jpype
    import numpy as np

    from pyd4j.nd import from_numpy

    net = network("lenet")
    path = plan_file(tmp_path, "lenet", batch=8)
    rng = np.random.default_rng(0)
    DataSet = jpype.JClass("org.nd4j.linalg.dataset.DataSet")
    batches = jpype.JClass("java.util.ArrayList")()
    for _ in range(3):
        x = rng.random((8, 784), dtype=np.float32)
        y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 8)]
        batches.add(DataSet(from_numpy(x, copy=True), from_numpy(y, copy=True)))
    it = jpype.JClass("org.deeplearning4j.datasets.iterator.ExistingDataSetIterator")(batches)
    before = net.params().dup()
    stats = jpype.JClass("org.pyd4j.train.PlannedTrainer").fit(net, it, path)
    assert stats.iterations == 3 and net.getIterationCount() == 3 and net.getEpochCount() == 1
    assert not net.params().equals(before)
    # the network's own optimizer is back: a plain fit() runs DL4J's computeGradientAndScore again
    optimizer = jpype.JClass("org.deeplearning4j.optimize.Solver").class_.getDeclaredField("optimizer")
    optimizer.setAccessible(True)
    solver_field = jpype.JClass("org.deeplearning4j.nn.multilayer.MultiLayerNetwork").class_.getDeclaredField("solver")
    solver_field.setAccessible(True)
    assert "PlannedOptimizer" not in str(optimizer.get(solver_field.get(net)).getClass().getName())


def test_a_pool_option_that_is_neither_true_nor_false_is_refused_before_training(jvm, tmp_path: Path) -> None:
    import jpype

    System = jpype.JClass("java.lang.System")
    net, path = network("lenet"), plan_file(tmp_path, "lenet")
    before = str(net.params().toString())
    System.setProperty("pyd4j.train.pool", "off")
    try:
        with pytest.raises(jpype.JException) as err:
            jpype.JClass("org.pyd4j.train.PlannedTrainer").attach(
                net, jpype.JClass("org.pyd4j.train.PlanFile").read(path), None)
    finally:
        System.clearProperty("pyd4j.train.pool")
    assert "-Dpyd4j.train.pool=off is neither true nor false" in str(err.value)
    assert "-Dpyd4j.train.pool=false" in str(err.value)
    assert str(net.params().toString()) == before   # nothing trained, and the network keeps its optimizer
    trainer = jpype.JClass("org.pyd4j.train.PlannedTrainer")
    assert trainer.of(net) is None
