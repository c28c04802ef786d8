"""The plan file DL4J's planned trainer runs: written here, read by `org.pyd4j.train.PlanFile`.

The plan file (JSON, written by `write_plan`, read by the Java trainer `org.pyd4j.train.PlanFile`)
is this document -- the one place the format is defined:

    {
      "format": "pyd4j-plan", "version": 1, "schema": 1,   # checked by pyd4j.schemas.PlanDocument;
                                                             # 2 when a node is "sliced"
      "policy": "recompute",            # the planner policy that wrote the records
      "tensor_cache": false,            # time-optimised under "budget_bytes" (or minimum memory)
      "budget_bytes": null,
      "network": {"kind": "MultiLayerNetwork" | "ComputationGraph", "batch": 32,
                  "dtype": "float32", "source": "net.json"},
      "predicted": {"peak_bytes": ..., "device_peak_bytes": ..., "lower_bound_bytes": ...,
                    "time_s": ...},
      "nodes": [                        # one per network input and per DL4J layer / vertex,
        {"id": 0, "name": "input", "type": "DATA",          # in DL4J's topological order
         "dl4j": {"input": 0}, "inputs": [], "shape": [32, 1, 28, 28], "y_bytes": 100352},
        {"id": 1, "name": "layer0", "type": "CONV",
         "dl4j": {"layer": 0, "class": "ConvolutionLayer"}, "inputs": [0], ...},
        {"id": 2, "name": "layer1", "type": "BN", "sliced": true, ...},   # two-pass, see below
        ...                             # graphs: "dl4j": {"vertex": "res_add", "class": ...}
      ],
      "records": [["ALLOC", 5], ["FORWARD", 1], ["OFFLOAD", 5], ["FREE", 5], ...,
                  ["BACKWARD", 4, {"algo": "BATCH_8", "chunks": 8}], ...]
    }

Records are `pyd4j.sched.plan.Step`s in order: `[op, arg]` with op one of ALLOC, FREE, OFFLOAD,
PREFETCH (arg: a tensor id, 5 * node + kind with kind Y=0, DY=1, W=2, DW=3, M=4, or 5 * n + node
for what node's forward step keeps for its backward step -- batch norm's xMu/xHat/std, dropout
masks and dropped inputs; n = number of nodes) or FORWARD, BACKWARD, RECOMPUTE (arg: a node id),
and `["MOVE", dst, src]` (the buffer of tensor src becomes dst's after an in-place step). A
compute record of a convolution that runs one of the framework's batch-chunk algorithms carries a
third element, `{"algo": name, "chunks": k}`: the trainer runs that layer's forward or backward
step on k slices of the batch (samples ceil(batch / k) at a time) and assembles the whole output,
input gradient and parameter gradients (absent: the whole batch at once). A node marked
`"sliced": true` (a batch normalization; plan schema 2) runs every step in pyd4j's two-pass form
(`org.pyd4j.train.SlicedBatchNorm`: the batch's statistics accumulated over the slices first, then
each slice normalized; nothing kept from forward for backward), in its records' chunks (1: one
slice). The trainer creates arrays in the steps that produce them (ALLOC is accounting only), keeps DL4J's
parameters, gradients and updater state where DL4J keeps them (W, DW, M records are accounting
only), closes an activation (Y) or its gradient (DY) at its FREE, what a layer keeps for its
backward step at the FREE of 5 * n + node, copies an activation to an offload tier at OFFLOAD and
brings it back at PREFETCH, reruns a node's forward step at RECOMPUTE, and closes src at a MOVE
(DL4J's layers write new arrays: nothing runs in place).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyd4j.dl4j.probe import Probe
from pyd4j.inputs import InputError, read_json
from pyd4j.schemas import OLDEST_PLAN_SCHEMA, PLAN_SCHEMA, SchemaError, check
from pyd4j.sched.bounds import lower_bound
from pyd4j.sched.choose import choose_plan, smallest_plan
from pyd4j.sched.graph import LayerType
from pyd4j.sched.plan import Op, Plan
from pyd4j.sched.simulator import SimResult

FORMAT = "pyd4j-plan"
VERSION = 1


def plan_document(plan: Plan, result: SimResult, network_kind: str, source: str | None = None,
                  budget: int | None = None) -> dict[str, Any]:
    """The plan file's document (see the module docstring)."""
    g = plan.graph
    chunks = g.framework.chunk_counts
    names = [a["name"] for a in g.framework.conv_algorithms]
    nodes = []
    for layer in g.layers:
        if "dl4j" not in layer.attrs:
            raise ValueError(f"node {layer.name!r} has no DL4J identity: build the graph with "
                             "pyd4j.dl4j.graph.graph_from_dl4j_json")
        node = {"id": layer.id, "name": layer.name, "type": layer.type.value, "dl4j": layer.attrs["dl4j"],
                "inputs": list(layer.inputs), "shape": list(layer.out_shape), "y_bytes": layer.out_bytes}
        if layer.attrs.get("variant") == "sliced":   # the two-pass batch normalization (SlicedBatchNorm)
            node["sliced"] = True
        nodes.append(node)
    sliced = any(node.get("sliced") for node in nodes)
    return {
        "format": FORMAT, "version": VERSION, "schema": PLAN_SCHEMA if sliced else OLDEST_PLAN_SCHEMA,
        "policy": plan.policy,
        "tensor_cache": bool(plan.notes.get("tensor_cache")), "budget_bytes": budget,
        "network": {"kind": network_kind, "batch": g.batch, "dtype": g.dtype, "source": source},
        "predicted": {"peak_bytes": result.peak_bytes, "device_peak_bytes": result.device_peak_bytes,
                      "lower_bound_bytes": lower_bound(g).lower_bound_bytes, "time_s": result.time_s},
        "nodes": nodes,
        "records": [_record(s, chunks, names) for s in plan.steps],
    }


