"""DL4J's default updater keeps no state: a network built without `.updater(...)` trains with
`Sgd(0.001)`, and `NoOp` keeps none either. Planned training must take both (a plan that
allocated an updater-state tensor for them was refused as infeasible), and train exactly as DL4J's
own `fit()` does (real DL4J in the session JVM)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pyd4j.data import NumpyBatches
from pyd4j.train import fit
from tests.train.conftest import NETWORKS

pytestmark = pytest.mark.jvm

UPDATERS = {"Sgd": {"@class": "org.nd4j.linalg.learning.config.Sgd", "learningRate": 0.001},
            "NoOp": {"@class": "org.nd4j.linalg.learning.config.NoOp"}}


def with_updater(doc: dict, updater: str) -> dict:
    """The configuration with every layer (and its biases) trained by `updater`."""
    doc = json.loads(json.dumps(doc))
    layers = ([c["layer"] for c in doc["confs"]] if "confs" in doc else
              [v["layerConf"]["layer"] for v in doc["vertices"].values() if "layerConf" in v])
    for layer in layers:
        for key in ("iupdater", "biasUpdater"):
            if layer.get(key) is not None:
                layer[key] = UPDATERS[updater]
    return doc


def builder_mlp():
    """An MLP built with DL4J's builders and no `.updater(...)`: DL4J's own default."""
    import jpype

    j = jpype.JClass
    dense = j("org.deeplearning4j.nn.conf.layers.DenseLayer").Builder().nOut(16)
    out = j("org.deeplearning4j.nn.conf.layers.OutputLayer").Builder(
        j("org.nd4j.linalg.lossfunctions.LossFunctions$LossFunction").MCXENT).nOut(4)
    act = j("org.nd4j.linalg.activations.Activation")
    conf = (j("org.deeplearning4j.nn.conf.NeuralNetConfiguration").Builder().seed(3)
            .list(dense.activation(act.RELU).build(), out.activation(act.SOFTMAX).build())
            .setInputType(j("org.deeplearning4j.nn.conf.inputs.InputType").feedForward(8)).build())
    net = j("org.deeplearning4j.nn.multilayer.MultiLayerNetwork")(conf)
    net.init()
    return net


def from_json(doc: dict):
    import jpype

    graph = "vertices" in doc
    conf = jpype.JClass("org.deeplearning4j.nn.conf." + ("ComputationGraphConfiguration" if graph else
                                                          "MultiLayerConfiguration")).fromJson(json.dumps(doc))
    net = jpype.JClass("org.deeplearning4j.nn.graph.ComputationGraph" if graph else
                       "org.deeplearning4j.nn.multilayer.MultiLayerNetwork")(conf)
    net.init()
    return net


def trains_like_fit(make, batches, **planned) -> dict:
    """Train two equal networks on the same batches and random state, one by DL4J's fit() and one
    planned; the plan's record when their parameters are bit-identical."""
    import jpype

    random = jpype.JClass("org.nd4j.linalg.factory.Nd4j").getRandom()
    plain, planned_net = make(), make()
    random.setSeed(jpype.JLong(11))
    fit(plain, batches(), progress=False)
    random.setSeed(jpype.JLong(11))
    result = fit(planned_net, batches(), progress=False, memory="superneurons", **planned)
    assert planned_net.getIterationCount() == plain.getIterationCount() > 0
    assert planned_net.params().equals(plain.params()), planned
    return result.plan


def test_dl4j_default_updater_is_sgd_and_plans_train_exactly(jvm) -> None:
    net = builder_mlp()
    assert str(net.getLayer(0).conf().getLayer().getIUpdater().getClass().getSimpleName()) == "Sgd"
    rng = np.random.default_rng(0)
    x = rng.random((24, 8), dtype=np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 24)]
    plan = trains_like_fit(builder_mlp, lambda: NumpyBatches(x, y, 8, shuffle=False))
    assert plan["policy"] == "liveness"


@pytest.mark.parametrize("updater", sorted(UPDATERS))
def test_stateless_updaters_on_a_conv_net_with_an_offloading_plan(jvm, updater: str) -> None:
    """LeNet: the liveness plan and one that offloads to the disk tier, both exact."""
    doc = with_updater(json.loads((NETWORKS / "lenet.json").read_text()), updater)
    rng = np.random.default_rng(1)
    x = rng.random((16, 784), dtype=np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 16)]
    batches = lambda: NumpyBatches(x, y, 8, shuffle=False)  # noqa: E731
    assert trains_like_fit(lambda: from_json(doc), batches)["policy"] == "liveness"
    plan = trains_like_fit(lambda: from_json(doc), batches, policy="utp")
    assert plan["trainer"]["offloads"] > 0


def test_a_two_output_graph_with_sgd_trains_exactly(jvm) -> None:
    """The policy/value network (an AlphaGoZero-style graph: batch norm, a residual add, two heads)."""
    doc = with_updater(json.loads((NETWORKS / "policy_value.json").read_text()), "Sgd")
    rng = np.random.default_rng(2)
    x = rng.random((8, 4, 8, 8), dtype=np.float32)
    policy = np.eye(65, dtype=np.float32)[rng.integers(0, 65, 8)]
    value = rng.uniform(-1, 1, (8, 1)).astype(np.float32)
    batches = lambda: [([x[:4]], [policy[:4], value[:4]]), ([x[4:]], [policy[4:], value[4:]])]  # noqa: E731
    trains_like_fit(lambda: from_json(doc), batches)


@pytest.mark.parametrize("updater", sorted(UPDATERS))
def test_plan_command_takes_stateless_updaters(tmp_path: Path, updater: str) -> None:
    """`pyd4j plan` emits a plan without an updater-state tensor and predicts less than with Adam."""
    doc = with_updater(json.loads((NETWORKS / "resnet_graph.json").read_text()), updater)
    model = tmp_path / "net.json"
    model.write_text(json.dumps(doc))
    (tmp_path / "net.input.json").write_text((NETWORKS / "resnet_graph.input.json").read_text())

    def peak(path: Path) -> tuple[int, dict]:
        emitted = tmp_path / f"{path.stem}.plan.json"
        out = subprocess.run([sys.executable, "-m", "pyd4j.cli", "plan", "--model", str(path), "--batch", "4",
                              "--emit-plan", str(emitted), "--json"], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        plan = json.loads(emitted.read_text())
        return int(plan["predicted"]["peak_bytes"]), plan

    stateless, plan = peak(model)
    state = {r[1] % 5 for r in plan["records"] if r[0] == "ALLOC" and r[1] < 5 * len(plan["nodes"])}
    assert 4 not in state and {0, 1, 2} <= state   # Y, DY, W and no updater state (kind 4)
    adam, adam_plan = peak(NETWORKS / "resnet_graph.json")
    assert 4 in {r[1] % 5 for r in adam_plan["records"] if r[0] == "ALLOC" and r[1] < 5 * len(adam_plan["nodes"])}
    assert stateless < adam
