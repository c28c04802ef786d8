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

With a `budget` (the tensor cache of SuperNeurons' unified tensor pool), releasing an offloaded
or dropped tensor that is needed again does not free it: it stays on the device as a cache entry
and is freed (evicted) only when an allocation would exceed the budget -- a delayed free. The
victim is the entry whose next use is furthest away. Only evicted tensors are copied to the host
(the OFFLOAD record still follows the forward step, so the copy overlaps compute) and only
evicted ones are prefetched or recomputed; with ample memory nothing moves. Evicted tensors the
next `lookahead` backward steps need are prefetched right after each backward step, evicting
only entries needed later. `reserve[i]` bytes (a convolution workspace) are kept free before
each compute step of layer i, evicting only entries needed after that window.
"""

from __future__ import annotations

import heapq
import sys
from dataclasses import dataclass, field

from pyd4j.sched.graph import Graph
from pyd4j.sched.plan import Kind, Op, Step, aligned

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


def emit(graph: Graph, dec: Decisions, budget: int | None = None,
         reserve: list[int] | None = None, lookahead: int = 2) -> list[Step]:
    """Schedule records for one training iteration under `dec` (with the tensor cache when a
    `budget` is given; see the module docstring)."""
    layers = graph.layers
    n = len(layers)
    cons = graph.consumers
    inputs = [tuple(dict.fromkeys(layer.inputs)) for layer in layers]
    offload, drop, mc, free = dec.offload, dec.drop, dec.memory_centric, dec.free
    caching = budget is not None and free
    steps: list[Step] = []
    add = steps.append
    A, F, OFF, PRE, FW, BW, RC = (Op.ALLOC, Op.FREE, Op.OFFLOAD, Op.PREFETCH, Op.FORWARD,
                                  Op.BACKWARD, Op.RECOMPUTE)
    ysz = [aligned(layer.out_bytes) for layer in layers]
    live = 0
    for layer in layers:
        if layer.param_shapes:
            base = 5 * layer.id
            add(Step(A, base + _W))
            add(Step(A, base + _DW))
            add(Step(A, base + _M))
            live += 3 * aligned(layer.param_bytes)

    valid = [False] * n
    host = [False] * n
    cached = [False] * n  # on the device, released, evictable (tensor cache)
    evicted = [False] * n  # its OFFLOAD record is kept
    heap: list[tuple[int, int]] = []  # (-next use, layer) of cache entries
    off_at: list[int] = []  # indexes of OFFLOAD records (cache mode: kept only if evicted)
    remaining = [len(c) for c in cons]

    order = backward_order(graph)
    need = {i: inputs[i] + ((i,) if i not in inputs[i] else ()) for i in order}
    uses: list[list[int]] = [[] for _ in range(n)]
    for pos, i in enumerate(order):
        for j in need[i]:
            uses[j].append(pos)
    ptr = [0] * n

    def next_use(j: int) -> int | None:
        u, p = uses[j], ptr[j]
        return u[p] if p < len(u) else None

    def evict(nbytes: int, after: int) -> None:
        # free cache entries (furthest next use first, only those used after `after`)
        # until nbytes more fit the budget
        nonlocal live
        while live + nbytes > budget and heap:  # type: ignore[operator]
            key, j = heap[0]
            if not cached[j] or -key != next_use(j):
                heapq.heappop(heap)  # stale entry
                continue
            if -key <= after:
                return
            heapq.heappop(heap)
            cached[j] = valid[j] = False
            add(Step(F, 5 * j))
            live -= ysz[j]
            if j in offload:
                host[j] = evicted[j] = True

    def alloc_y(j: int) -> None:
        nonlocal live
        if caching:
            evict(ysz[j], -2)
        add(Step(A, 5 * j))
        live += ysz[j]

    def release(j: int) -> None:
        # j is not needed until its next use: free it, or keep it as a cache entry
        nonlocal live
        nxt = next_use(j)
        if caching and nxt is not None:
            if not cached[j]:
                cached[j] = True
                heapq.heappush(heap, (-nxt, j))
            return
        cached[j] = valid[j] = False
        add(Step(F, 5 * j))
        live -= ysz[j]

    for i in range(n):
        alloc_y(i)
        if caching and reserve is not None and reserve[i]:
            evict(reserve[i], -1)
        add(Step(FW, i))
        valid[i] = True
        if i in offload:
            off_at.append(len(steps))
            add(Step(OFF, 5 * i))
            if not caching:
                host[i] = True
        if free:
            for j in inputs[i]:
                remaining[j] -= 1
                if remaining[j] == 0 and (j in offload or j in drop):
                    release(j)

    pinned: dict[int, int] = {}
    dy_alloc = [False] * n
    has_grad = [graph.has_grad(i) for i in range(n)]

    def release_intermediate(u: int, pos: int) -> None:
        # u was materialised only to rebuild another tensor during step `pos`: speed-centric
        # rebuilt tensors and kept tensors stay; the rest goes (prefetch hoisting brings host
        # copies back early where memory allows).
        nxt = next_use(u)
        if caching:
            if nxt is None or u in offload or u in drop:
                release(u)
        elif nxt is None or u in mc or host[u]:
            release(u)

    def materialize(j: int, cur: tuple[int, ...], pos: int) -> None:
        if valid[j]:
            cached[j] = False  # a hit: in use again
            return
        if host[j]:
            alloc_y(j)
            add(Step(PRE, 5 * j))
        elif j in drop:
            for u in inputs[j]:  # pinned: a nested rebuild must not release them
                pinned[u] = pinned.get(u, 0) + 1
            for u in inputs[j]:
                materialize(u, cur, pos)
            alloc_y(j)
            if caching and reserve is not None and reserve[j]:
                evict(reserve[j], pos + lookahead)
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

    def prefetch_ahead(pos: int) -> None:
        # bring evicted tensors of the next `lookahead` steps back early, evicting only cache
        # entries needed after them, and leaving room for the gradients those steps allocate
        nonlocal live
        grads: dict[int, int] = {}
        for q in range(pos + 1, min(pos + 1 + lookahead, len(order))):
            for j in inputs[order[q]]:
                if has_grad[j] and not dy_alloc[j]:
                    grads[j] = ysz[j]
            room = sum(grads.values())
            for j in need[order[q]]:
                if valid[j] or not host[j]:
                    continue
                evict(ysz[j] + room, q)
                if live + ysz[j] + room > budget:  # type: ignore[operator]
                    return
                add(Step(A, 5 * j))
                add(Step(PRE, 5 * j))
                live += ysz[j]
                valid[j] = cached[j] = True
                heapq.heappush(heap, (-q, j))

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
                    if caching:
                        evict(ysz[j], -2)
                    add(Step(A, 5 * j + _DY))
                    live += ysz[j]
                    dy_alloc[j] = True
            if caching and reserve is not None and reserve[i]:
                evict(reserve[i], pos + lookahead)
            add(Step(BW, i))
            for j in cur:
                ptr[j] += 1
            if not free:
                continue
            if has_grad[i]:
                add(Step(F, 5 * i + _DY))
                live -= ysz[i]
            for j in cur:
                nxt = next_use(j)
                if caching:
                    if nxt is None or j in offload or j in drop:
                        release(j)
                elif nxt is None or (host[j] and nxt > pos + 1) or (j in mc and nxt > pos + 1):
                    release(j)
            if caching:
                prefetch_ahead(pos)
    finally:
        sys.setrecursionlimit(limit)
    if caching:
        drop_off = {k for k in off_at if not evicted[steps[k].arg // 5]}
        steps = [s for k, s in enumerate(steps) if k not in drop_off]
    return steps
