"""The one DL4J memory model (pyd4j.dl4j.fitmem) against real DL4J: its updater table against DL4J's
own stateSize, its updater state against a live network's state array, its workspaces against the
sizes DL4J's fit() learns, and `pyd4j plan` and `pyd4j estimate` giving one figure for fit()."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pyd4j.memory.estimate import estimate
from pyd4j.dl4j.graph import graph_from_dl4j_json
from pyd4j.dl4j.fitmem import fit_terms, updater_state_elements
from pyd4j.dl4j.updater_state import UPDATER_STATE

NETWORKS = Path(__file__).resolve().parents[2] / "examples" / "networks"
FIT_ONLY = ("parameters", "gradients", "updater_state", "activations", "working_memory", "epsilons", "batchnorm_backlog")


def _graph(name: str, batch: int):
    from pyd4j.dl4j.input_types import sidecar_shapes

    path = NETWORKS / f"{name}.json"
    return graph_from_dl4j_json(json.loads(path.read_text()), batch, sidecar_shapes(path))


def _network(name: str):
    from org.deeplearning4j.nn.conf import ComputationGraphConfiguration, MultiLayerConfiguration
    from org.deeplearning4j.nn.graph import ComputationGraph
    from org.deeplearning4j.nn.multilayer import MultiLayerNetwork

    text = (NETWORKS / f"{name}.json").read_text()
    if '"vertices"' in text:
        net = ComputationGraph(ComputationGraphConfiguration.fromJson(text))
    else:
        net = MultiLayerNetwork(MultiLayerConfiguration.fromJson(text))
    net.init()
    return net


def _learned_workspaces(net, features, labels, iterations: int = 3) -> dict[str, int]:
    """The workspaces DL4J's own fit() has learned after `iterations` on these arrays."""
    from org.nd4j.linalg.dataset import DataSet
    from org.nd4j.linalg.factory import Nd4j

    manager = Nd4j.getWorkspaceManager()
    manager.destroyAllWorkspacesForCurrentThread()
    try:
        for _ in range(iterations):
            net.fit(DataSet(features, labels))
        return {str(w.getId()): int(w.getCurrentSize()) for w in manager.getAllWorkspacesForCurrentThread()}
    finally:
        manager.destroyAllWorkspacesForCurrentThread()


@pytest.mark.jvm
def test_updater_table_is_dl4js_state_size(jvm):
    import jpype

    for name, per in UPDATER_STATE.items():
        updater = jpype.JClass(f"org.nd4j.linalg.learning.config.{name}")()
        assert int(updater.stateSize(1000)) == per * 1000, name


@pytest.mark.jvm
@pytest.mark.parametrize("name", ["deep_cnn_bn", "resnet_graph", "lenet"])
def test_updater_state_is_the_live_networks(jvm, name):
    # batch normalization's running mean and variance have no state: deep_cnn_bn's is 2 x (params - 896)
    state = _network(name).getUpdater().getStateViewArray()
    assert updater_state_elements(_graph(name, 8)) == int(state.length())


@pytest.mark.jvm
def test_workspaces_are_what_dl4j_fit_learns(jvm):
    """lenet at batch 16, three fit() iterations: the workspaces DL4J learned against the model's terms."""
    import jpype
    from org.nd4j.linalg.api.buffer import DataType
    from org.nd4j.linalg.factory import Nd4j

    batch = 16
    shape = jpype.JArray(jpype.JLong)
    sizes = _learned_workspaces(_network("lenet"), Nd4j.rand(DataType.FLOAT, shape([batch, 784])),
                                Nd4j.rand(DataType.FLOAT, shape([batch, 10])))
    terms = {t.name: t.bytes_at(batch) for t in fit_terms(_graph("lenet", batch))}
    assert sizes["WS_ALL_LAYERS_ACT"] == pytest.approx(terms["activations"], rel=0.01)
    assert sizes["WS_LAYER_ACT_1"] + sizes["WS_LAYER_ACT_2"] == pytest.approx(terms["epsilons"], rel=0.02)
    # the planner's convolution backward (3 patch matrices + 4 outputs, measured with ReLU) is at most 10% above
    # what DL4J's identity-activated convolution learns here
    assert sizes["WS_LAYER_WORKING_MEM"] <= terms["working_memory"] <= 1.10 * sizes["WS_LAYER_WORKING_MEM"]


