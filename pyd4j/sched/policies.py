"""The policy registry: names -> planners, cumulative as in the paper.

baseline (0) < liveness (1) < utp (2: + unified tensor pool) < recompute (3: + cost-aware
recomputation) < superneurons (4: + dynamic convolution workspace).
"""

from __future__ import annotations

from typing import Callable

from pyd4j.sched.baseline import plan_baseline
from pyd4j.sched.convws import assign_workspaces
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.graph import Graph
from pyd4j.sched.liveness import plan_liveness
from pyd4j.sched.plan import Plan
from pyd4j.sched.pool import plan_utp
from pyd4j.sched.recompute import plan_recompute

POLICIES = ("baseline", "liveness", "utp", "recompute", "superneurons")


def _superneurons(graph: Graph, cost: CostModel, budget: int | None, cache: bool) -> Plan:
    plan = plan_recompute(graph, budget if cache else None)
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

    `budget` (bytes, default: the device's memory) is what the convolution-workspace pass may
    fill; with `cache`, the tensor pool also keeps released tensors on the device (LRU) up to
    it, trading peak memory for fewer transfers. Without `cache` plans use minimal memory."""
    if policy not in _PLANNERS:
        raise KeyError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    graph.validate()
    cost = cost or CostModel.for_device("k40c")
    if cache and budget is None:
        budget = cost.device.memory_bytes
    return _PLANNERS[policy](graph, cost, budget, cache)
