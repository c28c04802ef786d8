"""The optimum's MILP: one variable per choice of the plan class, one inequality per rule.

Why a module of its own: the class of plans and its time model (described in `optimum`) are
the formulation; rounding the solution and writing the plan are `optimum`'s. Each method below
adds the rows of one part of the iteration (the forward step, a backward stage's residency,
memory, prefetches, rebuilds and step), in a fixed order, so the model is the same every time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pyd4j.sched.bounds import lower_bound, resident_tensors
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.emit import backward_order
from pyd4j.sched.graph import Graph, LayerType
from pyd4j.sched.milp import Milp
from pyd4j.sched.plan import aligned

MS = 1e3  # the model works in milliseconds (keeps big-M terms well scaled)
_EPS = 1e-6  # tie-break cost: no useless prefetch, rebuild or offload

Choice = tuple[int, int, int]  # (binary variable, convolution algorithm, aligned workspace)


@dataclass
class Vars:
    """The variables the solution is read from (the module docstring of `optimum` names them)."""

    K: dict[int, int] = field(default_factory=dict)
    o: dict[int, int] = field(default_factory=dict)
    zf: dict[int, list[Choice]] = field(default_factory=dict)
    zb: dict[int, list[Choice]] = field(default_factory=dict)
    S: dict[tuple[int, int], int] = field(default_factory=dict)
    P: dict[tuple[int, int], int] = field(default_factory=dict)
    R: dict[tuple[int, int], list[Choice]] = field(default_factory=dict)
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


def build(graph: Graph, cost: CostModel, budget: int | None, minimize_budget: bool,
          ) -> tuple[Milp, Vars, dict[str, Any]]:
    """The model, its variables and what rounding and emitting need (`info`). With
    `minimize_budget` the budget is a variable (`Vars.B`) and the objective; else the iteration
    time (`Vars.T`) under `budget` bytes."""
    return _Formulation(graph, cost, budget, minimize_budget).build()


def _candidates(graph: Graph, order: list[int]) -> list[list[int]]:
    """Per backward stage p: the layer outputs a stage from p on reads, directly or through
    the recompute reads of a rebuild (what may be resident, prefetched or rebuilt at p)."""
    d = graph.deps
    anc: list[set[int]] = []  # ancestors through recompute reads: what rebuilding j may need
    for j in range(len(graph.layers)):
        s: set[int] = set()
        for u in d.rc_reads[j]:
            s.add(u)
            s |= anc[u]
        anc.append(s)
    cand: list[list[int]] = [[] for _ in range(len(order) + 1)]
    acc: set[int] = set()
    for p in range(len(order) - 1, -1, -1):
        for u in d.bwd_reads[order[p]]:
            acc.add(u)
            acc |= anc[u]
        cand[p] = sorted(acc)
    return cand


class _Formulation:
    """Builds the model in one pass; the time rows chain through the previous record's end."""

    def __init__(self, graph: Graph, cost: CostModel, budget: int | None,
                 minimize_budget: bool) -> None:
        self.graph, self.cost, self.d = graph, cost, graph.deps
        layers = graph.layers
        n = self.n = len(layers)
        self.asz = self.d.asz
        self.order = backward_order(graph)
        self.fwd, self.bwd, self.upd = cost.layer_times(graph)
        self.is_conv = [l.type is LayerType.CONV for l in layers]
        self.resident = sum(self.asz[t] for t in resident_tensors(graph))
        self.inputs = [tuple(dict.fromkeys(l.inputs)) for l in layers]
        self.last_use = [max(graph.consumers[j], default=j) for j in range(n)]
        self.xfer = [cost.transfer_time(self.d.nbytes[5 * j]) * MS for j in range(n)]
        self.grads = gradient_schedule(graph, self.order)
        self.cand = _candidates(graph, self.order)
        self.rc_cons: list[list[int]] = [[] for _ in range(n)]
        for k in range(n):
            for u in self.d.rc_reads[k]:
                self.rc_cons[u].append(k)
        self.loss = {i for i in range(n) if layers[i].type is LayerType.SOFTMAX}
        self.offloadable = [layers[j].type is not LayerType.SOFTMAX for j in range(n)]
        self.minimize_budget, self.budget = minimize_budget, budget
        self.m, self.v = Milp(), Vars()
        # U[x]: an upper bound of time variable x (the latest its record can end), which is
        # also the big-M of each inequality that starts from x: tight Ms keep the relaxation useful
        self.U: dict[int, float] = {}
        self.td: dict[int, int] = {}  # offload copy ends
        self.td_prev = self.th_prev = -1  # the last offload and the last prefetch
        self.e_prev = -1  # the end of the last compute step
        self.rdy_prev: dict[int, int] = {}  # when each prefetched output is back

    # -- building blocks --------------------------------------------------------------------
    def options(self, i: int, backward: bool) -> list[tuple[int, int, float]]:
        """(algo, aligned workspace, ms) of a compute step of layer i."""
        if self.is_conv[i]:
            return [(a, aligned(ws), self.cost.conv_time(self.graph, i, backward, a) * MS)
                    for a, ws in self.cost.conv_options(self.graph, i)]
        return [(0, 0, (self.bwd[i] if backward else self.fwd[i]) * MS)]

    def tv(self, *after: float) -> int:
        """A time variable bounded by the latest of `after` (its big-M)."""
        x = self.m.var(0.0, max(after, default=0.0) * 1.000001 + 1e-6)
        self.U[x] = self.m.ub[x]
        return x

    def slowest(self, i: int, backward: bool) -> float:
        return max(t for _, _, t in self.options(i, backward)) + (self.upd[i] * MS if backward else 0.0)

    def dur(self, i: int, backward: bool, zs: list[Choice] | None) -> tuple[list[tuple[int, float]], float]:
        """Duration of a step as (terms, constant)."""
        opts = self.options(i, backward)
        extra = self.upd[i] * MS if backward else 0.0
        if zs is None:
            return [], opts[0][2] + extra
        times = {a: t for a, _, t in opts}
        return [(z, times[a]) for z, a, _ in zs], extra

    # -- the model ----------------------------------------------------------------------------
    def build(self) -> tuple[Milp, Vars, dict[str, Any]]:
        m, v = self.m, self.v
        if self.minimize_budget:
            # no plan goes below the dependency model's lower bound: the search starts there
            v.B = m.var(float(lower_bound(self.graph).lower_bound_bytes), math.inf, cost=1.0)
            self.cap_terms: list[tuple[int, float]] = [(v.B, -1.0)]
            self.cap = 0.0
        else:
            self.cap_terms, self.cap = [], float(self.budget)  # type: ignore[arg-type]
        v.T = m.var(0.0, math.inf, cost=0.0 if self.minimize_budget else 1.0)
        self._choices()
        self.tFp: list[int] = [0] * self.n
        self.tF: list[int] = [0] * self.n
        for i in range(self.n):
            self._forward(i)
        self.e_prev = self.tFp[self.n - 1]
        for p, i in enumerate(self.order):
            self._stage_residency(p, i)
            ysum = self._stage_memory(p, i)
            self._rebuild_memory(p, ysum)
            rdy = self._prefetch_times(p)
            self._step_times(p, i, rdy)
        m.row({v.T: 1, self.e_prev: -1}, lo=0)
        if self.td_prev >= 0:
            m.row({v.T: 1, self.td[self.td_prev]: -1}, lo=0)
        if self.th_prev >= 0:
            m.row({v.T: 1, self.th_prev: -1}, lo=0)
        info = {"order": self.order, "cand": self.cand, "grads": self.grads,
                "resident": self.resident, "n_vars": len(m.lb), "n_rows": len(m.rows),
                "time_vars": set(self.U) | {v.T}}
        return m, v, info

    def _choices(self) -> None:
        """Keep (K) or offload (o) each output read in the backward pass; one algorithm per
        convolution step (zf, zb)."""
        m, v = self.m, self.v
        in_c0 = set(self.cand[0])
        for j in range(self.n):
            if j in in_c0:
                v.K[j] = m.var(binary=True)
                if j in self.loss:
                    m.lb[v.K[j]] = 1.0
                if self.offloadable[j]:
                    v.o[j] = m.var(binary=True, cost=_EPS)
                    m.row({v.K[j]: 1, v.o[j]: 1}, hi=1)
        for i in range(self.n):
            opts = self.options(i, False)
            if len(opts) > 1:
                v.zf[i] = [(m.var(binary=True), a, ws) for a, ws, _ in opts]
                m.row({z: 1 for z, _, _ in v.zf[i]}, lo=1, hi=1)
        for i in self.order:
            opts = self.options(i, True)
            if len(opts) > 1:
                v.zb[i] = [(m.var(binary=True), a, ws) for a, ws, _ in opts]
                m.row({z: 1 for z, _, _ in v.zb[i]}, lo=1, hi=1)

    def _forward(self, i: int) -> None:
        """Layer i's forward step: its memory, its time, its offload copy and the waits on
        the copies of the inputs it is the last reader of."""
        m, v, U, asz, tF, tFp, td = self.m, self.v, self.U, self.asz, self.tF, self.tFp, self.td
        fixed = self.resident + asz[5 * i] + self.d.ws_fwd[i]
        terms: list[tuple[int, float]] = list(self.cap_terms)
        for j in range(i):
            if self.last_use[j] >= i:
                fixed += asz[5 * j]
            elif j in v.K:
                terms.append((v.K[j], asz[5 * j]))
        for z, _, ws in v.zf.get(i, ()):
            terms.append((z, ws))
        m.row(terms, hi=self.cap - fixed)
        tF[i] = self.tv((U[tFp[i - 1]] if i else 0.0) + self.slowest(i, False))
        dt, dc = self.dur(i, False, v.zf.get(i))
        m.row([(tF[i], 1.0)] + ([(tFp[i - 1], -1.0)] if i else []) + [(z, -t) for z, t in dt], lo=dc)
        xfer = self.xfer
        if i in v.o:
            prev = self.td_prev
            td[i] = self.tv(max(U[td[prev]] if prev >= 0 else 0.0, U[tF[i]]) + xfer[i])
            if prev >= 0:
                m.row({td[i]: 1, td[prev]: -1, v.o[i]: -xfer[i]}, lo=0)
            else:
                m.row({td[i]: 1, v.o[i]: -xfer[i]}, lo=0)
            big = U[tF[i]] + xfer[i]
            m.row({td[i]: 1, tF[i]: -1, v.o[i]: -big}, lo=xfer[i] - big)
            self.td_prev = i
        waits = [j for j in self.inputs[i] if self.last_use[j] == i and j in v.o]
        tFp[i] = self.tv(U[tF[i]], *(U[td[j]] for j in waits))
        m.row({tFp[i]: 1, tF[i]: -1}, lo=0)
        for j in waits:
            m.row({tFp[i]: 1, td[j]: -1, v.o[j]: -U[td[j]]}, lo=-U[td[j]])
            # the same wait without big-M (a valid cut): the copy starts after j is produced
            m.row({tFp[i]: 1, tF[j]: -1, v.o[j]: -xfer[j]}, lo=0)

    def _stage_residency(self, p: int, i: int) -> None:
        """Per candidate output of stage p: resident (S), prefetched (P), rebuilt to stay or
        rebuilt as a transient (R, Tr), with continuity from the stage before."""
        m, v = self.m, self.v
        for j in self.cand[p]:
            s = v.S[p, j] = m.var(binary=True)
            if j in self.d.bwd_reads[i]:
                m.lb[s] = 1.0
            if j in v.o:
                v.P[p, j] = m.var(binary=True, cost=_EPS)
                m.row({v.P[p, j]: 1, v.o[j]: -1}, hi=0)
                m.row({v.P[p, j]: 1, s: -1}, hi=0)
            rs = [(m.var(binary=True, cost=_EPS), a, ws) for a, ws, _ in self.options(j, False)]
            v.R[p, j] = rs
            tr = v.Tr[p, j] = m.var(binary=True)
            # a rebuild either stays for the stage (S) or is transient: freed right after the
            # last rebuild of this stage that reads it, before the backward step
            m.row([(r, 1.0) for r, _, _ in rs] + [(s, -1.0), (tr, -1.0)], hi=0)
            m.row([(r, -1.0) for r, _, _ in rs] + [(tr, 1.0)], hi=0)
            m.row({s: 1, tr: 1}, hi=1)
            if j in v.o:
                m.row([(r, 1.0) for r, _, _ in rs] + [(v.o[j], 1.0)], hi=1)
            for u in self.d.rc_reads[j]:
                m.row([(r, 1.0) for r, _, _ in rs] + [(v.S[p, u], -1.0), (v.Tr[p, u], -1.0)], hi=0)
            # continuity: resident now => resident before, prefetched or rebuilt to stay
            prev = v.S.get((p - 1, j)) if p else v.K.get(j)
            terms = [(s, 1.0), (tr, 1.0)] + [(r, -1.0) for r, _, _ in rs]
            if prev is not None:
                terms.append((prev, -1.0))
            if (p, j) in v.P:
                terms.append((v.P[p, j], -1.0))
            m.row(terms, hi=0)

    def _stage_memory(self, p: int, i: int) -> int:
        """The backward step's memory: outputs resident this stage (the returned ysum) +
        gradients + the step's scratch."""
        m, v, g = self.m, self.v, self.grads[p]
        ysum = m.var()
        m.row([(ysum, 1.0)] + [(v.S[p, j], -float(self.asz[5 * j])) for j in self.cand[p]], lo=0, hi=0)
        fixed = self.resident + g["held"] + g["new_bytes"] + self.d.ws_bwd[i]
        m.row([(ysum, 1.0)] + list(self.cap_terms) + [(z, ws) for z, _, ws in v.zb.get(i, ())],
              hi=self.cap - fixed)
        return ysum

    def _rebuild_memory(self, p: int, ysum: int) -> None:
        """A rebuild in stage p (before the gradients are allocated): what stays for the stage,
        less what is rebuilt after it, plus the transients still to be read."""
        m, v, asz, cp = self.m, self.v, self.asz, self.cand[p]
        in_cp = set(cp)
        for j in cp:
            base = self.resident + self.grads[p]["held"] + self.d.ws_rc[j]
            terms = [(ysum, 1.0)] + list(self.cap_terms)
            terms += [(r, float(ws + base)) for r, _, ws in v.R[p, j]]
            for k in cp:
                if k > j:
                    terms += [(r, -float(asz[5 * k])) for r, _, _ in v.R[p, k]]
                    terms.append((v.Tr[p, k], float(asz[5 * k])))
            terms.append((v.Tr[p, j], float(asz[5 * j])))
            for u in cp:
                later = [k for k in self.rc_cons[u] if k >= j and k in in_cp]
                if u >= j or not later:
                    continue
                alive = m.var(0.0, 1.0)
                for k in later:
                    m.row([(alive, 1.0), (v.Tr[p, u], -1.0)] + [(r, -1.0) for r, _, _ in v.R[p, k]], lo=-1)
                terms.append((alive, float(asz[5 * u])))
            m.row(terms, hi=self.cap)

    def _prefetch_times(self, p: int) -> dict[int, int]:
        """Stage p's prefetches on the host-to-device stream: when each output is back."""
        m, v, U, xfer, td = self.m, self.v, self.U, self.xfer, self.td
        rdy: dict[int, int] = {}
        for j in self.cand[p]:
            if (p, j) not in v.P:
                continue
            pv = v.P[p, j]
            prev = self.th_prev
            th = self.tv(max(U[prev] if prev >= 0 else 0.0, U[self.e_prev], U[td[j]]) + xfer[j])
            if prev >= 0:
                m.row({th: 1, prev: -1, pv: -xfer[j]}, lo=0)
            else:
                m.row({th: 1, pv: -xfer[j]}, lo=0)
            for start in (self.e_prev, td[j]):
                big = U[start] + xfer[j]
                m.row({th: 1, start: -1, pv: -big}, lo=xfer[j] - big)
            self.th_prev = th
            r = rdy[j] = self.tv(U[self.rdy_prev[j]] if j in self.rdy_prev else 0.0, U[th])
            if j in self.rdy_prev:
                m.row({r: 1, self.rdy_prev[j]: -1}, lo=0)
            m.row({r: 1, th: -1, pv: -U[th]}, lo=-U[th])
        for j in self.rdy_prev:  # offloaded earlier, not a candidate for a new prefetch now
            if j not in rdy and j in self.cand[p]:
                rdy[j] = self.rdy_prev[j]
        return rdy

    def _step_times(self, p: int, i: int, rdy: dict[int, int]) -> None:
        """Stage p's rebuilds, then its backward step, each after what it reads is back."""
        m, v, U = self.m, self.v, self.U
        c_prev = self.e_prev
        for j in self.cand[p]:
            rs = v.R[p, j]
            times = {a: t for a, _, t in self.options(j, False)}
            waits = [u for u in self.d.rc_reads[j] if u in rdy]
            c = self.tv(max([U[c_prev]] + [U[rdy[u]] for u in waits]) + self.slowest(j, False))
            m.row([(c, 1.0), (c_prev, -1.0)] + [(r, -times[a]) for r, a, _ in rs], lo=0)
            for u in waits:
                big = U[rdy[u]]
                m.row([(c, 1.0), (rdy[u], -1.0)] + [(r, -times[a] - big) for r, a, _ in rs], lo=-big)
            c_prev = c
        reads = self.d.bwd_reads[i]
        e = self.tv(max([U[c_prev]] + [U[rdy[u]] for u in reads if u in rdy]) + self.slowest(i, True))
        dt, dc = self.dur(i, True, v.zb.get(i))
        m.row([(e, 1.0), (c_prev, -1.0)] + [(z, -t) for z, t in dt], lo=dc)
        for u in reads:
            if u in rdy:
                m.row([(e, 1.0), (rdy[u], -1.0)] + [(z, -t) for z, t in dt], lo=dc)
            if (p, u) in v.P:  # valid cut without big-M: a prefetch it reads starts after
                m.row([(e, 1.0), (self.e_prev, -1.0), (v.P[p, u], -self.xfer[u])]  # the last step
                      + [(z, -t) for z, t in dt], lo=dc)
        self.e_prev = e
        self.rdy_prev = rdy
