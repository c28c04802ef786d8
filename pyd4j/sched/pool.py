"""Policy 2, unified tensor pool (UTP): liveness + offloading CONV outputs to host memory.

Each CONV output is copied to pinned host memory (the disk tier when host memory is short; see
the simulator) as soon as it is produced, released after its last forward use, and prefetched
back ahead of the backward step that needs it. Copies run on their own streams, overlapped with
compute.

- Minimum memory (no budget): `hoist_prefetches` issues each prefetch up to `lookahead` compute
  steps early, as long as live bytes stay under the plan's own peak.
- Under a device budget: the tensor cache (`pyd4j.sched.emit`) keeps released tensors on the
  device and evicts, offloads and prefetches only what the budget forces, prefetching evicted
  tensors `lookahead` steps ahead.
"""

from __future__ import annotations

from pyd4j.sched.emit import Decisions, emit
from pyd4j.sched.graph import Graph, LayerType
from pyd4j.sched.plan import Op, Plan, Step, aligned
from pyd4j.sched.simulator import live_timeline


def conv_outputs(graph: Graph) -> frozenset[int]:
    """Outputs of CONV layers -- or of the in-place steps that take over their buffers."""
    owner = graph.deps.inplace_owner()
    return frozenset(owner[l.id] for l in graph.layers if l.type is LayerType.CONV)


def plan_utp(graph: Graph, budget: int | None = None, lookahead: int = 2) -> Plan:
    """Liveness + offload/prefetch of CONV outputs (tensor cache under `budget`)."""
    return pooled_plan(graph, "utp", Decisions(free=True, offload=conv_outputs(graph)), budget,
                       lookahead)


def pooled_plan(graph: Graph, policy: str, dec: Decisions, budget: int | None, lookahead: int,
                reserve: list[int] | None = None, notes: dict | None = None) -> Plan:
    """Records for `dec`: minimum memory with hoisted prefetches, or the tensor cache under
    `budget` (keeping `reserve[i]` bytes free for layer i's compute steps)."""
    steps = emit(graph, dec, budget, reserve, lookahead)
    plan = Plan(graph, policy, steps, graph.nbytes_table(), notes or {})
    if budget is None:
        plan.steps = hoist_prefetches(plan, max(live_timeline(plan), default=0), lookahead)
    return plan


def hoist_prefetches(plan: Plan, cap: int, lookahead: int) -> list[Step]:
    """Move each ALLOC+PREFETCH pair up to `lookahead` compute records earlier while the live
    bytes on the way stay <= `cap`, never before the tensor's previous FREE or OFFLOAD."""
    steps = plan.steps
    if lookahead <= 0:
        return steps
    d = plan.graph.deps
    asz = d.asz if plan.nbytes == d.nbytes else [aligned(b) for b in plan.nbytes]
    live = live_timeline(plan)
    m = len(steps)
    ops = [int(s[0]) for s in steps]
    args = [s[1] for s in steps]
    A, F, OFF, PRE, FW = (int(o) for o in (Op.ALLOC, Op.FREE, Op.OFFLOAD, Op.PREFETCH,
                                            Op.FORWARD))
    compute = (int(Op.FORWARD), int(Op.BACKWARD), int(Op.RECOMPUTE))
    barrier = [-1] * len(plan.nbytes)  # last record that must stay before a re-alloc
    pos_key: list[float] = [float(k) for k in range(m)]
    for k in range(m - 1):
        op = ops[k]
        if op == F or op == OFF:
            barrier[args[k]] = k
            continue
        if op != A or ops[k + 1] != PRE or args[k + 1] != args[k]:
            continue
        t = args[k]
        size = asz[t]
        seen = 0
        best = k
        j = k - 1
        stop = barrier[t]
        while j > stop:
            oj = ops[j]
            is_compute = oj in compute
            if is_compute:
                if seen == lookahead:
                    break
                seen += 1
            if oj == FW:
                break  # stay in the backward pass
            if live[j] + size > cap:
                break
            if is_compute:
                best = j
            j -= 1
        if best < k:
            for q in range(best, k):
                live[q] += size
            pos_key[k] = best - 0.5 + k * 1e-9
            pos_key[k + 1] = best - 0.5 + k * 1e-9 + 1e-10
    order = sorted(range(m), key=pos_key.__getitem__)
    return [steps[k] for k in order]
