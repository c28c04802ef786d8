"""DL4J JSON written by real DL4J 1.0.0-M2.1 (examples/networks) -> the DL4J-faithful graph."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pyd4j.dl4j.graph import UnsupportedLayer, dl4j_topological_order, graph_from_dl4j_json
from pyd4j.dl4j.fitmem import fit_terms
from pyd4j.sched.graph import LayerType
from pyd4j.sched.plan import ALIGNMENT
from pyd4j.sched.policies import POLICIES, make_plan
from pyd4j.sched.simulator import simulate

NETS = Path(__file__).resolve().parents[2] / "examples" / "networks"


def load(name: str, batch: int = 8, shape=None):
    return graph_from_dl4j_json((NETS / f"{name}.json").read_text(), batch, shape)


def test_lenet_one_node_per_dl4j_layer_with_dl4j_parameter_count() -> None:
    g = load("lenet")  # input shape from the FeedForwardToCnnPreProcessor
    # conv 20x1x5x5+20, conv 50x20x5x5+50, dense 800x500+500, output 500x10+10
    assert g.n_params == 520 + 25_050 + 400_500 + 5_010
    assert [l.type for l in g.layers] == [
        LayerType.DATA, LayerType.CONV, LayerType.POOL, LayerType.CONV, LayerType.POOL,
        LayerType.FC, LayerType.SOFTMAX]
    assert [l.attrs["dl4j"].get("layer") for l in g.layers] == [None, 0, 1, 2, 3, 4, 5]
    assert g.layers[4].out_shape == (8, 50, 4, 4)
    assert g.layers[0].out_shape == (8, 1, 28, 28)  # the flat input, as layer 0's preprocessor sees it
    dense = g.layers[5]
    assert dense.attrs["act"] == "relu" and dense.attrs["preprocessor"] == "CnnToFeedForwardPreProcessor"
    assert g.layers[6].attrs["loss"] == "LossMCXENT"


def test_mlp_input_from_first_layer() -> None:
    g = load("mlp")
    assert g.layers[0].out_shape == (8, 784)
    assert g.n_params == 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10


def test_batch_norm_holds_four_values_per_channel_as_dl4j() -> None:
    g = load("deep_cnn_bn", shape=(3, 32, 32))
    bn = next(l for l in g.layers if l.type is LayerType.BN)
    assert bn.param_shapes == ((4 * 32,),)  # gamma, beta, global mean, global log-std
    # Same-mode conv keeps 32x32, the three 2x2 max pools halve it
    assert [l.out_shape[2] for l in g.layers if l.type is LayerType.POOL] == [16, 8, 4]


def test_computation_graph_in_dl4j_topological_order() -> None:
    doc = json.loads((NETS / "resnet_graph.json").read_text())
    g = graph_from_dl4j_json(doc, 8, (3, 32, 32))
    assert [l.name for l in g.layers] == dl4j_topological_order(doc)
    assert g.count(LayerType.JOIN) == 1 and g.count(LayerType.CONCAT) == 1
    join = next(l for l in g.layers if l.type is LayerType.JOIN)
    assert {g.layers[j].name for j in join.inputs} == {"res_bn2", "stem"}
    assert g.layers[join.id].attrs["dl4j"] == {"vertex": "res_add", "class": "ElementWiseVertex", "op": "Add"}
    for policy in POLICIES:
        simulate(make_plan(g, policy))


def test_topological_order_is_kahn_over_inputs_then_vertices_hand_worked() -> None:
    # indices: in=0, a=1, b=2, c=3; a and b read the input, c reads b then a.
    # Kahn's FIFO: [in] -> in's outputs in ascending index: a, b -> c once both are done
    doc = {"networkInputs": ["in"], "vertices": {"c": {}, "b": {}, "a": {}},
           "vertexInputs": {"a": ["in"], "b": ["in"], "c": ["b", "a"]}}
    # vertices in configuration order c, b, a get indices 1, 2, 3: b (2) before a (3)
    assert dl4j_topological_order(doc) == ["in", "b", "a", "c"]


def test_layers_without_a_model_are_opaque_steps_with_dl4j_shapes() -> None:
    # recurrent layers on (N, C, T): LSTM's parameters as DL4J counts them (W, RW, b)
    g = load("lstm", batch=4, shape=(32, 50))
    assert [l.type for l in g.layers] == [LayerType.DATA, LayerType.OPAQUE, LayerType.OPAQUE, LayerType.SOFTMAX]
    assert g.layers[1].out_shape == (4, 128, 50) and g.layers[3].out_shape == (4, 10, 50)
    assert g.layers[1].param_elems == 32 * 512 + 128 * 512 + 512
    assert g.layers[3].param_elems == 128 * 10 + 10
    d = g.deps   # an opaque step keeps its inputs and its output for its backward step
    assert d.bwd_reads[1] == (0, 1) and d.bwd_reads[2] == (1, 2)
    for policy in POLICIES:
        simulate(make_plan(g, policy))
    # a vertex without a rule: refused by name unless DL4J's shape inference is given
    doc = json.loads((NETS / "resnet_graph.json").read_text())
    doc["vertices"]["merge"]["@class"] = "org.deeplearning4j.nn.conf.graph.FrozenVertex"
    with pytest.raises(UnsupportedLayer, match="FrozenVertex of 'merge' has no shape rule"):
        graph_from_dl4j_json(doc, 4, (3, 32, 32))
    ref = graph_from_dl4j_json(json.loads((NETS / "resnet_graph.json").read_text()), 4, (3, 32, 32))
    merge = next(l for l in ref.layers if l.name == "merge")
    info = {"merge": {"shape": list(merge.out_shape[1:]), "params": 0,
                      "measured": {"ws_forward": 1000, "ws_backward": 5000, "saved": 64}}}
    g = graph_from_dl4j_json(doc, 4, (3, 32, 32), info=info)
    node = next(l for l in g.layers if l.name == "merge")
    assert node.type is LayerType.OPAQUE and node.out_shape == merge.out_shape
    # the probe's figures are the node's working memory and what it keeps (aligned)
    assert g.with_framework("dl4j").deps.saved_bytes[node.id] >= 64
    assert max(g.deps.ws_bwd) >= 5000


@pytest.mark.parametrize(("conf", "shape", "out", "params"), [
    ({"@class": "x.ZeroPaddingLayer", "padding": [3, 3, 2, 1]}, (3, 8, 8), (3, 14, 11), 0),
    ({"@class": "x.Cropping2D", "cropping": [1, 1, 2, 2]}, (3, 8, 8), (3, 6, 4), 0),
    ({"@class": "x.Upsampling2D", "size": [2, 2]}, (3, 8, 8), (3, 16, 16), 0),
    ({"@class": "x.SpaceToDepthLayer", "blockSize": 2}, (3, 8, 8), (12, 4, 4), 0),
    ({"@class": "x.SeparableConvolution2D", "kernelSize": [3, 3], "nout": 5, "depthMultiplier": 2,
      "convolutionMode": "Same", "hasBias": True}, (3, 8, 8), (5, 8, 8), 2 * 3 * 9 + 5 * 6 + 5),
    ({"@class": "x.DepthwiseConvolution2D", "kernelSize": [3, 3], "depthMultiplier": 2, "hasBias": False},
     (3, 8, 8), (6, 6, 6), 9 * 3 * 2),
    ({"@class": "x.Deconvolution2D", "kernelSize": [2, 2], "stride": [2, 2], "nout": 4}, (3, 8, 8),
     (4, 16, 16), 3 * 4 * 4 + 4),
    ({"@class": "x.SimpleRnn", "nout": 6}, (3, 7), (6, 7), 3 * 6 + 36 + 6),
    ({"@class": "x.Bidirectional", "mode": "CONCAT", "fwd": {"@class": "x.LSTM", "nout": 4}}, (3, 7),
     (8, 7), 2 * (3 * 16 + 4 * 16 + 16)),
    ({"@class": "x.LastTimeStep", "underlying": {"@class": "x.LSTM", "nout": 4}}, (3, 7), (4,),
     3 * 16 + 4 * 16 + 16),
])
def test_shape_rules_of_opaque_layers(conf: dict, shape: tuple, out: tuple, params: int) -> None:
    """DL4J's shape rules (ConvolutionUtils, the layers' getOutputType) for layers run opaque."""
    from pyd4j.dl4j.layer_rules import opaque_shape  # noqa: PLC0415

    got, ps = opaque_shape(conf["@class"][2:], conf, [(2, *shape)], "l")
    assert got == (2, *out)
    assert sum(math.prod(p) for p in ps) == params


@pytest.mark.parametrize("name", ["mlp", "lenet", "deep_cnn_bn", "resnet_graph", "deep_cnn30"])
def test_no_plan_goes_below_the_dl4j_lower_bound(name: str) -> None:
    """The bound on DL4J's measured model (framework dl4j) holds for every policy's plan of the
    example networks, and its peak step is what the model says it holds."""
    from pyd4j.dl4j.input_types import sidecar_shapes  # noqa: PLC0415
    from pyd4j.sched.bounds import lower_bound, step_working_sets  # noqa: PLC0415
    from pyd4j.sched.choose import IN_MEMORY, default_cost, make_training_plan, smallest_plan  # noqa: PLC0415

    path = NETS / f"{name}.json"
    g = graph_from_dl4j_json(path.read_text(), 8, sidecar_shapes(path))
    assert g.framework.name == "dl4j"
    bound = lower_bound(g)
    cost = default_cost()
    peaks = {}
    for policy in (*POLICIES, IN_MEMORY):
        r = simulate(make_training_plan(g, policy, cost), cost)
        peaks[policy] = r.device_peak_bytes
        assert r.device_peak_bytes >= bound.lower_bound_bytes, (policy, r.device_peak_bytes, bound)
    # the smallest plan: convolutions in as many batch chunks as they allow (the bound counts that scratch)
    plan, r = smallest_plan(g, cost)   # with DL4J's batch normalization or its two-pass form, whichever is smaller
    peaks["smallest"] = r.device_peak_bytes
    assert r.device_peak_bytes >= lower_bound(plan.graph).lower_bound_bytes, ("smallest", r.device_peak_bytes, bound)
    # the bound is reached or approached by the smallest plan (recomputation everywhere)
    assert min(peaks.values()) <= 1.5 * bound.lower_bound_bytes, (peaks, bound)
    # the peak step holds what the model says: its reads, its gradients, its scratch, its saved tensors
    d = g.deps
    k = next(layer.id for layer in g.layers if layer.name == bound.l_peak_layer)
    fwd, bwd = step_working_sets(g)
    assert bound.l_peak_bytes == (bwd[k] if bound.l_peak_step == "BACKWARD" else fwd[k])
    if bound.l_peak_step == "BACKWARD":
        own = sum(d.ysz[j] for j in d.bwd_reads[k]) + d.ws_bwd_min[k] + d.saved_bytes[k]
        own += d.ysz[k] if d.bwd_dy[k] else 0
        own += sum(d.ysz[j] for j in d.bwd_dx[k])
        assert own <= bound.l_peak_bytes
    # DL4J: parameters, their gradient view, and the updater's state as fit() holds it (pyd4j.dl4j.fitmem's
    # term, pinned to a live network's state array by tests/memory/test_fit_model.py): Adam keeps two per parameter
    fit = {t.name: t.bytes_at(8) for t in fit_terms(g)}
    state = bound.resident_bytes - 2 * sum(d.psz) - d.resident_state_bytes
    assert fit["updater_state"] <= state < fit["updater_state"] + ALIGNMENT * len(g.layers), (state, fit)


def _with_layer(layer: dict, after: int = 2) -> dict:
    """deep_cnn_bn as conf.toJson() wrote it, with `layer` inserted after layer `after`."""
    doc = json.loads((NETS / "deep_cnn_bn.json").read_text())
    conf = json.loads(json.dumps(doc["confs"][after]))
    conf["layer"] = layer
    doc["confs"].insert(after + 1, conf)
    doc["inputPreProcessors"] = {str(int(k) + 1 if int(k) > after else int(k)): v
                                 for k, v in (doc.get("inputPreProcessors") or {}).items()}
    return doc


def test_lrn_size_written_as_a_double_is_accepted() -> None:
    # DL4J's LocalResponseNormalization writes its n as a double (AlexNet's conf.toJson(): "n": 5.0)
    lrn = {"@class": "org.deeplearning4j.nn.conf.layers.LocalResponseNormalization", "n": 5.0,
           "k": 2.0, "alpha": 1e-4, "beta": 0.75, "layerName": "lrn"}
    g = graph_from_dl4j_json(_with_layer(lrn), 4, (3, 32, 32))
    node = next(l for l in g.layers if l.type is LayerType.LRN)
    assert node.attrs["size"] == 5 and isinstance(node.attrs["size"], int)
    # a fractional size is still refused, naming the value
    lrn["n"] = 5.5
    with pytest.raises(Exception, match="lrn: n = 5.5"):
        graph_from_dl4j_json(_with_layer(lrn), 4, (3, 32, 32))


@pytest.mark.parametrize("activation", ["ActivationSoftmax", "ActivationSwish", "ActivationGELU",
                                        "ActivationHardTanH", "ActivationMish"])
def test_an_activation_layer_with_any_dl4j_activation_is_planned(activation: str) -> None:
    # SqueezeNet, Darknet19 and SimpleCNN end in an ActivationLayer with softmax before the loss
    act = {"@class": "org.deeplearning4j.nn.conf.layers.ActivationLayer",
           "activationFn": {"@class": f"org.nd4j.linalg.activations.impl.{activation}"}, "layerName": "act"}
    g = graph_from_dl4j_json(_with_layer(act), 4, (3, 32, 32))
    node = next(l for l in g.layers if l.name == "act")
    assert node.type is LayerType.ACT
    assert node.attrs["fn"] == {"ActivationSoftmax": "softmax"}.get(activation, activation[10:].lower())
    for policy in POLICIES:
        simulate(make_plan(g, policy))
