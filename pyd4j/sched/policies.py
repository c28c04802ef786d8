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
from pyd4j.sched.plan import Plan, gc_paused
from pyd4j.sched.emit import Decisions, emit
from pyd4j.sched.pool import conv_outputs, plan_utp
from pyd4j.sched.recompute import plan_recompute, recompute_decisions
from pyd4j.sched.simulator import InfeasiblePlan, SimResult, live_timeline, simulate

POLICIES = ("baseline", "liveness", "utp", "recompute", "superneurons")


def _minimum(graph: Graph, name: str, build: Callable[[Graph], Plan]) -> Plan:
    """The minimum-memory plan of a policy (memoised on the graph: it depends on nothing else)."""
    key = ("minimum_plan", name)
    hit = graph._memo.get(key)
    if hit is None:
        plan = build(graph)
        hit = graph._memo[key] = (plan.steps, plan.notes)
    return Plan(graph, name, list(hit[0]), graph.nbytes_table(), dict(hit[1]))


def _superneurons(graph: Graph, cost: CostModel, budget: int | None, cache: bool) -> Plan:
    budget = budget if budget is not None else cost.device.memory_bytes
    if cache:
        plan = plan_recompute(graph, budget, reserve=fastest_workspaces(graph, cost))
        plan.policy = "superneurons"
        return assign_workspaces(plan, cost, budget)
    key = ("minimum_plan", "superneurons", id(cost), budget)
    hit = graph._memo.get(key)
    if hit is None or hit[0] is not cost:
        plan = _minimum(graph, "recompute", plan_recompute)
        plan.policy = "superneurons"
        plan = assign_workspaces(plan, cost, budget)
        hit = graph._memo[key] = (cost, plan.steps, plan.notes)
    return Plan(graph, "superneurons", list(hit[1]), graph.nbytes_table(), dict(hit[2]))


_PLANNERS: dict[str, Callable[[Graph, CostModel, int | None, bool], Plan]] = {
    "baseline": lambda g, c, b, cache: _minimum(g, "baseline", plan_baseline),
    "liveness": lambda g, c, b, cache: _minimum(g, "liveness", plan_liveness),
    "utp": lambda g, c, b, cache: plan_utp(g, b) if cache else _minimum(g, "utp", plan_utp),
    "recompute": lambda g, c, b, cache: (plan_recompute(g, b) if cache
                                         else _minimum(g, "recompute", plan_recompute)),
    "superneurons": _superneurons,
}


def minimum_decisions(graph: Graph, policy: str) -> Decisions:
    """What the policy's minimum-memory plan frees, offloads and drops."""
    if policy == "baseline":
        return Decisions(free=False)
    if policy == "liveness":
        return Decisions(free=True)
    if policy == "utp":
        return Decisions(free=True, offload=conv_outputs(graph))
    if policy in ("recompute", "superneurons"):
        return recompute_decisions(graph)[0]
    raise KeyError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")


@gc_paused
def minimum_peak(graph: Graph, policy: str) -> int:
    """`simulate(make_plan(graph, policy)).peak_bytes` without the passes that cannot change
    it (prefetch hoisting stays under the plan's own peak; the convolution-workspace pass adds
    only optional workspace) and without checks or timing: what searches bisect on."""
    graph.validate()
    plan = Plan(graph, policy, emit(graph, minimum_decisions(graph, policy)),
                graph.nbytes_table())
    return max(live_timeline(plan), default=0)


@gc_paused
def evaluate(plan: Plan, cost: CostModel, budget: int | None = None,
             arena: bool = True) -> SimResult:
    """`simulate(plan, cost, budget, timeline=False, arena=arena)`, remembering the last few
    results per graph and cost model: the same records are not replayed twice (plans are
    rebuilt for each budget, and often come out the same)."""
    key = ("evaluated", id(cost))
    hit = plan.graph._memo.get(key)
    if hit is None or hit[0] is not cost:
        hit = plan.graph._memo[key] = (cost, [])
    for steps, placed, result in hit[1]:
        if ((placed or not arena) and steps == plan.steps
                and (budget is None or result.device_peak_bytes <= budget)):
            return result
    result = simulate(plan, cost, budget, timeline=False, arena=arena)
    hit[1].append((list(plan.steps), arena, result))
    del hit[1][:-4]
    return result


@gc_paused
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
            t = evaluate(plan, cost, budget, arena=False).time_s
        except InfeasiblePlan:
            continue
        if t < best_t:
            best, best_t = plan, t
    return best
