"""Which plan to train a network with: the fastest that fits a budget, or the smallest.

Choosing (`choose_plan`), for a graph of the network the trainer runs (a DL4J network's: `pyd4j.dl4j.graph`):
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
"""

from __future__ import annotations

from dataclasses import replace

from pyd4j.sched.bounds import Bound, lower_bound
from pyd4j.sched.convws import assign_workspaces, least_workspaces
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.graph import Graph
from pyd4j.sched.plan import Plan
from pyd4j.sched.policies import make_plan
from pyd4j.sched.pool import pooled_plan
from pyd4j.sched.recompute import recompute_decisions
from pyd4j.sched.simulator import InfeasiblePlan, SimResult, simulate

IN_MEMORY = "recompute_in_memory"
SMALLEST = "smallest"
"""Not a policy of its own: the smallest plan of the candidate policies (`smallest_plan`)."""
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


def _choose(graph: Graph, budget: int | None = None, policy: str | None = None,
            cost: CostModel | None = None, offload: bool = True) -> tuple[Plan, SimResult]:
    """`choose_plan` on the graph as it is.
    `policy` forces one policy (its fastest plan under `budget`, else its minimum-memory
    plan); `offload=False`: the trainer has no offload tier, so no candidate may offload.
    `policy="smallest"`: the smallest plan (`smallest_plan`), refused when it exceeds `budget`."""
    cost = cost or default_cost()
    if policy == SMALLEST:
        small = smallest_plan(graph, cost, offload)
        if budget is not None and small[1].device_peak_bytes > budget:
            raise BudgetTooSmall(budget, small[1].device_peak_bytes, small[0].policy, lower_bound(graph))
        return small
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


def _smallest(graph: Graph, cost: CostModel | None = None, offload: bool = True) -> tuple[Plan, SimResult]:
    """`smallest_plan` on the graph as it is."""
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


def choose_plan(graph: Graph, budget: int | None = None, policy: str | None = None,
                cost: CostModel | None = None, offload: bool = True) -> tuple[Plan, SimResult]:
    """The plan to train `graph` with (see the module docstring) and its simulation.
    `policy` forces one policy (its fastest plan under `budget`, else its minimum-memory
    plan); `offload=False`: the trainer has no offload tier, so no candidate may offload.
    `policy="smallest"`: the smallest plan (`smallest_plan`), refused when it exceeds `budget`.
    When no plan of the graph as it is fits `budget`, its sliceable layers run in batch slices
    (`sliced_variant`: batch normalization in two passes); the error then names that variant's minimum."""
    try:
        return _choose(graph, budget, policy, cost, offload)
    except BudgetTooSmall:
        variant = sliced_variant(graph)
        if variant is None:
            raise
    return _choose(variant, budget, policy, cost, offload)


def smallest_plan(graph: Graph, cost: CostModel | None = None, offload: bool = True) -> tuple[Plan, SimResult]:
    """The minimum-memory plan with the smallest simulated peak among the candidate policies
    (every convolution in its least working memory), with DL4J's own steps or, where that is
    smaller, the sliced ones (`sliced_variant`)."""
    best = _smallest(graph, cost, offload)
    variant = sliced_variant(graph)
    if variant is not None:
        other = _smallest(variant, cost, offload)
        if other[1].device_peak_bytes < best[1].device_peak_bytes:
            best = other
    return best


def sliced_variant(graph: Graph) -> Graph | None:
    """The graph with every layer its builder marked `sliceable` in its sliced form (variant
    `sliced`, the framework's `TYPE.sliced` entries): its steps run in batch slices, each slice's
    working memory at a time, and write the input gradient over the output's where the plan lets
    them. A DL4J batch normalization then runs in two passes (org.pyd4j.train.SlicedBatchNorm:
    nothing kept from forward for backward, exact up to the order of additions), an activation layer
    as DL4J runs it, slice by slice (bit for bit). None: the graph has no such layer."""
    if not any(layer.attrs.get("sliceable") for layer in graph.layers):
        return None
    g = graph.with_framework(graph.framework)
    g.layers = [replace(layer, attrs={**layer.attrs, "variant": "sliced"}) if layer.attrs.get("sliceable") else layer
                for layer in graph.layers]
    return g


def network_lower_bound(graph: Graph) -> Bound:
    """What no plan of the network goes below: the smaller lower bound (`pyd4j.sched.bounds`) of the
    graph as it is and of its sliced variant (`sliced_variant`), which `choose_plan` may fall back on."""
    bound = lower_bound(graph)
    variant = sliced_variant(graph)
    if variant is not None:
        other = lower_bound(variant)
        if other.lower_bound_bytes < bound.lower_bound_bytes:
            bound = other
    return bound
