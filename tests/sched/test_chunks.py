"""DL4J's dynamic convolution workspace in the planner: a convolution's forward or backward step
may run in 1, 2, 4 or 8 batch chunks (the `dl4j` framework's convolution algorithms), chosen per
step by the same pass that picks cuDNN's algorithms (`pyd4j.sched.convws.assign_workspaces`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyd4j.dl4j.input_types import sidecar_shapes
from pyd4j.sched.bounds import lower_bound
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.deps import chunk_rows, chunkable, chunked_scratch
from pyd4j.dl4j.graph import graph_from_dl4j_json, network_kind
from pyd4j.sched.graph import LayerType
from pyd4j.sched.plan import Op
from pyd4j.sched.simulator import record_scratch, simulate, tensor_timeline
from pyd4j.sched.choose import IN_MEMORY, BudgetTooSmall, choose_plan, default_cost, smallest_plan, sliced_variant
from pyd4j.dl4j.plan_file import plan_document
from pyd4j.sched.zoo import build

NETS = Path(__file__).resolve().parents[2] / "examples" / "networks"
MIB = 1 << 20


def graph(name: str, batch: int):
    path = NETS / f"{name}.json"
    return graph_from_dl4j_json(path.read_text(), batch, sidecar_shapes(path))


def chunks_of(plan) -> dict[tuple[str, str], int]:
    counts = plan.graph.framework.chunk_counts
    return {(plan.graph.layers[s.arg].name, s.op.name): counts[s.algo] for s in plan.steps if s.algo}


def test_the_dl4j_profile_offers_batch_chunks_and_cudnn_keeps_its_table() -> None:
    g = graph("deep_cnn_bn", 64)
    cost = default_cost()
    algos = cost.algorithms(g)
    assert [a.batch_chunks for a in algos] == [1, 2, 4, 8]
    assert [a.speed for a in algos] == sorted((a.speed for a in algos), reverse=True)   # whole batch fastest
    assert all(a.workspace(g.layers[1], g) == 0 for a in algos)   # no optional workspace: scratch shrinks
    conv = next(layer for layer in g.layers if layer.type is LayerType.CONV)
    assert [a for a, _ in cost.conv_options(g, conv.id)] == [0, 1, 2, 3]
    z = build("alexnet", 16)   # a cuDNN-framework graph: the device's algorithm table, as before
    assert z.framework.conv_algorithms == () and cost.algorithms(z) is cost.algos


def test_which_convolutions_may_be_sliced() -> None:
    lenet = graph("lenet", 8)
    convs = [layer for layer in lenet.layers if layer.type is LayerType.CONV]
    # the first convolution reshapes the flat input (a preprocessor, run on the whole batch first): sliced too
    assert [chunkable(layer) for layer in convs] == [True, True]
    assert [a for a, _ in default_cost().conv_options(lenet, convs[0].id)] == [0, 1, 2, 3]
    doc = json.loads((NETS / "deep_cnn_bn.json").read_text())
    doc["confs"][3]["layer"]["idropout"] = {"@class": "org.deeplearning4j.nn.conf.dropout.Dropout", "p": 0.9}
    g = graph_from_dl4j_json(doc, 8, sidecar_shapes(NETS / "deep_cnn_bn.json"))
    assert g.layers[4].type is LayerType.CONV and not chunkable(g.layers[4])   # one mask for the whole batch
    small = graph("deep_cnn_bn", 2)   # at most as many chunks as samples
    assert [a for a, _ in default_cost().conv_options(small, 4)] == [0, 1]


def test_chunked_scratch_is_one_slice_and_what_slicing_holds() -> None:
    g = graph("deep_cnn_bn", 64)
    d = g.deps
    conv = g.layers[4]   # layer3: 32 -> 32 channels, 3x3, at 32x32
    raw = d.step_ws[1][4]
    assert raw == d.ws_bwd[4]   # the largest step of the network: the held workspace
    x = g.layers[conv.inputs[0]].out_bytes
    assert chunked_scratch(g, conv, True, raw, 8) == -(-int(raw / 8 + x / 8 + conv.param_bytes) // 256) * 256
    assert chunked_scratch(g, conv, False, d.step_ws[0][4], 4) >= d.step_ws[0][4] // 4
    assert chunked_scratch(g, conv, True, raw, 1) == raw
    assert [chunk_rows(6, k) for k in (1, 2, 4, 8)] == [6, 3, 2, 1]


def test_no_budget_or_room_to_spare_runs_every_convolution_whole() -> None:
    g = graph("deep_cnn_bn", 64)
    for policy in ("liveness", IN_MEMORY):
        plain, r = choose_plan(g, policy=policy)
        roomy, rr = choose_plan(g, budget=16 << 30, policy=policy)
        assert chunks_of(plain) == {} == chunks_of(roomy)
        assert record_scratch(plain) is None
    auto, _ = choose_plan(g, budget=16 << 30)
    assert chunks_of(auto) == {}


def test_a_budget_below_the_whole_batch_plans_chunks_the_largest_steps_only() -> None:
    g = graph("deep_cnn_bn", 64)
    cost = default_cost()
    whole, rw = choose_plan(g, policy=IN_MEMORY)
    budget = 200 * MIB
    assert rw.device_peak_bytes > budget
    plan, r = choose_plan(g, budget=budget, offload=False)
    assert r.device_peak_bytes <= budget
    chunks = chunks_of(plan)
    assert chunks and set(chunks.values()) <= {2, 4, 8}
    assert ("layer3", "BACKWARD") in chunks   # the largest step (3 im2col + 4 y, 248 MiB whole)
    assert ("layer21", "BACKWARD") not in chunks and ("layer0", "FORWARD") not in chunks
    # the peak is the largest set of live tensors plus one held workspace: the largest step's scratch
    scratch = record_scratch(plan)
    held = max(scratch)
    assert r.device_peak_bytes == max(tensor_timeline(plan)) + held
    assert held < g.deps.ws_bwd[0]   # DL4J holds 248 MiB for the whole batch
    # every chunked step takes the fewest chunks that fit: one chunk count less would not
    d = g.deps
    for (name, op), k in chunks.items():
        layer = next(layer for layer in g.layers if layer.name == name)
        step = 1 if op == "BACKWARD" else 0
        fewer = chunked_scratch(g, layer, step == 1, d.step_ws[step][layer.id], k // 2)
        assert max(tensor_timeline(plan)) + fewer > budget, (name, op, k)
    assert simulate(plan, cost).time_s >= rw.time_s * 0.9   # slices cost a little, never help


def test_the_minimum_that_works_counts_chunks() -> None:
    g = graph("resnet_graph", 32)
    small, rs = smallest_plan(g, offload=False)
    assert chunks_of(small)
    whole_min = min(choose_plan(g, policy=p)[1].device_peak_bytes for p in ("liveness", IN_MEMORY))
    assert rs.device_peak_bytes < whole_min / 2
    assert rs.device_peak_bytes >= lower_bound(g).lower_bound_bytes
    with pytest.raises(BudgetTooSmall) as e:
        choose_plan(g, budget=rs.device_peak_bytes - 1, offload=False)
    assert e.value.minimum == rs.device_peak_bytes
    # the message says what no plan can go below (batch normalization in two passes: the network's
    # floor), and which step holds it
    bound = lower_bound(sliced_variant(g))
    assert e.value.bound == bound and bound.lower_bound_bytes <= e.value.minimum
    assert f"{bound.l_peak_step.lower()} step of {bound.l_peak_layer!r} ({bound.l_peak_bytes})" in str(e.value)
    assert f"holds less than {bound.lower_bound_bytes} bytes" in str(e.value)
    plan, r = choose_plan(g, budget=rs.device_peak_bytes, offload=False)
    assert r.device_peak_bytes <= rs.device_peak_bytes


def test_the_plan_file_carries_the_chunk_count() -> None:
    g = graph("resnet_graph", 32)
    plan, r = choose_plan(g, budget=150 * MIB, offload=False)
    doc = plan_document(plan, r, "ComputationGraph")
    chunked = [rec for rec in doc["records"] if len(rec) == 3 and isinstance(rec[2], dict)]
    assert chunked and all(rec[0] in ("FORWARD", "BACKWARD", "RECOMPUTE") for rec in chunked)
    assert all(rec[2]["chunks"] in (2, 4, 8) and rec[2]["algo"] == f"BATCH_{rec[2]['chunks']}" for rec in chunked)
    assert len(chunked) == len(chunks_of(plan))
    plain = plan_document(*choose_plan(g), "ComputationGraph")
    assert all(len(rec) == 2 for rec in plain["records"] if rec[0] != "MOVE")
    assert network_kind(json.loads((NETS / "resnet_graph.json").read_text())) == "ComputationGraph"


def test_cudnn_plans_keep_their_algorithm_choice() -> None:
    g = build("alexnet", 16)
    cost = CostModel.for_device("k40c")
    from pyd4j.sched.policies import make_plan  # noqa: PLC0415

    plan = make_plan(g, "superneurons", cost)
    names = {cost.algorithms(g)[s.algo].name for s in plan.steps if s.op in (Op.FORWARD, Op.BACKWARD)
             and g.layers[s.arg].type is LayerType.CONV}
    assert names - {"IMPLICIT_GEMM"}   # roomy device memory: faster algorithms with workspace
    assert record_scratch(plan) is None


def test_lrn_may_be_sliced_and_the_smallest_plan_slices_it_where_it_decides_the_peak() -> None:
    """DL4J's LRN backward step holds eight input-sized arrays (AlexNet's, zoo AlexNet at 48x48, decided
    the smallest plan's peak); it computes each sample on its own and keeps nothing from forward, so it
    runs in batch slices as a convolution does."""
    from tests.dl4j.test_graph import _with_layer

    lrn = {"@class": "org.deeplearning4j.nn.conf.layers.LocalResponseNormalization", "n": 5.0,
           "k": 2.0, "alpha": 1e-4, "beta": 0.75, "layerName": "lrn"}
    g = graph_from_dl4j_json(_with_layer(lrn, after=0), 64, (3, 32, 32))
    node = next(layer for layer in g.layers if layer.type is LayerType.LRN)
    assert chunkable(node)
    assert [a for a, _ in default_cost().conv_options(g, node.id)] == [0, 1, 2, 3]
    # its backward step's working memory in 8 slices: one slice's, plus the slice's input gradient
    whole = g.deps.step_ws[1][node.id]
    assert whole >= 8 * node.out_bytes
    rows = chunk_rows(64, 8)
    assert chunked_scratch(g, node, True, whole, 8) == pytest.approx(whole * rows / 64 + node.out_bytes * rows / 64,
                                                                   abs=4096)
    plan, result = smallest_plan(g, offload=False)
    sliced = chunks_of(plan)
    assert sliced.get(("lrn", "BACKWARD"), 1) > 1, sliced
    whole_plan, whole_result = choose_plan(g, policy="liveness")
    assert result.device_peak_bytes < whole_result.device_peak_bytes
    # DL4J's LocalResponseNormalization ignores an input dropout setting (it draws no mask:
    # tests/dl4j/test_generator_findings.py): still sliced, where a convolution with one is not
    dropped = dict(lrn, idropout={"@class": "org.deeplearning4j.nn.conf.dropout.Dropout", "p": 0.9})
    g2 = graph_from_dl4j_json(_with_layer(dropped, after=0), 64, (3, 32, 32))
    assert chunkable(next(layer for layer in g2.layers if layer.type is LayerType.LRN))
