"""Policy 3, cost-aware recomputation (on top of liveness + UTP).

Outputs of cheap layers (POOL, ACT, BN, LRN, DROPOUT, and the memory-bound structural layers
JOIN, ELTWISE, CONCAT, FORK) are released after their last forward use and recomputed in the
backward pass from the nearest checkpoints. Checkpoints are CONV outputs (offloaded, as in
UTP), outputs of other expensive layers (FC, DATA, SOFTMAX: kept) and cheap outputs read by more
than one layer (ResNet block outputs, Inception concatenations): those bound recomputation
segments and are offloaded too, otherwise they would pile up with depth.

Per segment (a connected group of dropped outputs) the paper's rule picks the mode:
speed-centric (rebuild the segment once, keep it until its backward steps are done) when the
segment's recompute memory fits under l_peak = max_i l_i, memory-centric (rebuild for each
backward step, free intermediates at once) otherwise. A segment's recompute memory is its
dropped outputs plus the checkpoints it reads plus the largest gradient set one of its backward
steps needs.
"""

from __future__ import annotations

from pyd4j.sched.bounds import layer_working_sets
from pyd4j.sched.emit import Decisions
from pyd4j.sched.graph import CHEAP, CHEAP_STRUCTURAL, Graph, LayerType
from pyd4j.sched.plan import Plan, aligned
from pyd4j.sched.pool import pooled_plan


def recompute_decisions(graph: Graph) -> tuple[Decisions, dict[str, int]]:
    """Which outputs to drop, offload, and which segments run memory-centric."""
    layers = graph.layers
    cons = graph.consumers
    cheap = CHEAP | CHEAP_STRUCTURAL
    drop = {l.id for l in layers if l.type in cheap and len(cons[l.id]) <= 1}
    offload = {l.id for l in layers
               if l.type is LayerType.CONV or (l.type in cheap and l.id not in drop)}
    l_peak = max(layer_working_sets(graph), default=0)
    # segments: connected components of dropped layers (edges producer -> consumer)
    parent = {i: i for i in drop}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in drop:
        for j in layers[i].inputs:
            if j in drop:
                a, b = find(i), find(j)
                if a != b:
                    parent[a] = b
    segments: dict[int, list[int]] = {}
    for i in drop:
        segments.setdefault(find(i), []).append(i)
    memory_centric: set[int] = set()
    n_speed = 0
    for members in segments.values():
        mem = sum(aligned(layers[i].out_bytes) for i in members)
        borders = {j for i in members for j in layers[i].inputs if j not in drop}
        mem += sum(aligned(layers[j].out_bytes) for j in borders)
        grads = 0
        for i in members:
            g = aligned(layers[i].out_bytes) if graph.has_grad(i) else 0
            g += sum(aligned(layers[j].out_bytes) for j in graph.grad_inputs(i))
            grads = max(grads, g)
        if mem + grads <= l_peak:
            n_speed += 1
        else:
            memory_centric.update(members)
    stats = {"segments": len(segments), "speed_centric": n_speed,
             "memory_centric": len(segments) - n_speed, "l_peak_bytes": l_peak}
    return Decisions(True, frozenset(offload), frozenset(drop), frozenset(memory_centric)), stats


def plan_recompute(graph: Graph, budget: int | None = None, lookahead: int = 2,
                   reserve: list[int] | None = None) -> Plan:
    """Liveness + UTP + cost-aware recomputation (tensor cache under `budget`)."""
    dec, stats = recompute_decisions(graph)
    return pooled_plan(graph, "recompute", dec, budget, lookahead, reserve, {"recompute": stats})
