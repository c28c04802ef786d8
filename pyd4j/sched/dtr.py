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
from pyd4j.sched.formulation import gradient_schedule
from pyd4j.sched.graph import Graph
from pyd4j.sched.plan import Op, Plan, Step


class DTRFailed(RuntimeError):
    """The budget is too small for the greedy: nothing evictable is left."""


def plan_dtr(graph: Graph, cost: CostModel, budget: int) -> Plan:
    """Run the greedy under `budget` bytes; raise `DTRFailed` when it cannot continue."""
    g = _Greedy(graph, cost, budget)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, g.n + 100))
    try:
        for i in range(g.n):
            g.forward(i)
        for p, i in enumerate(g.order):
            g.backward(p, i)
    finally:
        sys.setrecursionlimit(limit)
    for j in range(g.n):
        if g.present[j]:
            g.add(Step(Op.FREE, 5 * j))
    plan = Plan(graph, "dtr", g.steps, graph.nbytes_table(), {"budget": budget})
    return assign_workspaces(plan, cost, budget)


class _Greedy:
    """The greedy's state: records so far, bytes live, which outputs are present and pinned."""

    def __init__(self, graph: Graph, cost: CostModel, budget: int) -> None:
        self.graph, self.budget = graph, budget
        self.d = d = graph.deps
        self.layers = graph.layers
        self.n = n = len(self.layers)
        self.asz = d.asz
        self.fwd, _, _ = cost.layer_times(graph)
        self.order = backward_order(graph)
        self.grads = gradient_schedule(graph, self.order)
        self.steps = [Step(Op.ALLOC, t) for t in resident_tensors(graph)]
        self.add = self.steps.append
        self.live = sum(self.asz[t] for t in resident_tensors(graph))
        self.present = [False] * n
        self.pinned = [0] * n
        self.last = [0.0] * n
        self.clock = 0.0
        self.fwd_left = [len(c) for c in graph.consumers]
        self.bwd_uses: list[list[int]] = [[] for _ in range(n)]
        for p, i in enumerate(self.order):
            for j in d.bwd_reads[i]:
                self.bwd_uses[j].append(p)
        self.ptr = [0] * n

    def alive(self, j: int) -> bool:
        return self.fwd_left[j] > 0 or self.ptr[j] < len(self.bwd_uses[j])

    def make_room(self, nbytes: int) -> None:
        """Evict the present, unpinned output with the smallest h until `nbytes` more fit."""
        asz, present = self.asz, self.present
        while self.live + nbytes > self.budget:
            best, best_h = -1, 0.0
            for j in range(self.n):
                if present[j] and not self.pinned[j]:
                    h = self.fwd[j] / (asz[5 * j] * (self.clock - self.last[j] + 1e-9))
                    if best < 0 or h < best_h:
                        best, best_h = j, h
            if best < 0:
                raise DTRFailed(f"{self.live} bytes are pinned and {nbytes} more are needed under "
                                f"a budget of {self.budget} bytes")
            present[best] = False
            self.add(Step(Op.FREE, 5 * best))
            self.live -= asz[5 * best]

    def alloc(self, t: int) -> None:
        self.make_room(self.asz[t])
        self.add(Step(Op.ALLOC, t))
        self.live += self.asz[t]

    def materialize(self, j: int) -> None:
        if self.present[j]:
            self.last[j] = self.clock
            return
        self.compute(j, self.d.rc_reads[j], Op.RECOMPUTE, self.d.ws_rc[j])

    def compute(self, j: int, ins: tuple[int, ...], op: Op, ws: int) -> None:
        """Run layer j's forward (or its rebuild) with its inputs materialized and pinned."""
        for u in ins:
            self.materialize(u)
            self.pinned[u] += 1
        self.alloc(5 * j)
        self.make_room(ws)
        self.add(Step(op, j))
        self.clock += self.fwd[j]
        self.present[j] = True
        self.last[j] = self.clock
        for u in ins:
            self.pinned[u] -= 1

    def release_dead(self, js: tuple[int, ...] | list[int]) -> None:
        for j in js:
            if self.present[j] and not self.alive(j) and not self.pinned[j]:
                self.present[j] = False
                self.add(Step(Op.FREE, 5 * j))
                self.live -= self.asz[5 * j]

    def forward(self, i: int) -> None:
        inputs = list(dict.fromkeys(self.layers[i].inputs))
        self.compute(i, self.d.fwd_reads[i], Op.FORWARD, self.d.ws_fwd[i])
        for u in inputs:
            self.fwd_left[u] -= 1
        self.release_dead(inputs + [i])

    def backward(self, p: int, i: int) -> None:
        d, asz, g = self.d, self.asz, self.grads[p]
        reads = d.bwd_reads[i]
        for u in reads:
            self.materialize(u)
            self.pinned[u] += 1
        for t in g["new"]:
            self.alloc(t)
        if g["dw"] >= 0:
            self.alloc(g["dw"])
        self.make_room(d.ws_bwd[i])
        self.add(Step(Op.BACKWARD, i))
        self.clock += self.fwd[i] * 2
        ip = g["inplace"]
        if ip is not None:
            self.add(Step(Op.MOVE, 5 * ip[0] + 1, src=ip[1]))
            self.live += asz[5 * ip[0] + 1] - asz[ip[1]]
            if ip[1] == 5 * i:
                self.present[i] = False
        for t in (g["dw"], g["free_dy"]):
            if t >= 0:
                self.add(Step(Op.FREE, t))
                self.live -= asz[t]
        for u in reads:
            self.pinned[u] -= 1
            self.ptr[u] += 1
        self.release_dead(reads)
