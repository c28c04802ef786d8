"""The policy registry: names -> planners, cumulative as in the paper.

baseline (0) < liveness (1) < utp (2: + unified tensor pool) < recompute (3: + cost-aware
recomputation) < superneurons (4: + dynamic convolution workspace).
"""

from __future__ import annotations

from typing import Callable

from pyd4j.sched.baseline import plan_baseline
from pyd4j.sched.convws import assign_workspaces, fastest_workspaces
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.graph import Graph
from pyd4j.sched.liveness import plan_liveness
from pyd4j.sched.plan import Plan
from pyd4j.sched.pool import plan_utp
from pyd4j.sched.recompute import plan_recompute
from pyd4j.sched.simulator import InfeasiblePlan, simulate

POLICIES = ("baseline", "liveness", "utp", "recompute", "superneurons")


def _superneurons(graph: Graph, cost: CostModel, budget: int | None, cache: bool) -> Plan:
    if cache:
        plan = plan_recompute(graph, budget, reserve=fastest_workspaces(graph, cost))
    else:
        plan = plan_recompute(graph)
    plan.policy = "superneurons"
    return assign_workspaces(plan, cost, budget if budget is not None else cost.device.memory_bytes)


_PLANNERS: dict[str, Callable[[Graph, CostModel, int | None, bool], Plan]] = {
    "baseline": lambda g, c, b, cache: plan_baseline(g),
    "liveness": lambda g, c, b, cache: plan_liveness(g),
    "utp": lambda g, c, b, cache: plan_utp(g, b if cache else None),
    "recompute": lambda g, c, b, cache: plan_recompute(g, b if cache else None),
    "superneurons": _superneurons,
}


def make_plan(graph: Graph, policy: str = "superneurons", cost: CostModel | None = None,
              budget: int | None = None, cache: bool = False) -> Plan:
    """Plan one iteration of `graph` with `policy`.

    Without `cache`: the minimum-memory plan; `budget` (default: the device's memory) is only
    what the convolution-workspace pass may fill. With `cache`: the time-optimised plan under
    `budget` -- released tensors stay on the device as a cache and are evicted (offloaded,
    dropped) only when the budget forces it, so with ample memory nothing moves and nothing is
    recomputed. The tensor-cache plan is replayed by the simulator against the minimum-memory
    plan under the same budget and the faster one that fits is returned, so a tight budget never
    costs more than minimum memory; when neither fits, the minimum-memory plan is returned (its
    peak says by how much the budget is short)."""
    if policy not in _PLANNERS:
        raise KeyError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    graph.validate()
    cost = cost or CostModel.for_device("k40c")
    if cache and budget is None:
        budget = cost.device.memory_bytes
    small = _PLANNERS[policy](graph, cost, budget, False)
    small.notes["tensor_cache"] = False
    if not cache or policy in ("baseline", "liveness"):  # nothing to cache: nothing moves
        return small
    fast = _PLANNERS[policy](graph, cost, budget, True)
    fast.notes["tensor_cache"] = True
    best, best_t = small, float("inf")
    for plan in (fast, small):
        try:
            t = simulate(plan, cost, budget, timeline=False).time_s
        except InfeasiblePlan:
            continue
        if t < best_t:
            best, best_t = plan, t
    return best
