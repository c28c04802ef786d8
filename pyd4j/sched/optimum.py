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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pyd4j.sched.bounds import lower_bound, resident_tensors
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.emit import backward_order
from pyd4j.sched.graph import Graph, LayerType
from pyd4j.sched.plan import Op, Plan, Step, aligned, gc_paused

MAX_LAYERS = 80
"""Graphs above this size are refused: the MILP grows with layers x backward stages."""

_MS = 1e3  # the model works in milliseconds (keeps big-M terms well scaled)


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


class _Model:
    """Rows and columns for HiGHS, built incrementally."""

    def __init__(self) -> None:
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.cost: list[float] = []
        self.integer: list[bool] = []
        self.rows: list[tuple[float, float, list[int], list[float]]] = []

    def var(self, lb: float = 0.0, ub: float = math.inf, binary: bool = False,
            cost: float = 0.0) -> int:
        self.lb.append(lb)
        self.ub.append(1.0 if binary else ub)
        self.cost.append(cost)
        self.integer.append(binary)
        return len(self.lb) - 1

    def row(self, terms: dict[int, float] | list[tuple[int, float]], lo: float = -math.inf,
            hi: float = math.inf) -> None:
        items = terms.items() if isinstance(terms, dict) else terms
        idx, val = [], []
        for k, v in items:
            if v:
                idx.append(k)
                val.append(float(v))
        self.rows.append((lo, hi, idx, val))

    def solve(self, time_limit: float, gap: float, fixed: dict[int, float] | None = None,
              integral: bool = True, start: list[float] | None = None,
              ) -> tuple[str, list[float], float, float]:
        """Solve with `fixed` columns pinned (as an LP when not `integral`), from a known
        feasible point `start` when given: (status, values, objective, MIP gap)."""
        import highspy
        import numpy as np

        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("time_limit", float(time_limit))
        h.setOptionValue("mip_rel_gap", float(gap))
        h.setOptionValue("threads", 1)
        lp = highspy.HighsLp()
        n = len(self.lb)
        lp.num_col_ = n
        lp.num_row_ = len(self.rows)
        lb, ub = list(self.lb), list(self.ub)
        if fixed:
            for k, v in fixed.items():
                lb[k] = ub[k] = v
        lp.col_cost_ = np.array(self.cost, dtype=float)
        lp.col_lower_ = np.array(lb, dtype=float)
        lp.col_upper_ = np.array(ub, dtype=float)
        lp.row_lower_ = np.array([r[0] for r in self.rows], dtype=float)
        lp.row_upper_ = np.array([r[1] for r in self.rows], dtype=float)
        starts, index, value = [0], [], []
        for _, _, idx, val in self.rows:
            index += idx
            value += val
            starts.append(len(index))
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
        lp.a_matrix_.value_ = np.array(value, dtype=float)
        if integral:
            lp.integrality_ = [highspy.HighsVarType.kInteger if b else
                               highspy.HighsVarType.kContinuous for b in self.integer]
        h.passModel(lp)
        if start is not None:
            h.setSolution(n, np.arange(n, dtype=np.int32), np.array(start, dtype=float))
        h.run()
        status = h.modelStatusToString(h.getModelStatus())
        info = h.getInfo()
        sol = list(h.getSolution().col_value)
        gap_out = float(info.mip_gap) if integral and info.mip_gap < math.inf else 0.0
        return status, sol, float(info.objective_function_value), gap_out


@dataclass
class _Vars:
    K: dict[int, int] = field(default_factory=dict)
    o: dict[int, int] = field(default_factory=dict)
    zf: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)  # i -> (var, algo, ws)
    zb: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)
    S: dict[tuple[int, int], int] = field(default_factory=dict)
    P: dict[tuple[int, int], int] = field(default_factory=dict)
    R: dict[tuple[int, int], list[tuple[int, int, int]]] = field(default_factory=dict)
    Tr: dict[tuple[int, int], int] = field(default_factory=dict)
    T: int = -1
    B: int = -1


