"""A mixed-integer linear program built one column and one row at a time, solved by HiGHS.

Why: the optimum's formulation reads as its inequalities (`row({x: 1, y: -1}, lo=0)`), not as
sparse-matrix bookkeeping; this module holds that bookkeeping and the solver call.
"""

from __future__ import annotations

import math

import highspy
import numpy as np


class Milp:
    """Columns and rows for HiGHS, added one at a time."""

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
