"""Turns a policy's per-tensor decisions into schedule records (the one place that writes them).

A policy decides, per layer output Y:
- whether dead tensors are freed at all (`free`; the baseline keeps everything),
- `offload`: copied to host right after it is produced, freed after its last forward use and
  prefetched when a backward step (or a recomputation) needs it again,
- `drop`: freed after its last forward use and rebuilt by RECOMPUTE records in the backward
  pass; `memory_centric` (a subset of `drop`) rebuilds only what the current step needs and
  frees intermediates at once, the rest (speed-centric) keeps rebuilt tensors until their last
  backward use.

Backward steps run in reverse topological order; each needs its inputs, its output, the
gradient of its output and the gradients of its inputs resident (see `pyd4j.sched.bounds`).
With `free`, a tensor is released as soon as no later step needs it, and a tensor with a host
copy is released between uses that are not adjacent.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from pyd4j.sched.graph import Graph
from pyd4j.sched.plan import Kind, Op, Step

_Y, _DY, _W, _DW, _M = (int(k) for k in Kind)


@dataclass(frozen=True)
class Decisions:
    free: bool = True
    offload: frozenset[int] = field(default_factory=frozenset)
    drop: frozenset[int] = field(default_factory=frozenset)
    memory_centric: frozenset[int] = field(default_factory=frozenset)


def backward_order(graph: Graph) -> list[int]:
    """Layers with a backward step, in the order the backward pass runs them."""
    return [i for i in range(len(graph) - 1, -1, -1) if graph.has_backward(i)]


def emit(graph: Graph, dec: Decisions) -> list[Step]:
    """Schedule records for one training iteration under `dec`."""
    layers = graph.layers
    n = len(layers)
    cons = graph.consumers
    inputs = [tuple(dict.fromkeys(layer.inputs)) for layer in layers]
    offload, drop, mc, free = dec.offload, dec.drop, dec.memory_centric, dec.free
    steps: list[Step] = []
    add = steps.append
    A, F, OFF, PRE, FW, BW, RC = (Op.ALLOC, Op.FREE, Op.OFFLOAD, Op.PREFETCH, Op.FORWARD,
                                  Op.BACKWARD, Op.RECOMPUTE)
    for layer in layers:
        if layer.param_shapes:
            base = 5 * layer.id
            add(Step(A, base + _W))
            add(Step(A, base + _DW))
            add(Step(A, base + _M))

    valid = [False] * n
    host = [False] * n
    remaining = [len(c) for c in cons]
    for i in range(n):
        add(Step(A, 5 * i))
        add(Step(FW, i))
        valid[i] = True
        if i in offload:
            add(Step(OFF, 5 * i))
            host[i] = True
        if free:
            for j in inputs[i]:
                remaining[j] -= 1
                if remaining[j] == 0 and (j in offload or j in drop):
                    add(Step(F, 5 * j))
                    valid[j] = False

    order = backward_order(graph)
    need = {i: inputs[i] + ((i,) if i not in inputs[i] else ()) for i in order}
    uses: list[list[int]] = [[] for _ in range(n)]
    for pos, i in enumerate(order):
        for j in need[i]:
            uses[j].append(pos)
    ptr = [0] * n
    pinned: dict[int, int] = {}
    dy_alloc = [False] * n
    has_grad = [graph.has_grad(i) for i in range(n)]

    def next_use(j: int) -> int | None:
        u, p = uses[j], ptr[j]
        return u[p] if p < len(u) else None

    def release_intermediate(u: int, pos: int) -> None:
        # u was materialised only to rebuild another tensor during step `pos`: speed-centric
        # rebuilt tensors and kept tensors stay; the rest goes (prefetch hoisting brings host
        # copies back early where memory allows).
        nxt = next_use(u)
        if nxt is None or u in mc or host[u]:
            add(Step(F, 5 * u))
            valid[u] = False

    def materialize(j: int, cur: tuple[int, ...], pos: int) -> None:
        if valid[j]:
            return
        if host[j]:
            add(Step(A, 5 * j))
            add(Step(PRE, 5 * j))
        elif j in drop:
            for u in inputs[j]:  # pinned: a nested rebuild must not release them
                pinned[u] = pinned.get(u, 0) + 1
            for u in inputs[j]:
                materialize(u, cur, pos)
            add(Step(A, 5 * j))
            add(Step(RC, j))
            valid[j] = True
            for u in inputs[j]:
                pinned[u] -= 1
            for u in inputs[j]:
                if u not in cur and valid[u] and not pinned.get(u):
                    release_intermediate(u, pos)
            return
        else:
            raise RuntimeError(f"plan lost tensor {layers[j].name}:Y (neither kept, offloaded "
                               "nor recomputable); this is a policy bug")
        valid[j] = True

    limit = sys.getrecursionlimit()
    if n + 100 > limit:
        sys.setrecursionlimit(n + 100)
    try:
        for pos, i in enumerate(order):
            cur = need[i]
            for j in cur:
                materialize(j, cur, pos)
            for j in inputs[i]:  # after materialising: gradients are not live during rebuilds
                if has_grad[j] and not dy_alloc[j]:
                    add(Step(A, 5 * j + _DY))
                    dy_alloc[j] = True
            add(Step(BW, i))
            for j in cur:
                ptr[j] += 1
            if not free:
                continue
            if has_grad[i]:
                add(Step(F, 5 * i + _DY))
            for j in cur:
                nxt = next_use(j)
                if nxt is None or (host[j] and nxt > pos + 1) or (j in mc and nxt > pos + 1):
                    add(Step(F, 5 * j))
                    valid[j] = False
    finally:
        sys.setrecursionlimit(limit)
    return steps
