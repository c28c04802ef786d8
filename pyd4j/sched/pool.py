"""Policy 2, unified tensor pool (UTP): liveness + offloading CONV outputs to host memory.

Each CONV output is copied to pinned host memory (the disk tier when host memory is short; see
the simulator) as soon as it is produced, released after its last forward use, and prefetched
back ahead of the backward step that needs it. Copies run on their own streams, overlapped with
compute. Two passes make the overlap real without raising the peak:

- `hoist_prefetches` issues each prefetch up to `lookahead` compute steps early, as long as
  live bytes stay under a cap (the plan's own peak, or the budget);
- `lru_cache` (with a device budget) keeps released tensors on the device as a cache and
  evicts the least recently used when an allocation would exceed the budget, so a later
  prefetch of a cached tensor costs nothing.
"""

from __future__ import annotations

from collections import OrderedDict

from pyd4j.sched.emit import Decisions, emit
from pyd4j.sched.graph import Graph, LayerType
from pyd4j.sched.plan import COMPUTE_OPS, Op, Plan, Step, aligned
from pyd4j.sched.simulator import live_timeline


def conv_outputs(graph: Graph) -> frozenset[int]:
    return frozenset(l.id for l in graph.layers if l.type is LayerType.CONV)


def plan_utp(graph: Graph, budget: int | None = None, lookahead: int = 2) -> Plan:
    """Liveness + offload/prefetch of CONV outputs (+ LRU cache under `budget`)."""
    steps = emit(graph, Decisions(free=True, offload=conv_outputs(graph)))
    plan = Plan(graph, "utp", steps, graph.nbytes_table())
    return finish_pool(plan, budget, lookahead)


def finish_pool(plan: Plan, budget: int | None, lookahead: int, floor: int = 0) -> Plan:
    """Apply prefetch hoisting (and the LRU cache when a budget is given)."""
    if budget is not None:
        plan.steps = lru_cache(plan, budget)
    cap = max(max(live_timeline(plan), default=0), floor)
    if budget is not None:
        cap = max(cap, budget)
    plan.steps = hoist_prefetches(plan, cap, lookahead)
    return plan


def hoist_prefetches(plan: Plan, cap: int, lookahead: int) -> list[Step]:
    """Move each ALLOC+PREFETCH pair up to `lookahead` compute records earlier while the live
    bytes on the way stay <= `cap`, never before the tensor's previous FREE or OFFLOAD."""
    steps = plan.steps
    if lookahead <= 0:
        return steps
    asz = [aligned(b) for b in plan.nbytes]
    live = live_timeline(plan)
    m = len(steps)
    barrier = [-1] * len(plan.nbytes)  # last record that must stay before a re-alloc
    pos_key: list[float] = [float(k) for k in range(m)]
    for k in range(m - 1):
        s = steps[k]
        if s.op == Op.FREE or s.op == Op.OFFLOAD:
            barrier[s.arg] = k
            continue
        if s.op != Op.ALLOC or steps[k + 1].op != Op.PREFETCH or steps[k + 1].arg != s.arg:
            continue
        t, size = s.arg, asz[s.arg]
        seen = 0
        best = k
        j = k - 1
        while j > barrier[t]:
            sj = steps[j]
            if sj.op in COMPUTE_OPS:
                if seen == lookahead:
                    break
                seen += 1
            if sj.op == Op.FORWARD:
                break  # stay in the backward pass
            if live[j] + size > cap:
                break
            if sj.op in COMPUTE_OPS:
                best = j
            j -= 1
        if best < k:
            for q in range(best, k):
                live[q] += size
            pos_key[k] = best - 0.5 + k * 1e-9
            pos_key[k + 1] = best - 0.5 + k * 1e-9 + 1e-10
    order = sorted(range(m), key=pos_key.__getitem__)
    return [steps[k] for k in order]


def lru_cache(plan: Plan, budget: int) -> list[Step]:
    """Turn FREEs of tensors that will be prefetched again into cache entries; evict least
    recently used entries (emitting their FREE) only when an allocation would exceed `budget`.
    A PREFETCH of a cached tensor becomes a hit: its ALLOC+PREFETCH records disappear."""
    steps = plan.steps
    asz = [aligned(b) for b in plan.nbytes]
    m = len(steps)
    refetched = set()
    for k in range(m):
        if steps[k].op == Op.PREFETCH:
            refetched.add(steps[k].arg)
    # a FREE is cacheable if a later PREFETCH of the same tensor exists
    next_pre: dict[int, int] = {}
    cacheable = [False] * m
    for k in range(m - 1, -1, -1):
        s = steps[k]
        if s.op == Op.PREFETCH:
            next_pre[s.arg] = k
        elif s.op == Op.FREE and s.arg in next_pre:
            cacheable[k] = True
    out: list[Step] = []
    cache: OrderedDict[int, None] = OrderedDict()
    live = 0
    skip = 0
    for k in range(m):
        if skip:
            skip -= 1
            continue
        s = steps[k]
        if s.op == Op.ALLOC:
            t = s.arg
            if t in cache and k + 1 < m and steps[k + 1].op == Op.PREFETCH and steps[k + 1].arg == t:
                cache.pop(t)  # hit: still on the device
                skip = 1
                continue
            while live + asz[t] > budget and cache:
                victim, _ = cache.popitem(last=False)
                out.append(Step(Op.FREE, victim))
                live -= asz[victim]
            live += asz[t]
        elif s.op == Op.FREE:
            if cacheable[k]:
                cache[s.arg] = None
                continue
            if s.arg in cache:
                cache.pop(s.arg)
            live -= asz[s.arg]
        elif s.op in COMPUTE_OPS:
            for t in _reads(plan, s):
                if t in cache:
                    cache.move_to_end(t)
        out.append(s)
    return out


def _reads(plan: Plan, s: Step) -> tuple[int, ...]:
    layer = plan.graph.layers[s.arg]
    ids = tuple(5 * j for j in layer.inputs)
    return ids + (5 * s.arg,) if s.op == Op.BACKWARD else ids
