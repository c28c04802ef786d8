"""The planner reads ComputationGraphs with several inputs and output layers (configurations written
by DL4J's own builders: examples/networks, org.pyd4j.examples.Networks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyd4j.dl4j.graph import graph_from_dl4j_json
from pyd4j.sched.graph import GraphError, LayerType
from pyd4j.sched.choose import choose_plan

NETWORKS = Path(__file__).resolve().parents[2] / "examples" / "networks"


def doc(name: str) -> dict:
    return json.loads((NETWORKS / f"{name}.json").read_text())


def test_two_inputs_get_one_shape_each_in_network_input_order() -> None:
    g = graph_from_dl4j_json(doc("two_input"), 4, [(1, 12, 12), (6,)])
    data = [layer for layer in g.layers if layer.type is LayerType.DATA]
    assert [(d.name, d.out_shape, d.attrs["dl4j"]["input"]) for d in data] == [
        ("image", (4, 1, 12, 12), 0), ("meta", (4, 6), 1)]
    merge = next(layer for layer in g.layers if layer.name == "merge")
    assert merge.out_shape == (4, 32 + 16)   # img_fc (32) and meta_fc (16) side by side
    # DL4J's topological order (Kahn over inputs, then vertices in configuration order)
    assert [layer.name for layer in g.layers] == ["image", "meta", "img_conv", "meta_fc", "img_pool", "img_fc",
                                                  "merge", "fc", "output"]


def test_a_shape_count_that_does_not_match_the_inputs_is_named() -> None:
    with pytest.raises(GraphError, match=r"2 inputs \['image', 'meta'\]; got 1 input shape"):
        graph_from_dl4j_json(doc("two_input"), 4, (1, 12, 12))
    with pytest.raises(GraphError, match=r"one per input \['image', 'meta'\]"):
        graph_from_dl4j_json(doc("two_input"), 4, None)
    with pytest.raises(GraphError, match="a MultiLayerNetwork has one input; got 2"):
        graph_from_dl4j_json(doc("mlp"), 4, [(784,), (784,)])


def test_one_shape_in_a_list_is_the_same_as_the_shape() -> None:
    one = graph_from_dl4j_json(doc("mlp"), 4, [(784,)])
    assert [layer.out_shape for layer in one.layers] == [layer.out_shape for layer in graph_from_dl4j_json(doc("mlp"), 4, (784,)).layers]


def test_two_output_layers_are_two_loss_nodes_and_plans_run_both_backward_steps() -> None:
    g = graph_from_dl4j_json(doc("policy_value"), 4, (4, 8, 8))
    losses = [layer for layer in g.layers if layer.type is LayerType.SOFTMAX]
    assert [(loss.name, loss.out_shape, loss.attrs["loss"]) for loss in losses] == [
        ("policy", (4, 65), "LossMCXENT"), ("value", (4, 1), "LossMSE")]
    for policy in ("liveness", "recompute"):
        plan, _ = choose_plan(g, policy=policy)
        backward = [g.layers[s.arg].name for s in plan.steps if s.op.name == "BACKWARD"]
        # DL4J's backward order: the reverse of its topological order, every output layer included
        assert backward == [layer.name for layer in reversed(g.layers) if layer.type is not LayerType.DATA]


def test_truncated_bptt_plans_one_segment_and_keeps_other_inputs_whole() -> None:
    """DL4J's fit() under truncated BPTT trains one segment of tbpttFwdLength steps an iteration: a sequence
    input (features, T) is planned at (features, min(T, tbpttFwdLength)); a graph's inputs that are not
    sequences stay whole, as DL4J keeps them; a bad length or a non-sequence input is named."""
    lstm = dict(doc("lstm"), backpropType="TruncatedBPTT", tbpttFwdLength=20, tbpttBackLength=20)
    assert graph_from_dl4j_json(lstm, 4, (32, 50)).layers[0].out_shape == (4, 32, 20)
    assert graph_from_dl4j_json(lstm, 4, (32, 12)).layers[0].out_shape == (4, 32, 12)   # shorter than a segment
    assert graph_from_dl4j_json(doc("lstm"), 4, (32, 50)).layers[0].out_shape == (4, 32, 50)   # standard BPTT
    with pytest.raises(GraphError, match=r"truncated BPTT: its input is a sequence \(features, time steps\); got input shape \[32\]"):
        graph_from_dl4j_json(lstm, 4, (32,))
    with pytest.raises(GraphError, match="tbpttFwdLength = 0 must be a whole number from 1"):
        graph_from_dl4j_json(dict(lstm, tbpttFwdLength=0), 4, (32, 50))
    two = dict(doc("two_input"), backpropType="TruncatedBPTT", tbpttFwdLength=3, tbpttBackLength=3)
    data = [layer.out_shape for layer in graph_from_dl4j_json(two, 4, [(1, 12, 12), (6,)]).layers if layer.type is LayerType.DATA]
    assert data == [(4, 1, 12, 12), (4, 6)]