def _record(s: Any, chunks: tuple[int, ...], names: list[str]) -> list[Any]:
    """One record of the plan file (see the module docstring)."""
    if s.op is Op.MOVE:
        return [s.op.name, int(s.arg), int(s.src)]
    if 0 < s.algo < len(chunks) and chunks[s.algo] > 1:
        return [s.op.name, int(s.arg), {"algo": names[s.algo], "chunks": chunks[s.algo]}]
    return [s.op.name, int(s.arg)]


def write_plan(path: str | Path, plan: Plan, result: SimResult, network_kind: str,
               source: str | None = None, budget: int | None = None) -> Path:
    """Write the plan file; refuses to overwrite an existing file."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; choose a new file name for the plan (nothing was written)")
    doc = plan_document(plan, result, network_kind, source, budget)
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    return path


def plan_for_job(network: dict[str, Any], path: str | Path, policy: str | None = None,
                 budget: int | None = None, offload: bool = False, probe: Probe | None = None) -> dict[str, Any]:
    """Plan a job's network from the agent's "network" event (its configuration and the input
    shape of its first batch) and write the plan file; returns what was written. Policy
    "superneurons": the smallest plan the trainer can run (`offload`: it has an offload tier).
    `probe`: what DL4J says of the network's opaque steps (`pyd4j.dl4j.probe.of_configuration`;
    see `pyd4j.dl4j.graph.probed_graph`), as pyd4j.train.fit asks it of a live network."""
    from pyd4j.dl4j.graph import probed_graph  # noqa: PLC0415 - graph -> policy -> plan

    shape = network.get("input_shape")
    if not shape or len(shape) < 2:
        raise ValueError(f"the job's first batch has no input shape ({shape}); planned training needs it")
    given: Any = tuple(int(d) for d in shape[1:])
    shapes = network.get("input_shapes") or []
    if len(shapes) > 1:   # a graph with several inputs: one shape each
        if any(not s or len(s) < 2 for s in shapes):
            raise ValueError(f"the job's first batch lacks an input's shape ({shapes}); planned training needs each")
        given = [tuple(int(d) for d in s[1:]) for s in shapes]
    graph = probed_graph(network["conf"], int(shape[0]), given, probe=probe)
    if policy == "superneurons" and budget is None:
        plan, result = smallest_plan(graph, offload=offload)
    else:
        plan, result = choose_plan(graph, budget, policy, offload=offload)
    write_plan(path, plan, result, network["kind"], "the job's network", budget)
    return {"path": str(path), "policy": plan.policy, "batch": graph.batch, "nodes": len(graph),
            "predicted_peak_bytes": result.device_peak_bytes, "dtype": graph.dtype,
            "input_shapes": [list(layer.out_shape) for layer in graph.layers if layer.type is LayerType.DATA],
            "offloads": any(s.op.name == "OFFLOAD" for s in plan.steps)}


def read_plan(path: str | Path) -> dict[str, Any]:
    """A plan file's document, validated against the plan schema (`pyd4j.schemas.PlanDocument`,
    the rules the Java reader checks too)."""
    fix = "write it with `pyd4j plan --model net.json --batch N --emit-plan FILE`"
    try:   # a regular UTF-8 file of valid JSON nested no deeper than a plan is
        doc = read_json(path, "plan")
    except InputError as err:
        raise SchemaError(f"{err}; {fix}") from None
    check("plan", doc, f"plan {path}", fix)
    return doc