def gradient_schedule(graph: Graph, order: list[int]) -> list[dict[str, Any]]:
    """Per backward stage: gradient bytes held before it, what it allocates, its in-place move
    and what it frees -- the rule `emit` follows, independent of the MILP's choices."""
    d = graph.deps
    asz = d.asz
    held: dict[int, int] = {}  # dy tensor -> aligned bytes
    out = []
    for i in order:
        ip = d.bwd_inplace[i]
        if ip is not None:
            tj, src = ip
            if 5 * tj + 1 in held or (src == 5 * i and i not in d.bwd_reads[i]):
                ip = None
        new = [5 * j + 1 for j in d.bwd_dx[i]
               if 5 * j + 1 not in held and (ip is None or j != ip[0])]
        dw = 5 * i + 3 if d.bwd_dw[i] and not d.keep_dw else -1
        stage = {"held": sum(held.values()), "new": new, "dw": dw, "inplace": ip,
                 "new_bytes": sum(asz[t] for t in new) + (asz[dw] if dw >= 0 else 0)}
        for t in new:
            held[t] = asz[t]
        moved_dy = False
        if ip is not None:
            tj, src = ip
            held[5 * tj + 1] = asz[5 * tj + 1]
            if src == 5 * i + 1:
                held.pop(src, None)
                moved_dy = True
        own = 5 * i + 1
        stage["free_dy"] = own if graph.has_grad(i) and own in held and not moved_dy else -1
        if stage["free_dy"] >= 0:
            held.pop(own)
        out.append(stage)
    return out