@pytest.mark.jvm
@pytest.mark.parametrize("batch", [16, 96])
def test_lstm_working_memory_is_what_dl4j_fit_learns(jvm, batch):
    """An LSTM layer has no model in the planner: its working memory comes from probe iterations. Against
    the workspace DL4J's fit() learns (the reports' figure is about 1.6x that)."""
    import jpype
    from org.nd4j.linalg.api.buffer import DataType
    from org.nd4j.linalg.factory import Nd4j

    shape = jpype.JArray(jpype.JLong)
    sizes = _learned_workspaces(_network("lstm"), Nd4j.rand(DataType.FLOAT, shape([batch, 32, 50])),
                                Nd4j.rand(DataType.FLOAT, shape([batch, 10, 50])))
    e = estimate(NETWORKS / "lstm.json", batch)
    assert e.term_bytes("working_memory") == pytest.approx(sizes["WS_LAYER_WORKING_MEM"], rel=0.08)
    # the epsilon workspaces: the second LSTM's step holds two input-sized arrays and a step's gate gradients
    assert e.term_bytes("epsilons") == pytest.approx(sizes["WS_LAYER_ACT_1"] + sizes["WS_LAYER_ACT_2"], rel=0.03)
    report = {t.name: t.bytes_at(batch) for t in e.report_terms}
    assert report["working_memory"] > 1.3 * sizes["WS_LAYER_WORKING_MEM"]


@pytest.mark.jvm
@pytest.mark.parametrize("name", ["mlp", "lenet", "resnet_graph", "lstm"])
def test_plan_and_estimate_give_one_fit_figure(jvm, name):
    from pyd4j.commands.plan import command

    r = CliRunner().invoke(command, ["--model", str(NETWORKS / f"{name}.json"), "--batch", "16", "--policy", "baseline",
                                     "--json"])
    assert r.exit_code == 0, r.output
    planned = json.loads(r.output)["dl4j_fit"]
    e = estimate(NETWORKS / f"{name}.json", 16)
    assert set(FIT_ONLY) <= set(planned["terms"]) and planned["terms"] == {k: e.term_bytes(k) for k in planned["terms"]}
    assert planned["bytes"] == e.offheap_bytes - e.term_bytes("prefetch_buffers")


@pytest.mark.jvm
def test_what_glibc_keeps_of_an_lstms_step_pieces_is_counted_below_the_threshold_batch(jvm):
    """lstm's per-step pieces are [batch, 128] floats: under the 128 KiB mmap threshold below batch 256, where each
    of its two LSTM layers' working memory is counted once more (hand-worked from the probed working memory)."""
    from pyd4j.dl4j.probe import fitted, of_configuration

    e = estimate(NETWORKS / "lstm.json", 64)
    kept = next(t for t in e.terms if t.name == "lstm_steps_kept_by_glibc")
    assert kept.below_batch == 131072 // (128 * 4) == 256
    probed = fitted(of_configuration(json.loads((NETWORKS / "lstm.json").read_text())))([(64, 32, 50)])
    per_layer = [max(probed[n]["measured"]["ws_forward"], probed[n]["measured"]["ws_backward"]) for n in ("layer0", "layer1")]
    assert kept.bytes_at(64) == pytest.approx(sum(per_layer), rel=0.01)
    assert kept.bytes_at(255) > 0 and kept.bytes_at(256) == 0 == kept.bytes_at(2048)
    e = estimate(NETWORKS / "lstm.json", 128)
    assert e.term_bytes("lstm_steps_kept_by_glibc") == pytest.approx(2 * e.term_bytes("working_memory") / 1.02, rel=0.05)
    assert e.at_batch(256).term_bytes("lstm_steps_kept_by_glibc") == 0
    assert "lstm_steps_kept_by_glibc" not in {t.name for t in fit_terms(_graph("lenet", 64))}
    # a planned run holds them too (the same glibc setting, the same LSTM code): what a plan's prediction adds to
    # its device peak is the data pipeline and these pieces, below the threshold batch only
    e = estimate(NETWORKS / "lstm.json", 64)
    assert e.beside_the_step_bytes() == e.term_bytes("prefetch_buffers") + kept.bytes_at(64)
    assert e.at_batch(256).beside_the_step_bytes() == e.at_batch(256).term_bytes("prefetch_buffers")
    lenet = estimate(NETWORKS / "lenet.json", 64)
    assert lenet.beside_the_step_bytes() == lenet.term_bytes("prefetch_buffers")


@pytest.mark.jvm
def test_fake_failing_probe_is_an_error_naming_the_layers_not_a_quiet_fallback(jvm, monkeypatch):
    """A probe DL4J cannot run (faked here: the probe raises as DL4J's failure would) ends the estimate with the
    failure, the layers it was for and the fix, instead of falling back to DL4J's report (1.6x an LSTM's)."""
    import pyd4j.dl4j.probe as probe_module
    from pyd4j.jvm.errors import JavaError
    from pyd4j.memory.estimate import EstimateError

    def failing(doc, where="the network configuration"):
        def run(inputs):
            raise JavaError("op lstmLayer failed", "java.lang.RuntimeException")
        return run

    monkeypatch.setattr(probe_module, "of_configuration", failing)
    with pytest.raises(EstimateError) as err:
        estimate(NETWORKS / "lstm.json", 32)
    said = str(err.value)
    assert "op lstmLayer failed" in said and "layer0, layer1" in said and "PYD4J_CLASSPATH" in said
