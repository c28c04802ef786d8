"""DL4J JSON written by real DL4J 1.0.0-M2.1 (examples/networks) -> planner IR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyd4j.sched.dl4j_json import UnsupportedLayer, graph_from_dl4j_json
from pyd4j.sched.graph import LayerType
from pyd4j.sched.policies import POLICIES, make_plan
from pyd4j.sched.simulator import simulate

NETS = Path(__file__).resolve().parents[2] / "examples" / "networks"


def load(name: str, batch: int = 8, shape=None):
    return graph_from_dl4j_json((NETS / f"{name}.json").read_text(), batch, shape)


def test_lenet_matches_dl4j_parameter_count() -> None:
    g = load("lenet")  # input shape from the FeedForwardToCnnPreProcessor
    # conv 20x1x5x5+20, conv 50x20x5x5+50, dense 800x500+500, output 500x10+10
    assert g.n_params == 520 + 25_050 + 400_500 + 5_010
    assert [l.type for l in g.layers] == [
        LayerType.DATA, LayerType.CONV, LayerType.POOL, LayerType.CONV, LayerType.POOL,
        LayerType.FC, LayerType.ACT, LayerType.FC, LayerType.SOFTMAX]
    assert g.layers[4].out_shape == (8, 50, 4, 4)


def test_mlp_input_from_first_layer() -> None:
    g = load("mlp")
    assert g.layers[0].out_shape == (8, 784)
    assert g.n_params == 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10


def test_computation_graph_with_residual_add_and_merge() -> None:
    g = load("resnet_graph", shape=(3, 32, 32))
    assert g.count(LayerType.JOIN) == 1 and g.count(LayerType.CONCAT) == 1
    join = next(l for l in g.layers if l.type is LayerType.JOIN)
    assert {g.layers[j].name for j in join.inputs} == {"res_bn2", "stem_act"}
    for policy in POLICIES:
        simulate(make_plan(g, policy))


def test_unknown_layer_types_are_named() -> None:
    with pytest.raises(UnsupportedLayer, match="DL4J layer type LSTM"):
        load("lstm", shape=(10,))
    doc = json.loads((NETS / "resnet_graph.json").read_text())
    doc["vertices"]["merge"]["@class"] = "org.deeplearning4j.nn.conf.graph.SubsetVertex"
    with pytest.raises(UnsupportedLayer, match="SubsetVertex"):
        graph_from_dl4j_json(doc, 4, (3, 32, 32))
