"""Hand-worked 5-layer example: DATA -> CONV(1x1) -> ACT -> FC -> SOFTMAX, every tensor 256 bytes
(one unit u), FC weights 64u, CONV weights 1u (64 B aligned up). Resident R = 3*(1+64) = 195u.

Baseline keeps 5 outputs + 3 gradients: 203u. Bound: l_A = l_F = 4u -> 199u. Liveness peaks at
the SOFTMAX backward step with D, C, A, F, S, dF live (201u). UTP frees C after ACT's forward and
prefetches it for ACT's backward: 200u. Recomputation drops A too; rebuilding A needs C back:
D, F, dF, C, A live = 200u.
"""

from __future__ import annotations

import pytest

from pyd4j.sched.bounds import layer_working_sets, lower_bound
from pyd4j.sched.convws import assign_workspaces
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.graph import Graph
from pyd4j.sched.plan import Op
from pyd4j.sched.policies import make_plan
from pyd4j.sched.simulator import live_timeline, simulate

U = 256


def five() -> Graph:
    g = Graph("five", 1)
    d = g.data(4, 4, 4)
    c = g.conv(d, 4, 1, bias=False, name="C")
    a = g.act(c, name="A")
    f = g.fc(a, 64, bias=False, name="F")
    g.softmax(f, name="S")
    return g


def records(plan) -> list[str]:
    return [plan.describe(s) for s in plan.steps if not (s.op == Op.ALLOC and s.arg % 5 >= 2)]


def test_bound_by_hand() -> None:
    g = five()
    assert layer_working_sets(g) == [0, 3 * U, 4 * U, 4 * U, 3 * U]
    b = lower_bound(g)
    assert b.resident_bytes == 195 * U
    assert b.lower_bound_bytes == 199 * U


@pytest.mark.parametrize("policy, units", [("baseline", 203), ("liveness", 201), ("utp", 200),
                                           ("recompute", 200)])
def test_peaks_by_hand(policy: str, units: int) -> None:
    r = simulate(make_plan(five(), policy))
    assert r.peak_bytes == units * U


def test_liveness_records_by_hand() -> None:
    assert records(make_plan(five(), "liveness")) == [
        "ALLOC data:Y", "FORWARD data", "ALLOC C:Y", "FORWARD C", "ALLOC A:Y", "FORWARD A",
        "ALLOC F:Y", "FORWARD F", "ALLOC S:Y", "FORWARD S",
        "ALLOC F:DY", "BACKWARD S", "FREE S:Y",
        "ALLOC A:DY", "BACKWARD F", "FREE F:DY", "FREE F:Y",
        "ALLOC C:DY", "BACKWARD A", "FREE A:DY", "FREE A:Y",
        "BACKWARD C", "FREE C:DY", "FREE data:Y", "FREE C:Y"]


def test_baseline_never_frees() -> None:
    plan = make_plan(five(), "baseline")
    assert plan.count(Op.FREE) == 0
    assert plan.count(Op.ALLOC) == 5 + 3 + 6


def test_utp_offloads_conv_and_prefetches_before_backward() -> None:
    recs = records(make_plan(five(), "utp"))
    assert recs.index("OFFLOAD C:Y") == recs.index("FORWARD C") + 1
    assert recs.index("FREE C:Y") == recs.index("FORWARD A") + 1  # after its last forward use
    assert recs.index("PREFETCH C:Y") < recs.index("BACKWARD A")
    assert recs.index("PREFETCH C:Y") > recs.index("BACKWARD S")


def test_recompute_rebuilds_the_activation() -> None:
    recs = records(make_plan(five(), "recompute"))
    assert recs.index("FREE A:Y") == recs.index("FORWARD F") + 1
    k = recs.index("RECOMPUTE A")
    assert recs.index("PREFETCH C:Y") < k < recs.index("BACKWARD F")


def test_conv_workspace_takes_fastest_algorithm_that_fits() -> None:
    g = five()
    cost = CostModel.for_device("k40c")
    # 1x1 conv: GEMM (im2col = 4*16 floats = 256 B) is the fastest applicable algorithm
    opts = cost.conv_options(g, 1)
    assert cost.algos[opts[0][0]].name == "GEMM" and opts[0][1] == U
    plan = make_plan(g, "recompute")
    live = live_timeline(plan)
    k = next(i for i, s in enumerate(plan.steps) if s.op == Op.FORWARD and s.arg == 1)
    tight = assign_workspaces(make_plan(g, "recompute"), cost, live[k])
    assert tight.steps[k].algo == 0 and tight.steps[k].ws == 0
    roomy = assign_workspaces(make_plan(g, "recompute"), cost, live[k] + U)
    assert cost.algos[roomy.steps[k].algo].name == "GEMM" and roomy.steps[k].ws == U
    r = simulate(roomy, cost)
    assert r.device_peak_bytes == max(r.peak_bytes, live[k] + U)
