"""A DTR-style online greedy (Kirisame et al. 2021, "Dynamic Tensor Rematerialization"), as a
reference policy for budget sweeps.

The plan is made as the iteration runs, with no look-ahead: tensors are freed when nothing will
read them again (reference counts), and when an allocation would go over the budget the resident
layer output with the smallest h = compute cost / (bytes x staleness) is evicted (staleness:
compute time since its last use). A step that reads an evicted output rebuilds it first,
recursively (RECOMPUTE records). Nothing is offloaded. This is DTR's h_DTR without the
equivalence-class neighbourhood term. Gradients follow `emit`'s rule (allocated at their first
contribution, in place where the dependency model allows).
"""

from __future__ import annotations

import sys

from pyd4j.sched.bounds import resident_tensors
from pyd4j.sched.convws import assign_workspaces
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.emit import backward_order
from pyd4j.sched.graph import Graph
from pyd4j.sched.optimum import gradient_schedule
from pyd4j.sched.plan import Op, Plan, Step


class DTRFailed(RuntimeError):
    """The budget is too small for the greedy: nothing evictable is left."""


def plan_dtr(graph: Graph, cost: CostModel, budget: int) -> Plan:
    """Run the greedy under `budget` bytes; raise `DTRFailed` when it cannot continue."""
    d = graph.deps
    layers = graph.layers
    n = len(layers)
    asz = d.asz
    fwd, _, _ = cost.layer_times(graph)
    order = backward_order(graph)
    grads = gradient_schedule(graph, order)
    steps = [Step(Op.ALLOC, t) for t in resident_tensors(graph)]
    add = steps.append
    live = sum(asz[t] for t in resident_tensors(graph))
    present = [False] * n
    pinned = [0] * n
    last = [0.0] * n
    clock = 0.0
    fwd_left = [len(c) for c in graph.consumers]
    bwd_uses: list[list[int]] = [[] for _ in range(n)]
    for p, i in enumerate(order):
        for j in d.bwd_reads[i]:
            bwd_uses[j].append(p)
    ptr = [0] * n

    def alive(j: int) -> bool:
        return fwd_left[j] > 0 or ptr[j] < len(bwd_uses[j])

    def make_room(nbytes: int) -> None:
        nonlocal live
        while live + nbytes > budget:
            best, best_h = -1, 0.0
            for j in range(n):
                if present[j] and not pinned[j]:
                    h = fwd[j] / (asz[5 * j] * (clock - last[j] + 1e-9))
                    if best < 0 or h < best_h:
                        best, best_h = j, h
            if best < 0:
                raise DTRFailed(f"{live} bytes are pinned and {nbytes} more are needed under "
                                f"a budget of {budget} bytes")
            present[best] = False
            add(Step(Op.FREE, 5 * best))
            live -= asz[5 * best]

    def alloc(t: int) -> None:
        nonlocal live
        make_room(asz[t])
        add(Step(Op.ALLOC, t))
        live += asz[t]

    def touch(j: int) -> None:
        last[j] = clock

    def materialize(j: int) -> None:
        if present[j]:
            touch(j)
            return
        compute(j, d.rc_reads[j], Op.RECOMPUTE, d.ws_rc[j])

    def compute(j: int, ins, op: Op, ws: int) -> None:
        """Run layer j's forward (or its rebuild) with its inputs materialized and pinned."""
        nonlocal clock
        for u in ins:
            materialize(u)
            pinned[u] += 1
        alloc(5 * j)
        make_room(ws)
        add(Step(op, j))
        clock += fwd[j]
        present[j] = True
        touch(j)
        for u in ins:
            pinned[u] -= 1

    def release_dead(js: tuple[int, ...] | list[int]) -> None:
        nonlocal live
        for j in js:
            if present[j] and not alive(j) and not pinned[j]:
                present[j] = False
                add(Step(Op.FREE, 5 * j))
                live -= asz[5 * j]

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, n + 100))
    try:
        for i in range(n):
            compute(i, d.fwd_reads[i], Op.FORWARD, d.ws_fwd[i])
            for u in dict.fromkeys(layers[i].inputs):
                fwd_left[u] -= 1
            release_dead(list(dict.fromkeys(layers[i].inputs)) + [i])
        for p, i in enumerate(order):
            g = grads[p]
            reads = d.bwd_reads[i]
            for u in reads:
                materialize(u)
                pinned[u] += 1
            for t in g["new"]:
                alloc(t)
            if g["dw"] >= 0:
                alloc(g["dw"])
            make_room(d.ws_bwd[i])
            add(Step(Op.BACKWARD, i))
            clock += fwd[i] * 2
            ip = g["inplace"]
            if ip is not None:
                add(Step(Op.MOVE, 5 * ip[0] + 1, src=ip[1]))
                live += asz[5 * ip[0] + 1] - asz[ip[1]]
                if ip[1] == 5 * i:
                    present[i] = False
            if g["dw"] >= 0:
                add(Step(Op.FREE, g["dw"]))
                live -= asz[g["dw"]]
            if g["free_dy"] >= 0:
                add(Step(Op.FREE, g["free_dy"]))
                live -= asz[g["free_dy"]]
            for u in reads:
                pinned[u] -= 1
                ptr[u] += 1
            release_dead(reads)
    finally:
        sys.setrecursionlimit(limit)
    for j in range(n):
        if present[j]:
            add(Step(Op.FREE, 5 * j))
    plan = Plan(graph, "dtr", steps, graph.nbytes_table(), {"budget": budget})
    return assign_workspaces(plan, cost, budget)
