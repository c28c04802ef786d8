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
(`pyd4j.sched.deps`): a backward step needs the outputs its framework entry reads, the gradient
of its output when it reads dy, the gradients of its inputs it writes (allocated at the first
contribution) and, when the framework does not keep parameter gradients, its dW (allocated right
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
    e = _Emitter(graph, dec, budget, reserve, lookahead)
    e.resident()
    e.forward_pass()
    limit = sys.getrecursionlimit()
    if e.n + 100 > limit:
        sys.setrecursionlimit(e.n + 100)
    try:
        e.backward_pass()
    finally:
        sys.setrecursionlimit(limit)
    steps = e.steps
    if e.caching:   # OFFLOAD records of tensors never evicted are dropped
        drop_off = {k for k in e.off_at if not e.evicted[steps[k].arg // 5]}
        steps = [s for k, s in enumerate(steps) if k not in drop_off]
    return steps


_NEW, _S = tuple.__new__, Step   # records built without the NamedTuple's Python __new__
A, F, OFF, PRE, FW, BW, RC, MV = (Op.ALLOC, Op.FREE, Op.OFFLOAD, Op.PREFETCH, Op.FORWARD, Op.BACKWARD,
                                  Op.RECOMPUTE, Op.MOVE)


class _Emitter:
    """The state of one `emit`: records written so far, bytes live, and each output's whereabouts
    (valid on the device, on the host, a cache entry, evicted)."""

    def __init__(self, graph: Graph, dec: Decisions, budget: int | None, reserve: list[int] | None,
                 lookahead: int) -> None:
        self.graph, self.budget, self.reserve, self.lookahead = graph, budget, reserve, lookahead
        self.layers = layers = graph.layers
        self.n = n = len(layers)
        self.cons = graph.consumers
        self.d = d = graph.deps
        self.inputs = [tuple(dict.fromkeys(layer.inputs)) for layer in layers]
        self.offload, self.drop, self.mc, self.free = dec.offload, dec.drop, dec.memory_centric, dec.free
        self.caching = budget is not None and dec.free
        self.steps: list[Step] = []
        self.ysz, self.psz, self.keep_dw = d.ysz, d.psz, d.keep_dw
        self.live = 0
        self.saved = d.saved_bytes
        self.saved_live = [False] * n
        self.valid = [False] * n
        self.host = [False] * n
        self.cached = [False] * n    # on the device, released, evictable (tensor cache)
        self.evicted = [False] * n   # its OFFLOAD record is kept
        self.heap: list[tuple[int, int]] = []   # (-next use, layer) of cache entries
        self.off_at: list[int] = []   # indexes of OFFLOAD records (cache mode: kept only if evicted)
        self.remaining = [len(c) for c in self.cons]
        self.order = order = backward_order(graph)
        self.need: list[tuple[int, ...]] = [()] * n
        for i in order:
            self.need[i] = d.bwd_reads[i]
        self.uses = uses = y_uses(graph, order, self.drop)
        self.at_pos: list[list[int]] = [[] for _ in order]
        for j in range(n):
            for p in uses[j]:
                self.at_pos[p].append(j)
        self.ptr = [0] * n
        self.pinned: dict[int, int] = {}
        self.dy_alloc = [False] * n
        self.has_grad = [graph.has_grad(i) for i in range(n)]

    def add(self, op: Op, t: int, src: int = -1) -> None:
        self.steps.append(_NEW(_S, (op, t, 0, 0, src)))

    def resident(self) -> None:
        """Parameters, their gradients when kept, the updater's state and persistent layer state."""
        d = self.d
        for layer in self.layers:
            if layer.param_shapes:
                base = 5 * layer.id
                self.add(A, base + _W)
                if self.keep_dw:
                    self.add(A, base + _DW)
                if d.asz[base + _M]:   # M, the updater's state: none under a stateless updater (Sgd, NoOp)
                    self.add(A, base + _M)
                self.live += (2 if self.keep_dw else 1) * self.psz[layer.id] + d.asz[base + _M]
        for i, nbytes in enumerate(d.state_bytes):
            if nbytes:
                self.add(A, state_tid(self.n, i))
                self.live += nbytes

    def keep_saved(self, i: int) -> None:
        """The forward/recompute step of i is about to write what it keeps for its backward step."""
        if self.saved[i] and not self.saved_live[i]:
            self.alloc(state_tid(self.n, i), self.saved[i])
            self.saved_live[i] = True

    def drop_saved(self, i: int) -> None:
        if self.saved[i] and self.saved_live[i] and self.free:
            self.add(F, state_tid(self.n, i))
            self.live -= self.saved[i]
            self.saved_live[i] = False

    def room(self, i: int, ws: list[int]) -> int:
        return ws[i] + (self.reserve[i] if self.reserve is not None else 0)

    def next_use(self, j: int) -> int | None:
        u, p = self.uses[j], self.ptr[j]
        return u[p] if p < len(u) else None

    def evict(self, nbytes: int, after: int) -> None:
        """Free cache entries (furthest next use first, only those used after `after`) until
        nbytes more fit the budget."""
        heap, cached, valid = self.heap, self.cached, self.valid
        while self.live + nbytes > self.budget and heap:  # type: ignore[operator]
            key, j = heap[0]
            if not cached[j] or -key != self.next_use(j):
                heapq.heappop(heap)  # stale entry
                continue
            if -key <= after:
                return
            heapq.heappop(heap)
            cached[j] = valid[j] = False
            self.add(F, 5 * j)
            self.live -= self.ysz[j]
            if j in self.offload:
                self.host[j] = self.evicted[j] = True

    def alloc(self, t: int, nbytes: int) -> None:
        if self.caching:
            self.evict(nbytes, -2)
        self.add(A, t)
        self.live += nbytes

    def release(self, j: int) -> None:
        """j is not needed until its next use: free it, or keep it as a cache entry."""
        nxt = self.next_use(j)
        if self.caching and nxt is not None:
            if not self.cached[j]:
                self.cached[j] = True
                heapq.heappush(self.heap, (-nxt, j))
            return
        self.cached[j] = self.valid[j] = False
        self.add(F, 5 * j)
        self.live -= self.ysz[j]

    # -- the forward pass ---------------------------------------------------------------------
    def forward_pass(self) -> None:
        d, offload, drop, ysz, valid = self.d, self.offload, self.drop, self.ysz, self.valid
        fwd_inplace = [j if j >= 0 and j not in offload and j not in drop and i not in drop else -1
                       for i, j in enumerate(d.fwd_inplace)]
        for i in range(self.n):
            j = fwd_inplace[i]
            self.keep_saved(i)
            if j >= 0:  # the output takes over its input's buffer
                if self.caching and self.room(i, d.ws_fwd):
                    self.evict(self.room(i, d.ws_fwd), -1)
                self.add(FW, i)
                self.add(MV, 5 * i, 5 * j)
                valid[j] = False
                self.live += ysz[i] - ysz[j]
            else:
                self.alloc(5 * i, ysz[i])
                if self.caching and self.room(i, d.ws_fwd):
                    self.evict(self.room(i, d.ws_fwd), -1)
                self.add(FW, i)
            valid[i] = True
            if i in offload:
                self.off_at.append(len(self.steps))
                self.add(OFF, 5 * i)
                if not self.caching:
                    self.host[i] = True
            if self.free:
                self.release_inputs(i)

    def release_inputs(self, i: int) -> None:
        """After the forward step of i: inputs it was the last reader of, and its own output if nothing
        reads it, go (or become cache entries)."""
        uses, offload, drop = self.uses, self.offload, self.drop
        for j in self.inputs[i]:
            self.remaining[j] -= 1
            if self.remaining[j] == 0 and self.valid[j] and (j in offload or j in drop or not uses[j]):
                self.release(j)
                if j in drop:  # rebuilt with its output before its backward step
                    self.drop_saved(j)
        if not self.cons[i] and not uses[i]:
            self.release(i)

    # -- rebuilding what the backward pass needs ------------------------------------------------
    def release_intermediate(self, u: int) -> None:
        """u was materialised only to rebuild another tensor during this step: recoverable
        intermediates of memory-centric rebuilds go at once (prefetch hoisting brings host copies
        back early where memory allows); the rest waits for the sweep after the step."""
        if self.caching:
            if u in self.offload or u in self.drop:
                self.release(u)
        elif u in self.mc or self.host[u]:
            self.release(u)

    def rebuild(self, j: int, cur: tuple[int, ...], pos: int) -> None:
        """RECOMPUTE of j after materialising what it reads (pinned: a nested rebuild must not
        release them); the inputs only this rebuild needed are released after it."""
        ins, pinned = self.d.rc_reads[j], self.pinned
        for u in ins:
            pinned[u] = pinned.get(u, 0) + 1
        for u in ins:
            self.materialize(u, cur, pos)
        temporary = not self.valid[j]
        if temporary:
            self.alloc(5 * j, self.ysz[j])
        self.keep_saved(j)
        if self.caching and self.room(j, self.d.ws_rc):
            self.evict(self.room(j, self.d.ws_rc), pos + self.lookahead)
        self.add(RC, j)
        self.valid[j] = True
        for u in ins:
            pinned[u] -= 1
        for u in ins:
            if u not in cur and self.valid[u] and not pinned.get(u):
                self.release_intermediate(u)
        return temporary

    def materialize(self, j: int, cur: tuple[int, ...], pos: int) -> None:
        if self.valid[j]:
            self.cached[j] = False  # a hit: in use again
            return
        if self.host[j]:
            self.alloc(5 * j, self.ysz[j])
            self.add(PRE, 5 * j)
        elif j in self.drop:
            self.rebuild(j, cur, pos)
            return
        else:
            raise RuntimeError(f"plan lost tensor {self.layers[j].name}:Y (neither kept, offloaded "
                               "nor recomputable); this is a policy bug")
        self.valid[j] = True

    def rebuild_saved(self, i: int, cur: tuple[int, ...], pos: int) -> None:
        """BACKWARD of i needs what its forward step kept: run the forward step again (its output,
        if it had to be made for that, goes again when the step does not read it)."""
        if self.rebuild(i, cur, pos) and i not in cur:
            self.add(F, 5 * i)
            self.live -= self.ysz[i]
            self.valid[i] = self.cached[i] = False

    def prefetch_ahead(self, pos: int) -> None:
        """Bring evicted tensors of the next `lookahead` steps back early, evicting only cache
        entries needed after them, and leaving room for the gradients those steps allocate."""
        d, order, ysz, valid, host = self.d, self.order, self.ysz, self.valid, self.host
        grads: dict[int, int] = {}
        dw = 0
        for q in range(pos + 1, min(pos + 1 + self.lookahead, len(order))):
            iq = order[q]
            for j in d.bwd_dx[iq]:
                if self.has_grad[j] and not self.dy_alloc[j]:
                    grads[j] = ysz[j]
            if d.bwd_dw[iq] and not self.keep_dw:
                dw = max(dw, self.psz[iq])
            extra = sum(grads.values()) + dw
            for j in self.need[iq]:
                if valid[j] or not host[j]:
                    continue
                self.evict(ysz[j] + extra, q)
                if self.live + ysz[j] + extra > self.budget:  # type: ignore[operator]
                    return
                self.add(A, 5 * j)
                self.add(PRE, 5 * j)
                self.live += ysz[j]
                valid[j] = self.cached[j] = True
                heapq.heappush(self.heap, (-q, j))

    # -- the backward pass ----------------------------------------------------------------------
    def backward_pass(self) -> None:
        for pos, i in enumerate(self.order):
            moved_dy = self.backward_step(pos, i)
            for j in self.at_pos[pos]:
                self.ptr[j] += 1
            if self.free:
                self.after_step(pos, i, moved_dy)

    def backward_step(self, pos: int, i: int) -> bool:
        """BACKWARD of i with what it reads, the gradients it writes and its dW; whether it wrote its
        input's gradient over its own (a MOVE of its DY)."""
        d, ysz, dy_alloc = self.d, self.ysz, self.dy_alloc
        cur = self.need[i]
        for j in cur:
            self.materialize(j, cur, pos)
        if self.saved[i] and not self.saved_live[i]:
            self.rebuild_saved(i, cur, pos)
        ip = d.bwd_inplace[i]
        if ip is not None:
            tj, src = ip
            if dy_alloc[tj] or (src == 5 * i + _Y and (self.host[i] or i in self.offload or not self.valid[i])):
                ip = None
        for j in d.bwd_dx[i]:  # after materialising: gradients are not live during rebuilds
            if not dy_alloc[j] and (ip is None or j != ip[0]):
                self.alloc(5 * j + _DY, ysz[j])
                dy_alloc[j] = True
        dw = d.bwd_dw[i] and not self.keep_dw
        if dw:
            self.alloc(5 * i + _DW, self.psz[i])
        if self.caching and self.room(i, d.ws_bwd):
            self.evict(self.room(i, d.ws_bwd), pos + self.lookahead)
        self.add(BW, i)
        moved_dy = False
        if ip is not None:
            tj, src = ip
            self.add(MV, 5 * tj + _DY, src)
            dy_alloc[tj] = True
            if src == 5 * i + _Y:
                self.valid[i] = self.cached[i] = False
            else:
                moved_dy = True
            self.live += ysz[tj] - ysz[i]
        if dw:
            self.add(F, 5 * i + _DW)
            self.live -= self.psz[i]
        self.drop_saved(i)
        return moved_dy

    def after_step(self, pos: int, i: int, moved_dy: bool) -> None:
        """After BACKWARD of i: its gradient goes, and the outputs its step was the last user of
        before their next use (a host copy needed by the next step is kept, unless that step first
        rebuilds a dropped tensor: then it comes back after the rebuild instead of sitting through it)."""
        order, drop, valid = self.order, self.drop, self.valid
        if self.has_grad[i] and self.dy_alloc[i] and not moved_dy:
            self.add(F, 5 * i + _DY)
            self.live -= self.ysz[i]
        rebuild_next = pos + 1 < len(order) and any(u in drop and not valid[u] for u in self.need[order[pos + 1]])
        for j in self.at_pos[pos]:
            if not valid[j]:
                continue
            nxt = self.next_use(j)
            if self.caching:
                if nxt is None or j in self.offload or j in drop:
                    self.release(j)
            elif (nxt is None or (self.host[j] and (nxt > pos + 1 or rebuild_next))
                  or (j in self.mc and nxt > pos + 1)):
                self.release(j)
        if self.caching:
            self.prefetch_ahead(pos)
