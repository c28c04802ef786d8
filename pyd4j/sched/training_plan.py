"""The plan DL4J's planned trainer runs: which plan to pick for a budget, and the plan file.

Choosing (`choose_plan`), for a DL4J-faithful graph (`pyd4j.sched.dl4j_json`):
- no budget: liveness only (free every activation after its last use; nothing moves, nothing is
  recomputed, so training is as fast as DL4J's own `fit()`);
- a budget (bytes the plan's peak may reach, parameters, gradients and updater state included):
  the fastest plan of the candidate policies whose simulated device peak fits -- each policy's
  time-optimised plan (tensor cache) and its minimum-memory plan, each with its convolution
  algorithms chosen for the budget by the dynamic-convolution-workspace pass
  (`pyd4j.sched.convws.assign_workspaces`: for DL4J, how many batch chunks each convolution's
  forward and backward step runs in, which divides its working memory -- DL4J's largest -- at a
  small cost in speed; with room to spare every convolution runs whole); when none fits,
  `BudgetTooSmall` names the smallest peak any candidate reaches (the minimum that works, every
  convolution in as many chunks as it allows), its policy, and the lower bound no plan goes below
  with the one step that holds it (`pyd4j.sched.bounds`). Candidates: liveness,
  `recompute_in_memory`, and -- when the trainer has an offload tier -- utp and recompute.

`recompute_in_memory` is the recompute policy's recomputation without its tensor pool: outputs of
cheap layers (and, for DL4J, the arrays those layers keep for backprop: batch norm's normalized
input, dropout masks) are dropped after the forward pass and rebuilt in the backward pass; every
other output stays in memory. On DL4J's CPU backend the "device" is host memory, so this saves
most of what recomputation can without any offload tier.

The plan file (JSON, written by `write_plan`, read by the Java trainer `org.pyd4j.train.PlanFile`)
is this document -- the one place the format is defined:

    {
      "format": "pyd4j-plan", "version": 1, "schema": 1,   # checked by pyd4j.schemas.PlanDocument
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
compute record of a convolution that runs one of the profile's batch-chunk algorithms carries a
third element, `{"algo": name, "chunks": k}`: the trainer runs that layer's forward or backward
step on k slices of the batch (samples ceil(batch / k) at a time) and assembles the whole output,
input gradient and parameter gradients (absent: the whole batch at once). The
trainer creates arrays in the steps that produce them (ALLOC is accounting only), keeps DL4J's
parameters, gradients and updater state where DL4J keeps them (W, DW, M records are accounting
only), closes an activation (Y) or its gradient (DY) at its FREE, what a layer keeps for its
backward step at the FREE of 5 * n + node, copies an activation to an offload tier at OFFLOAD and
brings it back at PREFETCH, reruns a node's forward step at RECOMPUTE, and closes src at a MOVE
(DL4J's layers write new arrays: nothing runs in place).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dataclasses import replace

from pyd4j.schemas import PLAN_SCHEMA, SchemaError, check
from pyd4j.sched.bounds import Bound, lower_bound
from pyd4j.sched.convws import assign_workspaces, least_workspaces
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.graph import Graph
from pyd4j.sched.plan import Op, Plan
from pyd4j.sched.policies import make_plan
from pyd4j.sched.pool import pooled_plan
from pyd4j.sched.recompute import recompute_decisions
from pyd4j.sched.simulator import InfeasiblePlan, SimResult, simulate

if TYPE_CHECKING:
    from pyd4j.sched.dl4j_json import Probe

FORMAT = "pyd4j-plan"
VERSION = 1
IN_MEMORY = "recompute_in_memory"
TRAINING_POLICIES = ("liveness", IN_MEMORY, "utp", "recompute")
"""Policies the planned trainer is offered (superneurons adds cuDNN's algorithm choice, which
DL4J's CPU layers do not have)."""
OFFLOADING = ("utp", "recompute", "superneurons")


class BudgetTooSmall(ValueError):
    """No plan fits the budget; carries the smallest peak that works, its policy, and the lower
    bound no plan of the network goes below (`pyd4j.sched.bounds`), whose step says what holds it."""

    def __init__(self, budget: int, minimum: int, policy: str, bound: Bound) -> None:
        self.budget, self.minimum, self.policy, self.bound = budget, minimum, policy, bound
        super().__init__(f"budget {budget} bytes is below what any plan needs: the smallest peak is "
                         f"{minimum} bytes (policy {policy}); no plan of this network at this batch holds less "
                         f"than {bound.lower_bound_bytes} bytes: its parameters, gradients and updater state "
                         f"({bound.resident_bytes}) and the {bound.l_peak_step.lower()} step of "
                         f"{bound.l_peak_layer!r} ({bound.l_peak_bytes}) at once; give a budget of at least "
                         f"{minimum} bytes or a smaller batch")


def default_cost() -> CostModel:
    """The cost model plans for DL4J are timed with (the `cpu` profile where devices.json has one)."""
    try:
        return CostModel.for_device("cpu")
    except KeyError:
        return CostModel.for_device("k40c")


def make_training_plan(graph: Graph, policy: str, cost: CostModel, budget: int | None = None,
                       cache: bool = False) -> Plan:
    """One policy's plan: `make_plan` for the planner's policies, and `recompute_in_memory`."""
    if policy != IN_MEMORY:
        return make_plan(graph, policy, cost, budget, cache=cache)
    dec, stats = recompute_decisions(graph)
    dec = replace(dec, offload=frozenset())   # what recompute would offload stays in memory
    plan = pooled_plan(graph, IN_MEMORY, dec, budget if cache else None, 2, notes={"recompute": stats})
    plan.notes["tensor_cache"] = cache
    return plan


def _under_budget(graph: Graph, policy: str, cost: CostModel,
                  budget: int) -> tuple[tuple[Plan, SimResult] | None, tuple[Plan, SimResult]]:
    """(the fastest of the policy's plans that fits `budget`, or None; its smallest plan).
    Candidates: the time-optimised plan and the minimum-memory plan, each with its convolution
    algorithms chosen for the budget; the smallest: minimum memory, every convolution in its
    least working memory."""
    best: tuple[Plan, SimResult] | None = None
    for cache in (True, False):
        plan = assign_workspaces(make_training_plan(graph, policy, cost, budget, cache=cache), cost, budget)
        try:
            r = simulate(plan, cost, budget)
        except InfeasiblePlan:
            continue
        if best is None or r.time_s < best[1].time_s:
            best = (plan, r)
    small = least_workspaces(make_training_plan(graph, policy, cost), cost)
    return best, (small, simulate(small, cost))


def choose_plan(graph: Graph, budget: int | None = None, policy: str | None = None,
                cost: CostModel | None = None, offload: bool = True) -> tuple[Plan, SimResult]:
    """The plan to train `graph` with (see the module docstring) and its simulation.
    `policy` forces one policy (its fastest plan under `budget`, else its minimum-memory
    plan); `offload=False`: the trainer has no offload tier, so no candidate may offload."""
    cost = cost or default_cost()
    if policy is not None:
        if not offload and policy in OFFLOADING:
            raise ValueError(f"policy {policy!r} offloads activations and there is no offload tier; "
                             f"use liveness or {IN_MEMORY}, or give the trainer a tier")
        if budget is None:
            plan = make_training_plan(graph, policy, cost)
            return plan, simulate(plan, cost)
        fits, small = _under_budget(graph, policy, cost, budget)
        if fits is None:
            raise BudgetTooSmall(budget, small[1].device_peak_bytes, policy, lower_bound(graph))
        return fits
    if budget is None:
        plan = make_plan(graph, "liveness", cost)
        return plan, simulate(plan, cost)
    best: tuple[Plan, SimResult] | None = None
    smallest: tuple[int, str] | None = None
    for p in TRAINING_POLICIES:
        if not offload and p in OFFLOADING:
            continue
        fits, small = _under_budget(graph, p, cost, budget)
        if smallest is None or small[1].device_peak_bytes < smallest[0]:
            smallest = (small[1].device_peak_bytes, p)
        if fits is not None and (best is None or fits[1].time_s < best[1].time_s):
            best = fits
    if best is None:
        assert smallest is not None
        raise BudgetTooSmall(budget, smallest[0], smallest[1], lower_bound(graph))
    return best


def plan_document(plan: Plan, result: SimResult, network_kind: str, source: str | None = None,
                  budget: int | None = None) -> dict[str, Any]:
    """The plan file's document (see the module docstring)."""
    g = plan.graph
    chunks = g.profile.chunk_counts
    names = [a["name"] for a in g.profile.conv_algorithms]
    nodes = []
    for layer in g.layers:
        if "dl4j" not in layer.attrs:
            raise ValueError(f"node {layer.name!r} has no DL4J identity: build the graph with "
                             "pyd4j.sched.dl4j_json.graph_from_dl4j_json")
        nodes.append({"id": layer.id, "name": layer.name, "type": layer.type.value,
                      "dl4j": layer.attrs["dl4j"], "inputs": list(layer.inputs),
                      "shape": list(layer.out_shape), "y_bytes": layer.out_bytes})
    return {
        "format": FORMAT, "version": VERSION, "schema": PLAN_SCHEMA, "policy": plan.policy,
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


def smallest_plan(graph: Graph, cost: CostModel | None = None, offload: bool = True) -> tuple[Plan, SimResult]:
    """The minimum-memory plan with the smallest simulated peak among the candidate policies
    (every convolution in its least working memory)."""
    cost = cost or default_cost()
    best: tuple[Plan, SimResult] | None = None
    for p in TRAINING_POLICIES:
        if not offload and p in OFFLOADING:
            continue
        plan = least_workspaces(make_training_plan(graph, p, cost), cost)
        r = simulate(plan, cost)
        if best is None or r.device_peak_bytes < best[1].device_peak_bytes:
            best = (plan, r)
    assert best is not None
    return best


def plan_for_job(network: dict[str, Any], path: str | Path, policy: str | None = None,
                 budget: int | None = None, offload: bool = False, probe: Probe | None = None) -> dict[str, Any]:
    """Plan a job's network from the agent's "network" event (its configuration and the input
    shape of its first batch) and write the plan file; returns what was written. Policy
    "superneurons": the smallest plan the trainer can run (`offload`: it has an offload tier).
    `probe`: what DL4J says of the network's opaque steps (`pyd4j.memory.probe.of_configuration`;
    see `dl4j_json.probed_graph`), as pyd4j.train.fit asks it of a live network."""
    from pyd4j.sched.dl4j_json import probed_graph  # noqa: PLC0415 - graph -> policy -> plan

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
            "predicted_peak_bytes": result.device_peak_bytes,
            "offloads": any(s.op.name == "OFFLOAD" for s in plan.steps)}


def read_plan(path: str | Path) -> dict[str, Any]:
    """A plan file's document, validated against the plan schema (`pyd4j.schemas.PlanDocument`,
    the rules the Java reader checks too)."""
    fix = "write it with `pyd4j plan --model net.json --batch N --emit-plan FILE`"
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise SchemaError(f"plan {path} cannot be read as JSON ({err}); {fix}") from None
    check("plan", doc, f"plan {path}", fix)
    return doc
