"""Policy 3, cost-aware recomputation (on top of liveness + UTP).

Outputs of the paper's cheap layers (POOL, ACT, BN, LRN, DROPOUT) are released after their
last forward use and recomputed in the backward pass from the nearest checkpoints. Checkpoints
are what the release code checkpoints -- CONV, FC, JOIN, FORK, CONCAT (and ELTWISE), DATA,
SOFTMAX -- and cheap outputs read by more than one layer. CONV, structural and DATA outputs and
multi-reader cheap outputs are offloaded (otherwise they would pile up with depth); FC and
SOFTMAX outputs are small and stay. An in-place forward step and the output it overwrites
count as one layer (`pyd4j.sched.deps`).

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
from pyd4j.sched.graph import CHEAP, Graph, LayerType
from pyd4j.sched.plan import Plan
from pyd4j.sched.pool import pooled_plan

OFFLOADED = frozenset({LayerType.CONV, LayerType.JOIN, LayerType.FORK, LayerType.CONCAT,
                       LayerType.ELTWISE, LayerType.DATA})
"""Checkpoints whose outputs go to the host: CONV (as in UTP), the structural layers the
release code checkpoints (JOIN, FORK, CONCAT; ELTWISE is a JOIN with another operator) and
the input batch. FC and SOFTMAX outputs are checkpoints kept on the device (small)."""


def recompute_decisions(graph: Graph) -> tuple[Decisions, dict[str, int]]:
    """Which outputs to drop, offload, and which segments run memory-centric (memoised on the
    graph)."""
    memo = graph._memo.get("recompute_decisions")
    if memo is None:
        memo = graph._memo["recompute_decisions"] = _decisions(graph)
    return memo[0], dict(memo[1])


def _decisions(graph: Graph) -> tuple[Decisions, dict[str, int]]:
    layers = graph.layers
    cons = graph.consumers
    d = graph.deps
    # an in-place forward step and the step whose output it overwrites act as one layer:
    # cheap only if both are, and the pair's output is the later one
    src_of = {i: j for i, j in enumerate(d.fwd_inplace) if j >= 0}
    cheap = [False] * len(layers)
    for layer in layers:
        c = layer.type in CHEAP
        if layer.id in src_of:
            c = c and cheap[src_of[layer.id]]
        cheap[layer.id] = c
    owner = d.inplace_owner()
    consumed = {j for j in src_of.values() if owner[j] != j}
    drop = {l.id for l in layers if cheap[l.id] and len(cons[l.id]) <= 1
            and (l.id not in consumed or cheap[owner[l.id]])}
    offload = {owner[l.id] for l in layers if l.type in OFFLOADED}
    offload |= {l.id for l in layers if cheap[l.id] and l.id not in drop
                and l.id not in consumed}
    offload -= drop
    l_peak = max(layer_working_sets(graph), default=0)
    # segments: connected components of dropped layers (edges producer -> consumer)
    parent = {i: i for i in drop}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in drop:
        for j in d.rc_reads[i]:
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
        ysz = d.ysz
        mem = sum(ysz[i] for i in members)
        borders = {j for i in members for j in d.rc_reads[i] if j not in drop}
        mem += sum(ysz[j] for j in borders)
        grads = 0
        for i in members:
            g = ysz[i] if d.bwd_dy[i] else 0
            g += sum(ysz[j] for j in d.bwd_dx[i])
            if d.bwd_inplace[i] is not None:
                g -= ysz[d.bwd_inplace[i][0]]
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
