"""Turns a policy's per-tensor decisions into schedule records (the one place that writes them).

A policy decides, per layer output Y:
- whether dead tensors are freed at all (`free`; the baseline keeps everything),
- `offload`: copied to host right after it is produced, freed after its last forward use and
  prefetched when a backward step (or a recomputation) needs it again,
- `drop`: freed after its last forward use and rebuilt by RECOMPUTE records in the backward
  pass; `memory_centric` (a subset of `drop`) rebuilds only what the current step needs and
  frees intermediates at once, the rest (speed-centric) keeps rebuilt tensors until their last
  backward use.

What each step reads and writes comes from the graph's dependency model
(`pyd4j.sched.deps`): a backward step needs the outputs its profile entry reads, the gradient
of its output when it reads dy, the gradients of its inputs it writes (allocated at the first
contribution) and, when the profile does not keep parameter gradients, its dW (allocated right
before it, freed right after: BACKWARD applies the update). A Y no backward step reads is freed
after its last forward use; a Y read by the rebuild of a dropped layer is needed wherever that
layer is. In-place steps the model allows are written as the compute record followed by a MOVE
(forward: only when the input is neither offloaded nor dropped and the output is not dropped).
Persistent per-layer state is allocated with the parameters. What a layer's forward step keeps
for its own backward step (`saved`: DL4J's batch-norm xMu/xHat, dropout masks; the tensor id of
its state) is allocated right before each FORWARD/RECOMPUTE of the layer and freed right after
its BACKWARD; a dropped layer frees it with its output after the forward pass, and a BACKWARD
whose saved tensor is gone is preceded by the RECOMPUTE that rebuilds it (its output is freed
again at once when nothing else needs it).

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
from pyd4j.sched.plan import Kind, Op, Step, state_tid

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


def y_uses(graph: Graph, order: list[int], drop: frozenset[int] | set[int]) -> list[list[int]]:
    """uses[j]: positions in `order` of the backward steps that need Y of j -- read directly, or
    through the rebuild of a dropped layer that reads it (its output, or what it keeps for its
    own backward step) (sorted)."""
    d = graph.deps
    n = len(graph)
    direct: list[list[int]] = [[] for _ in range(n)]
    for pos, i in enumerate(order):
        for j in d.bwd_reads[i]:
            direct[j].append(pos)
    bpos = {i: pos for pos, i in enumerate(order)}
    uses: list[list[int]] = [[] for _ in range(n)]
    cons = graph.consumers

    def rebuilt_at(c: int) -> list[int]:
        if d.saved_bytes[c] and c in bpos:
            return sorted(set(uses[c]) | {bpos[c]})
        return uses[c]

    for j in range(n - 1, -1, -1):
        extra = [r for c in cons[j] if c in drop and j in d.rc_reads[c] and (r := rebuilt_at(c))]
        if extra:
            uses[j] = sorted(set(direct[j]).union(*extra))
        else:
            uses[j] = direct[j]
    return uses


def emit(graph: Graph, dec: Decisions, budget: int | None = None,
         reserve: list[int] | None = None, lookahead: int = 2) -> list[Step]:
    """Schedule records for one training iteration under `dec` (with the tensor cache when a
    `budget` is given; see the module docstring)."""
    layers = graph.layers
    n = len(layers)
    cons = graph.consumers
    d = graph.deps
    inputs = [tuple(dict.fromkeys(layer.inputs)) for layer in layers]
    offload, drop, mc, free = dec.offload, dec.drop, dec.memory_centric, dec.free
    caching = budget is not None and free
    steps: list[Step] = []
    add = steps.append
    new, S = tuple.__new__, Step  # records built without the NamedTuple's Python __new__
    A, F, OFF, PRE, FW, BW, RC, MV = (Op.ALLOC, Op.FREE, Op.OFFLOAD, Op.PREFETCH, Op.FORWARD,
                                      Op.BACKWARD, Op.RECOMPUTE, Op.MOVE)
    ysz, psz = d.ysz, d.psz
    keep_dw = d.keep_dw
    live = 0
    for layer in layers:
        if layer.param_shapes:
            base = 5 * layer.id
            add(new(S, (A, base + _W, 0, 0, -1)))
            if keep_dw:
                add(new(S, (A, base + _DW, 0, 0, -1)))
            if d.asz[base + _M]:   # M, the updater's state: none under a stateless updater (Sgd, NoOp)
                add(new(S, (A, base + _M, 0, 0, -1)))
            live += (2 if keep_dw else 1) * psz[layer.id] + d.asz[base + _M]
    for i, nbytes in enumerate(d.state_bytes):
        if nbytes:
            add(new(S, (A, state_tid(n, i), 0, 0, -1)))
            live += nbytes
    ws_fwd, ws_bwd, ws_rc = d.ws_fwd, d.ws_bwd, d.ws_rc
    saved = d.saved_bytes
    saved_live = [False] * n

    def keep_saved(i: int) -> None:
        # the forward/recompute step of i is about to write what it keeps for its backward
        if saved[i] and not saved_live[i]:
            alloc(state_tid(n, i), saved[i])
            saved_live[i] = True

    def drop_saved(i: int) -> None:
        nonlocal live
        if saved[i] and saved_live[i] and free:
            add(new(S, (F, state_tid(n, i), 0, 0, -1)))
            live -= saved[i]
            saved_live[i] = False

    def room(i: int, ws: list[int]) -> int:
        return ws[i] + (reserve[i] if reserve is not None else 0)

    valid = [False] * n
    host = [False] * n
    cached = [False] * n  # on the device, released, evictable (tensor cache)
    evicted = [False] * n  # its OFFLOAD record is kept
    heap: list[tuple[int, int]] = []  # (-next use, layer) of cache entries
    off_at: list[int] = []  # indexes of OFFLOAD records (cache mode: kept only if evicted)
    remaining = [len(c) for c in cons]

    order = backward_order(graph)
    need = [()] * n
    for i in order:
        need[i] = d.bwd_reads[i]
    uses = y_uses(graph, order, drop)
    at_pos: list[list[int]] = [[] for _ in order]
    for j in range(n):
        for p in uses[j]:
            at_pos[p].append(j)
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
            add(new(S, (F, 5 * j, 0, 0, -1)))
            live -= ysz[j]
            if j in offload:
                host[j] = evicted[j] = True

    def alloc(t: int, nbytes: int) -> None:
        nonlocal live
        if caching:
            evict(nbytes, -2)
        add(new(S, (A, t, 0, 0, -1)))
        live += nbytes

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
        add(new(S, (F, 5 * j, 0, 0, -1)))
        live -= ysz[j]

    fwd_inplace = [j if j >= 0 and j not in offload and j not in drop and i not in drop else -1
                   for i, j in enumerate(d.fwd_inplace)]
    for i in range(n):
        j = fwd_inplace[i]
        keep_saved(i)
        if j >= 0:  # the output takes over its input's buffer
            if caching and room(i, ws_fwd):
                evict(room(i, ws_fwd), -1)
            add(new(S, (FW, i, 0, 0, -1)))
            add(new(S, (MV, 5 * i, 0, 0, 5 * j)))
            valid[j] = False
            live += ysz[i] - ysz[j]
        else:
            alloc(5 * i, ysz[i])
            if caching and room(i, ws_fwd):
                evict(room(i, ws_fwd), -1)
            add(new(S, (FW, i, 0, 0, -1)))
        valid[i] = True
        if i in offload:
            off_at.append(len(steps))
            add(new(S, (OFF, 5 * i, 0, 0, -1)))
            if not caching:
                host[i] = True
        if free:
            for j in inputs[i]:
                remaining[j] -= 1
                if (remaining[j] == 0 and valid[j]
                        and (j in offload or j in drop or not uses[j])):
                    release(j)
                    if j in drop:  # rebuilt with its output before its backward step
                        drop_saved(j)
            if not cons[i] and not uses[i]:
                release(i)

    pinned: dict[int, int] = {}
    dy_alloc = [False] * n
    has_grad = [graph.has_grad(i) for i in range(n)]

    def release_intermediate(u: int) -> None:
        # u was materialised only to rebuild another tensor during this step: recoverable
        # intermediates of memory-centric rebuilds go at once (prefetch hoisting brings host
        # copies back early where memory allows); the rest waits for the sweep after the step
        if caching:
            if u in offload or u in drop:
                release(u)
        elif u in mc or host[u]:
            release(u)

    def materialize(j: int, cur: tuple[int, ...], pos: int) -> None:
        if valid[j]:
            cached[j] = False  # a hit: in use again
            return
        if host[j]:
            alloc(5 * j, ysz[j])
            add(new(S, (PRE, 5 * j, 0, 0, -1)))
        elif j in drop:
            ins = d.rc_reads[j]
            for u in ins:  # pinned: a nested rebuild must not release them
                pinned[u] = pinned.get(u, 0) + 1
            for u in ins:
                materialize(u, cur, pos)
            alloc(5 * j, ysz[j])
            keep_saved(j)
            if caching and room(j, ws_rc):
                evict(room(j, ws_rc), pos + lookahead)
            add(new(S, (RC, j, 0, 0, -1)))
            valid[j] = True
            for u in ins:
                pinned[u] -= 1
            for u in ins:
                if u not in cur and valid[u] and not pinned.get(u):
                    release_intermediate(u)
            return
        else:
            raise RuntimeError(f"plan lost tensor {layers[j].name}:Y (neither kept, offloaded "
                               "nor recomputable); this is a policy bug")
        valid[j] = True

    def rebuild_saved(i: int, cur: tuple[int, ...], pos: int) -> None:
        # BACKWARD of i needs what its forward step kept: run the forward step again
        nonlocal live
        ins = d.rc_reads[i]
        for u in ins:
            pinned[u] = pinned.get(u, 0) + 1
        for u in ins:
            materialize(u, cur, pos)
        temporary = not valid[i]
        if temporary:
            alloc(5 * i, ysz[i])
        keep_saved(i)
        if caching and room(i, ws_rc):
            evict(room(i, ws_rc), pos + lookahead)
        add(new(S, (RC, i, 0, 0, -1)))
        valid[i] = True
        for u in ins:
            pinned[u] -= 1
        for u in ins:
            if u not in cur and valid[u] and not pinned.get(u):
                release_intermediate(u)
        if temporary and i not in cur:
            add(new(S, (F, 5 * i, 0, 0, -1)))
            live -= ysz[i]
            valid[i] = cached[i] = False

    def prefetch_ahead(pos: int) -> None:
        # bring evicted tensors of the next `lookahead` steps back early, evicting only cache
        # entries needed after them, and leaving room for the gradients those steps allocate
        nonlocal live
        grads: dict[int, int] = {}
        dw = 0
        for q in range(pos + 1, min(pos + 1 + lookahead, len(order))):
            iq = order[q]
            for j in d.bwd_dx[iq]:
                if has_grad[j] and not dy_alloc[j]:
                    grads[j] = ysz[j]
            if d.bwd_dw[iq] and not keep_dw:
                dw = max(dw, psz[iq])
            extra = sum(grads.values()) + dw
            for j in need[iq]:
                if valid[j] or not host[j]:
                    continue
                evict(ysz[j] + extra, q)
                if live + ysz[j] + extra > budget:  # type: ignore[operator]
                    return
                add(new(S, (A, 5 * j, 0, 0, -1)))
                add(new(S, (PRE, 5 * j, 0, 0, -1)))
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
            if saved[i] and not saved_live[i]:
                rebuild_saved(i, cur, pos)
            ip = d.bwd_inplace[i]
            if ip is not None:
                tj, src = ip
                if dy_alloc[tj] or (src == 5 * i + _Y and (host[i] or i in offload
                                                           or not valid[i])):
                    ip = None
            for j in d.bwd_dx[i]:  # after materialising: gradients are not live during rebuilds
                if not dy_alloc[j] and (ip is None or j != ip[0]):
                    alloc(5 * j + _DY, ysz[j])
                    dy_alloc[j] = True
            dw = d.bwd_dw[i] and not keep_dw
            if dw:
                alloc(5 * i + _DW, psz[i])
            if caching and room(i, ws_bwd):
                evict(room(i, ws_bwd), pos + lookahead)
            add(new(S, (BW, i, 0, 0, -1)))
            moved_dy = False
            if ip is not None:
                tj, src = ip
                add(new(S, (MV, 5 * tj + _DY, 0, 0, src)))
                dy_alloc[tj] = True
                if src == 5 * i + _Y:
                    valid[i] = cached[i] = False
                    live += ysz[tj] - ysz[i]
                else:
                    moved_dy = True
                    live += ysz[tj] - ysz[i]
            if dw:
                add(new(S, (F, 5 * i + _DW, 0, 0, -1)))
                live -= psz[i]
            drop_saved(i)
            for j in at_pos[pos]:
                ptr[j] += 1
            if not free:
                continue
            if has_grad[i] and dy_alloc[i] and not moved_dy:
                add(new(S, (F, 5 * i + _DY, 0, 0, -1)))
                live -= ysz[i]
            # a host copy needed by the next step is kept, unless that step first rebuilds a
            # dropped tensor: then it comes back after the rebuild instead of sitting through it
            rebuild_next = pos + 1 < len(order) and any(
                u in drop and not valid[u] for u in need[order[pos + 1]])
            for j in at_pos[pos]:
                if not valid[j]:
                    continue
                nxt = next_use(j)
                if caching:
                    if nxt is None or j in offload or j in drop:
                        release(j)
                elif (nxt is None or (host[j] and (nxt > pos + 1 or rebuild_next))
                      or (j in mc and nxt > pos + 1)):
                    release(j)
            if caching:
                prefetch_ahead(pos)
    finally:
        sys.setrecursionlimit(limit)
    if caching:
        drop_off = {k for k in off_at if not evicted[steps[k].arg // 5]}
        steps = [s for k, s in enumerate(steps) if k not in drop_off]
    return steps