def _build(graph: Graph, cost: CostModel, budget: int | None, minimize_budget: bool,
           ) -> tuple[_Model, _Vars, dict[str, Any]]:
    d = graph.deps
    layers = graph.layers
    n = len(layers)
    asz = d.asz
    nb = d.nbytes
    order = backward_order(graph)
    P_ = len(order)
    fwd, bwd, upd = cost.layer_times(graph)
    is_conv = [l.type is LayerType.CONV for l in layers]
    resident = sum(asz[t] for t in resident_tensors(graph))
    inputs = [tuple(dict.fromkeys(l.inputs)) for l in layers]
    last_use = [max(graph.consumers[j], default=j) for j in range(n)]
    xfer = [cost.transfer_time(nb[5 * j]) * _MS for j in range(n)]
    grads = gradient_schedule(graph, order)

    def options(i: int, backward: bool) -> list[tuple[int, int, float]]:
        """(algo, aligned workspace, ms) of a compute step of layer i."""
        if is_conv[i]:
            return [(a, aligned(ws), cost.conv_time(graph, i, backward, a) * _MS)
                    for a, ws in cost.conv_options(graph, i)]
        return [(0, 0, (bwd[i] if backward else fwd[i]) * _MS)]

    # ancestors through recompute reads: what rebuilding j may need
    anc: list[set[int]] = []
    for j in range(n):
        s: set[int] = set()
        for u in d.rc_reads[j]:
            s.add(u)
            s |= anc[u]
        anc.append(s)
    cand: list[list[int]] = [[] for _ in range(P_ + 1)]
    acc: set[int] = set()
    for p in range(P_ - 1, -1, -1):
        for u in d.bwd_reads[order[p]]:
            acc.add(u)
            acc |= anc[u]
        cand[p] = sorted(acc)
    rc_cons: list[list[int]] = [[] for _ in range(n)]
    for k in range(n):
        for u in d.rc_reads[k]:
            rc_cons[u].append(k)
    loss = {i for i in range(n) if layers[i].type is LayerType.SOFTMAX}
    offloadable = [layers[j].type is not LayerType.SOFTMAX for j in range(n)]

    m = _Model()
    v = _Vars()
    # U[x]: an upper bound of time variable x (the latest its record can end), which is also
    # the big-M of each inequality that starts from x: tight Ms keep the relaxation useful
    U: dict[int, float] = {}

    def tv(*after: float) -> int:
        x = m.var(0.0, max(after, default=0.0) * 1.000001 + 1e-6)
        U[x] = m.ub[x]
        return x

    def slowest(i: int, backward: bool) -> float:
        return max(t for _, _, t in options(i, backward)) + (upd[i] * _MS if backward else 0.0)
    if minimize_budget:
        # no plan goes below the dependency model's lower bound: the search starts there
        v.B = m.var(float(lower_bound(graph).lower_bound_bytes), math.inf, cost=1.0)
        cap_terms: list[tuple[int, float]] = [(v.B, -1.0)]
        cap = 0.0
    else:
        cap_terms, cap = [], float(budget)  # type: ignore[arg-type]
    eps = 1e-6  # tie-break: no useless prefetch/recompute/offload
    v.T = m.var(0.0, math.inf, cost=0.0 if minimize_budget else 1.0)

    in_c0 = set(cand[0])
    for j in range(n):
        if j in in_c0:
            v.K[j] = m.var(binary=True)
            if j in loss:
                m.lb[v.K[j]] = 1.0
            if offloadable[j]:
                v.o[j] = m.var(binary=True, cost=eps)
                m.row({v.K[j]: 1, v.o[j]: 1}, hi=1)
    for i in range(n):
        opts = options(i, False)
        if len(opts) > 1:
            v.zf[i] = [(m.var(binary=True), a, ws) for a, ws, _ in opts]
            m.row({z: 1 for z, _, _ in v.zf[i]}, lo=1, hi=1)
    for i in order:
        opts = options(i, True)
        if len(opts) > 1:
            v.zb[i] = [(m.var(binary=True), a, ws) for a, ws, _ in opts]
            m.row({z: 1 for z, _, _ in v.zb[i]}, lo=1, hi=1)

    def dur(i: int, backward: bool, zs: list[tuple[int, int, int]] | None,
            ) -> tuple[list[tuple[int, float]], float]:
        """Duration of a step as (terms, constant)."""
        opts = options(i, backward)
        extra = upd[i] * _MS if backward else 0.0
        if zs is None:
            return [], opts[0][2] + extra
        times = {a: t for a, _, t in opts}
        return [(z, times[a]) for z, a, _ in zs], extra

    # -- forward: memory and time ------------------------------------------------------------
    tF, tFp, td = [0] * n, [0] * n, {}
    td_prev = -1
    for i in range(n):
        fixed = resident + asz[5 * i] + d.ws_fwd[i]
        terms: list[tuple[int, float]] = list(cap_terms)
        for j in range(i):
            if last_use[j] >= i:
                fixed += asz[5 * j]
            elif j in v.K:
                terms.append((v.K[j], asz[5 * j]))
        for z, _, ws in v.zf.get(i, ()):
            terms.append((z, ws))
        m.row(terms, hi=cap - fixed)
        tF[i] = tv((U[tFp[i - 1]] if i else 0.0) + slowest(i, False))
        dt, dc = dur(i, False, v.zf.get(i))
        m.row([(tF[i], 1.0)] + ([(tFp[i - 1], -1.0)] if i else []) + [(z, -t) for z, t in dt],
              lo=dc)
        if i in v.o:
            td[i] = tv(max(U[td[td_prev]] if td_prev >= 0 else 0.0, U[tF[i]]) + xfer[i])
            if td_prev >= 0:
                m.row({td[i]: 1, td[td_prev]: -1, v.o[i]: -xfer[i]}, lo=0)
            else:
                m.row({td[i]: 1, v.o[i]: -xfer[i]}, lo=0)
            big = U[tF[i]] + xfer[i]
            m.row({td[i]: 1, tF[i]: -1, v.o[i]: -big}, lo=xfer[i] - big)
            td_prev = i
        waits = [j for j in inputs[i] if last_use[j] == i and j in v.o]
        tFp[i] = tv(U[tF[i]], *(U[td[j]] for j in waits))
        m.row({tFp[i]: 1, tF[i]: -1}, lo=0)
        for j in waits:
            m.row({tFp[i]: 1, td[j]: -1, v.o[j]: -U[td[j]]}, lo=-U[td[j]])
            # the same wait without big-M (a valid cut): the copy starts after j is produced
            m.row({tFp[i]: 1, tF[j]: -1, v.o[j]: -xfer[j]}, lo=0)

    # -- backward stages ---------------------------------------------------------------------
    e_prev = tFp[n - 1]
    th_prev = -1
    rdy_prev: dict[int, int] = {}
    for p, i in enumerate(order):
        g = grads[p]
        cp = cand[p]
        for j in cp:
            s = v.S[p, j] = m.var(binary=True)
            if j in d.bwd_reads[i]:
                m.lb[s] = 1.0
            if j in v.o:
                v.P[p, j] = m.var(binary=True, cost=eps)
                m.row({v.P[p, j]: 1, v.o[j]: -1}, hi=0)
                m.row({v.P[p, j]: 1, s: -1}, hi=0)
            opts = options(j, False)
            rs = [(m.var(binary=True, cost=eps), a, ws) for a, ws, _ in opts]
            v.R[p, j] = rs
            tr = v.Tr[p, j] = m.var(binary=True)
            # a rebuild either stays for the stage (S) or is transient: freed right after the
            # last rebuild of this stage that reads it, before the backward step
            m.row([(r, 1.0) for r, _, _ in rs] + [(s, -1.0), (tr, -1.0)], hi=0)
            m.row([(r, -1.0) for r, _, _ in rs] + [(tr, 1.0)], hi=0)
            m.row({s: 1, tr: 1}, hi=1)
            if j in v.o:
                m.row([(r, 1.0) for r, _, _ in rs] + [(v.o[j], 1.0)], hi=1)
            for u in d.rc_reads[j]:
                m.row([(r, 1.0) for r, _, _ in rs] + [(v.S[p, u], -1.0), (v.Tr[p, u], -1.0)],
                      hi=0)
            # continuity: resident now => resident before, prefetched or rebuilt to stay
            prev = v.S.get((p - 1, j)) if p else v.K.get(j)
            terms = [(s, 1.0), (tr, 1.0)] + [(r, -1.0) for r, _, _ in rs]
            if prev is not None:
                terms.append((prev, -1.0))
            if (p, j) in v.P:
                terms.append((v.P[p, j], -1.0))
            m.row(terms, hi=0)
        # memory: Y resident this stage + gradients + the step's scratch
        ysum = m.var()
        m.row([(ysum, 1.0)] + [(v.S[p, j], -float(asz[5 * j])) for j in cp], lo=0, hi=0)
        fixed = resident + g["held"] + g["new_bytes"] + d.ws_bwd[i]
        m.row([(ysum, 1.0)] + list(cap_terms) + [(z, ws) for z, _, ws in v.zb.get(i, ())],
              hi=cap - fixed)
        # a rebuild in this stage (before the gradients are allocated): what stays for the
        # stage, less what is rebuilt after it, plus the transients still to be read
        in_cp = set(cp)
        for j in cp:
            base = resident + g["held"] + d.ws_rc[j]
            terms = [(ysum, 1.0)] + list(cap_terms)
            terms += [(r, float(ws + base)) for r, _, ws in v.R[p, j]]
            for k in cp:
                if k > j:
                    terms += [(r, -float(asz[5 * k])) for r, _, _ in v.R[p, k]]
                    terms.append((v.Tr[p, k], float(asz[5 * k])))
            terms.append((v.Tr[p, j], float(asz[5 * j])))
            for u in cp:
                later = [k for k in rc_cons[u] if k >= j and k in in_cp]
                if u >= j or not later:
                    continue
                alive = m.var(0.0, 1.0)
                for k in later:
                    m.row([(alive, 1.0), (v.Tr[p, u], -1.0)]
                          + [(r, -1.0) for r, _, _ in v.R[p, k]], lo=-1)
                terms.append((alive, float(asz[5 * u])))
            m.row(terms, hi=cap)
        # time: prefetches (h2d stream), then rebuilds, then the backward step
        rdy: dict[int, int] = {}
        for j in cp:
            if (p, j) not in v.P:
                continue
            pv = v.P[p, j]
            th = tv(max(U[th_prev] if th_prev >= 0 else 0.0, U[e_prev], U[td[j]]) + xfer[j])
            if th_prev >= 0:
                m.row({th: 1, th_prev: -1, pv: -xfer[j]}, lo=0)
            else:
                m.row({th: 1, pv: -xfer[j]}, lo=0)
            for start in (e_prev, td[j]):
                big = U[start] + xfer[j]
                m.row({th: 1, start: -1, pv: -big}, lo=xfer[j] - big)
            th_prev = th
            r = rdy[j] = tv(U[rdy_prev[j]] if j in rdy_prev else 0.0, U[th])
            if j in rdy_prev:
                m.row({r: 1, rdy_prev[j]: -1}, lo=0)
            m.row({r: 1, th: -1, pv: -U[th]}, lo=-U[th])
        for j in rdy_prev:  # offloaded earlier, not a candidate for a new prefetch now
            if j not in rdy and j in cp:
                rdy[j] = rdy_prev[j]
        c_prev = e_prev
        for j in cp:
            rs = v.R[p, j]
            times = {a: t for a, _, t in options(j, False)}
            waits = [u for u in d.rc_reads[j] if u in rdy]
            c = tv(max([U[c_prev]] + [U[rdy[u]] for u in waits]) + slowest(j, False))
            m.row([(c, 1.0), (c_prev, -1.0)] + [(r, -times[a]) for r, a, _ in rs], lo=0)
            for u in waits:
                big = U[rdy[u]]
                m.row([(c, 1.0), (rdy[u], -1.0)] + [(r, -times[a] - big) for r, a, _ in rs],
                      lo=-big)
            c_prev = c
        e = tv(max([U[c_prev]] + [U[rdy[u]] for u in d.bwd_reads[i] if u in rdy])
               + slowest(i, True))
        dt, dc = dur(i, True, v.zb.get(i))
        m.row([(e, 1.0), (c_prev, -1.0)] + [(z, -t) for z, t in dt], lo=dc)
        for u in d.bwd_reads[i]:
            if u in rdy:
                m.row([(e, 1.0), (rdy[u], -1.0)] + [(z, -t) for z, t in dt], lo=dc)
            if (p, u) in v.P:  # valid cut without big-M: a prefetch it reads starts after
                m.row([(e, 1.0), (e_prev, -1.0), (v.P[p, u], -xfer[u])]  # the last step
                      + [(z, -t) for z, t in dt], lo=dc)
        e_prev = e
        rdy_prev = rdy
    m.row({v.T: 1, e_prev: -1}, lo=0)
    if td_prev >= 0:
        m.row({v.T: 1, td[td_prev]: -1}, lo=0)
    if th_prev >= 0:
        m.row({v.T: 1, th_prev: -1}, lo=0)
    info = {"order": order, "cand": cand, "grads": grads, "resident": resident,
            "n_vars": len(m.lb), "n_rows": len(m.rows), "time_vars": set(U) | {v.T}}
    return m, v, info


def _round(sol: list[float], k: int) -> int:
    return 1 if sol[k] > 0.5 else 0


def _clean(graph: Graph, v: _Vars, sol: list[float], info: dict[str, Any]) -> dict[int, float]:
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


def _emit(graph: Graph, v: _Vars, fixed: dict[int, float], info: dict[str, Any]) -> list[Step]:
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
    import time

    graph.validate()
    if len(graph) > MAX_LAYERS:
        raise OptimumError(f"{graph.name} has {len(graph)} layers; the exact optimum is "
                           f"limited to {MAX_LAYERS} (use a smaller network or a policy)")
    t0 = time.perf_counter()
    m, v, info = _build(graph, cost, budget, minimize_budget)
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
    return Optimum(plan, sol2[v.T] / _MS, int(best_budget), status, mip_gap,
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
