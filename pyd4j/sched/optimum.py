"""The optimal plan under a budget, and the smallest budget any plan of its class fits: a MILP.

Why: a heuristic's overhead means little without the best achievable one. The model is
Checkmate's rematerialisation (Jain et al. 2020) over pyd4j's own records and cost model, with
an offload choice per tensor and a convolution algorithm choice per step, solved exactly by
HiGHS (`highspy`).

The class of plans (what "optimal" is over): the forward pass runs every layer once, in order;
the backward pass runs the backward steps in `emit.backward_order`. Each layer output Y is
- kept on the device after its last forward use (K), or freed then;
- offloaded right after it is produced (o) -- then it returns only by PREFETCH, never by
  RECOMPUTE (an offloaded tensor is not also rebuilt);
- per backward stage p (the records before and including the p-th BACKWARD): resident on the
  device during the stage (S), brought back at its start by PREFETCH (P) or RECOMPUTE (R, from
  inputs resident in the same stage; any layer may be rebuilt, with any applicable convolution
  algorithm).
A tensor resident in a stage is counted for the whole stage (no frees inside a stage: the
per-record frees of Checkmate's full formulation are not modelled). Gradients follow the one
rule of `emit` (allocated at their first contribution, freed after their reader; in-place where
the dependency model allows). Every FORWARD/BACKWARD/RECOMPUTE of a CONV layer picks one
algorithm (time and workspace from the cost model).

Time is the simulator's (`pyd4j.sched.simulator`): three streams with its exact issue and wait
rules, written as max-plus inequalities (big-M where a record may be absent); minimising the
iteration time makes them tight. The emitted plan is replayed by the simulator: its peak is at
most the budget and its time equals the objective (after the binaries are fixed, the times are
re-solved as an LP, so the reported objective is not off by the MIP tolerances).

The variables and inequalities are `pyd4j.sched.formulation`'s; this module solves, rounds and
writes the plan.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from pyd4j.sched.bounds import resident_tensors
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.formulation import MS, Vars, build
from pyd4j.sched.graph import Graph, LayerType
from pyd4j.sched.plan import Op, Plan, Step, gc_paused

MAX_LAYERS = 80
"""Graphs above this size are refused: the MILP grows with layers x backward stages."""

class OptimumError(ValueError):
    """The MILP cannot answer (graph too large, no feasible plan, solver limit)."""


@dataclass
class Optimum:
    """A solved MILP: the plan, its objective and how the solver ended."""

    plan: Plan
    time_s: float  # the MILP objective (iteration time), re-solved with the binaries fixed
    budget: int  # the budget it was solved for (or the smallest feasible, for min_budget)
    status: str
    mip_gap: float
    solve_s: float
    stats: dict[str, Any] = field(default_factory=dict)


def _round(sol: list[float], k: int) -> int:
    return 1 if sol[k] > 0.5 else 0


def _clean(graph: Graph, v: Vars, sol: list[float], info: dict[str, Any]) -> dict[int, float]:
    """Round the binaries, drop prefetches, rebuilds, residencies and offloads nothing reads,
    and return them as fixings for the LP re-solve."""
    d = graph.deps
    order, cand = info["order"], info["cand"]
    S = {k: _round(sol, x) for k, x in v.S.items()}
    P = {k: _round(sol, x) for k, x in v.P.items()}
    R = {k: next((a for r, a, _ in rs if sol[r] > 0.5), None) for k, rs in v.R.items()}
    Tr = {k: _round(sol, x) for k, x in v.Tr.items()}
    needed: dict[tuple[int, int], bool] = {}
    for p in range(len(order) - 1, -1, -1):
        i = order[p]
        need = set(d.bwd_reads[i])
        passing: set[int] = set()  # transients a needed rebuild reads
        for j in cand[p]:  # carried to the next stage and used there without being rebuilt
            if needed.get((p + 1, j)) and not P.get((p + 1, j)) and R.get((p + 1, j)) is None:
                need.add(j)
        for j in sorted(cand[p], reverse=True):  # rebuilds that are needed need their inputs
            if R[p, j] is not None and (j in passing if Tr[p, j] else j in need):
                for u in d.rc_reads[j]:
                    (passing if Tr[p, u] else need).add(u)
        for j in cand[p]:
            needed[p, j] = j in need and not Tr[p, j]
            if Tr[p, j] and j not in passing:
                Tr[p, j] = 0
                R[p, j] = None
            if not Tr[p, j] and not needed[p, j]:
                S[p, j] = 0
                P[p, j] = 0
                R[p, j] = None
    K = {}
    for j, x in v.K.items():
        K[j] = 1 if (needed.get((0, j)) and not P.get((0, j)) and R.get((0, j)) is None) else 0
        if graph.layers[j].type is LayerType.SOFTMAX:
            K[j] = 1
    used_o = {j for (p, j), x in P.items() if x}
    fixed: dict[int, float] = {}
    for j, x in v.K.items():
        fixed[x] = K[j]
    for j, x in v.o.items():
        fixed[x] = 1.0 if j in used_o else 0.0
    for k, x in v.S.items():
        fixed[x] = S[k]
    for k, x in v.P.items():
        fixed[x] = P[k]
    for k, x in v.Tr.items():
        fixed[x] = Tr[k]
    for k, rs in v.R.items():
        for r, a, _ in rs:
            fixed[r] = 1.0 if R[k] == a else 0.0
    for zs in list(v.zf.values()) + list(v.zb.values()):
        pick = max(zs, key=lambda z: sol[z[0]])[0]
        for z, _, _ in zs:
            fixed[z] = 1.0 if z == pick else 0.0
    return fixed


def _emit(graph: Graph, v: Vars, fixed: dict[int, float], info: dict[str, Any]) -> list[Step]:
    """The plan's records from the fixed binaries (the layout the MILP's times assume)."""
    d = graph.deps
    layers = graph.layers
    n = len(layers)
    order, cand, grads = info["order"], info["cand"], info["grads"]
    inputs = [tuple(dict.fromkeys(l.inputs)) for l in layers]
    last_use = [max(graph.consumers[j], default=j) for j in range(n)]
    on = lambda x: x is not None and fixed.get(x, 0.0) > 0.5  # noqa: E731

    def algo(zs: list[tuple[int, int, int]] | None) -> tuple[int, int]:
        if zs is None:
            return 0, 0
        for z, a, ws in zs:
            if on(z):
                return ws, a
        raise OptimumError("no convolution algorithm chosen")

    steps = [Step(Op.ALLOC, t) for t in resident_tensors(graph)]
    add = steps.append
    K = {j: on(x) for j, x in v.K.items()}
    o = {j: on(x) for j, x in v.o.items()}
    for i in range(n):
        add(Step(Op.ALLOC, 5 * i))
        ws, a = algo(v.zf.get(i))
        add(Step(Op.FORWARD, i, ws, a))
        if o.get(i):
            add(Step(Op.OFFLOAD, 5 * i))
        for j in inputs[i]:
            if last_use[j] == i and not K.get(j):
                add(Step(Op.FREE, 5 * j))
    resident_y = {j for j, k in K.items() if k}
    for p, i in enumerate(order):
        g = grads[p]
        now = {j for j in cand[p] if on(v.S[p, j])}
        # what this stage brings back is freed at its start if still there
        back = {j for j in cand[p] if on(v.P.get((p, j)))
                or any(on(r) for r, _, _ in v.R[p, j])}
        for j in sorted(resident_y - (now - back)):
            add(Step(Op.FREE, 5 * j))
        for j in cand[p]:
            if on(v.P.get((p, j))):
                add(Step(Op.ALLOC, 5 * j))
                add(Step(Op.PREFETCH, 5 * j))
        rebuilt = [j for j in cand[p] if any(on(r) for r, _, _ in v.R[p, j])]
        last_reader = {}
        for j in rebuilt:
            for u in d.rc_reads[j]:
                last_reader[u] = j
        for j in rebuilt:
            for r, a, ws in v.R[p, j]:
                if on(r):
                    add(Step(Op.ALLOC, 5 * j))
                    add(Step(Op.RECOMPUTE, j, ws, a))
            for u in d.rc_reads[j]:  # transients are freed after their last reader
                if on(v.Tr[p, u]) and last_reader[u] == j:
                    add(Step(Op.FREE, 5 * u))
        for t in g["new"]:
            add(Step(Op.ALLOC, t))
        if g["dw"] >= 0:
            add(Step(Op.ALLOC, g["dw"]))
        ws, a = algo(v.zb.get(i))
        add(Step(Op.BACKWARD, i, ws, a))
        ip = g["inplace"]
        if ip is not None:
            add(Step(Op.MOVE, 5 * ip[0] + 1, src=ip[1]))
            if ip[1] == 5 * i:
                now.discard(i)
        if g["dw"] >= 0:
            add(Step(Op.FREE, g["dw"]))
        if g["free_dy"] >= 0:
            add(Step(Op.FREE, g["free_dy"]))
        resident_y = now
    for j in sorted(resident_y):
        add(Step(Op.FREE, 5 * j))
    return steps


def _solve(graph: Graph, cost: CostModel, budget: int | None, minimize_budget: bool,
           time_limit: float, gap: float) -> Optimum:
    graph.validate()
    if len(graph) > MAX_LAYERS:
        raise OptimumError(f"{graph.name} has {len(graph)} layers; the exact optimum is "
                           f"limited to {MAX_LAYERS} (use a smaller network or a policy)")
    t0 = time.perf_counter()
    m, v, info = build(graph, cost, budget, minimize_budget)
    if minimize_budget:  # time plays no part: drop its rows (a much smaller problem)
        tvars = info["time_vars"]
        m.rows = [r for r in m.rows if not any(k in tvars for k in r[2])]
    start = None
    if not minimize_budget and v.o:
        # first without offloading (no big-M stalls: quick), as a starting point for the whole
        spent = time.perf_counter()
        st, first, _, _ = m.solve(time_limit / 3, gap, {x: 0.0 for x in v.o.values()})
        if st == "Optimal" or (st.startswith("Time limit") and any(first)):
            start = first
        time_limit = max(1.0, time_limit - (time.perf_counter() - spent))
    status, sol, obj, mip_gap = m.solve(time_limit, gap, start=start)
    if status not in ("Optimal",) and not (status.startswith("Time limit") and sol
                                            and any(x != 0 for x in sol)):
        raise OptimumError(f"no plan of {graph.name} fits "
                           f"{'any budget' if minimize_budget else f'{budget} bytes'} "
                           f"(solver: {status}); give a larger budget "
                           "(pyd4j.sched.optimum.min_budget gives the smallest)")
    if minimize_budget:
        smallest = int(math.ceil(sol[v.B] - 1e-6))
        return Optimum(Plan(graph, "optimum", [], graph.nbytes_table()), math.nan, smallest,
                       status, mip_gap, time.perf_counter() - t0,
                       {"variables": info["n_vars"], "rows": len(m.rows)})
    fixed = _clean(graph, v, sol, info)
    best_budget = budget
    status2, sol2, obj2, _ = m.solve(time_limit, 0.0, fixed, integral=False)
    if status2 != "Optimal":
        raise OptimumError(f"re-solving the times of the rounded plan failed ({status2})")
    steps = _emit(graph, v, fixed, info)
    plan = Plan(graph, "optimum", steps, graph.nbytes_table(),
                {"optimum": {"status": status, "mip_gap": mip_gap,
                             "variables": info["n_vars"], "rows": info["n_rows"]}})
    return Optimum(plan, sol2[v.T] / MS, int(best_budget), status, mip_gap,
                   time.perf_counter() - t0,
                   {"variables": info["n_vars"], "rows": info["n_rows"]})


@gc_paused
def optimum_plan(graph: Graph, cost: CostModel, budget: int, time_limit: float = 60.0,
                 gap: float = 1e-4) -> Optimum:
    """The fastest plan of the class (module docstring) whose peak fits `budget` bytes."""
    if budget <= 0:
        raise OptimumError(f"budget must be > 0 bytes, got {budget}")
    return _solve(graph, cost, budget, False, time_limit, gap)


@gc_paused
def smallest_budget(graph: Graph, cost: CostModel, time_limit: float = 60.0,
                    gap: float = 1e-4) -> tuple[int, int, str]:
    """(smallest budget a plan of the class fits, the solver's lower bound on it, status):
    the two are equal when the solver proved optimality."""
    found = _solve(graph, cost, None, True, time_limit, gap)
    return found.budget, int(round(found.budget * (1 - found.mip_gap))), found.status


@gc_paused
def min_budget(graph: Graph, cost: CostModel, time_limit: float = 60.0,
               gap: float = 1e-4) -> Optimum:
    """The fastest plan at the smallest budget a plan of the class fits (`Optimum.budget`;
    `stats["budget_bound"]`: the solver's lower bound on that budget)."""
    budget, bound, status = smallest_budget(graph, cost, time_limit, gap)
    fastest = _solve(graph, cost, budget, False, time_limit, gap)
    fastest.stats["budget_status"] = status
    fastest.stats["budget_bound"] = bound
    return fastest
