"""Sublinear-memory checkpointing (Chen et al. 2016, "Training Deep Nets with Sublinear
Memory Cost"), as a reference policy for budget sweeps.

Chen's greedy (their Algorithm 2 with a memory threshold `b`): walk the layers in topological
order adding up output sizes; the layer where the running sum passes `b` becomes a checkpoint
and the sum restarts. Outputs of other layers are dropped after their last forward use and each
segment is recomputed once from its checkpoint in the backward pass (speed-centric in `emit`'s
terms). `b` = (sum of outputs) / sqrt(n) cuts n equal layers into sqrt(n) segments of sqrt(n)
layers: O(sqrt(n)) memory for one extra forward pass; `thresholds` sweeps `b` for the
time-memory trade-off. DATA and SOFTMAX outputs are always kept; nothing is offloaded.
"""

from __future__ import annotations

import math

from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.convws import assign_workspaces
from pyd4j.sched.emit import Decisions, emit
from pyd4j.sched.graph import Graph, LayerType
from pyd4j.sched.plan import Plan

KEPT = frozenset({LayerType.DATA, LayerType.SOFTMAX, LayerType.OPAQUE})


def checkpoints(graph: Graph, threshold: float) -> frozenset[int]:
    """Chen's greedy checkpoint choice for memory threshold `threshold` (bytes)."""
    ysz = graph.deps.ysz
    keep, run = set(), 0.0
    for layer in graph.layers:
        run += ysz[layer.id]
        if layer.type in KEPT or run > threshold:
            keep.add(layer.id)
            run = 0.0
    return frozenset(keep)


def plan_checkpoint(graph: Graph, cost: CostModel, budget: int,
                    threshold: float | None = None) -> Plan:
    """Checkpoint plan for `threshold` (default: the summed outputs over sqrt(n), Chen's
    sqrt(n) segments); convolution algorithms as fast as `budget` allows at each step."""
    if threshold is None:
        threshold = sum(graph.deps.ysz) / math.sqrt(len(graph))
    keep = checkpoints(graph, threshold)
    drop = frozenset(range(len(graph))) - keep
    plan = Plan(graph, "checkpoint", emit(graph, Decisions(free=True, drop=drop)),
                graph.nbytes_table(), {"checkpoints": len(keep), "threshold": threshold})
    return assign_workspaces(plan, cost, budget)


def thresholds(graph: Graph, count: int = 24) -> list[float]:
    """Thresholds from every layer a checkpoint (the liveness plan) to one checkpoint per
    network, geometric in between."""
    ysz = [s for s in graph.deps.ysz if s]
    lo, hi = min(ysz) / 2, float(sum(ysz))
    return [lo * (hi / lo) ** (k / (count - 1)) for k in range(count)]
