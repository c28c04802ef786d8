"""Hand-worked 5-layer example under the `cudnn` framework: DATA -> CONV(1x1) -> ACT ->
FC -> SOFTMAX, every tensor 256 bytes (one unit u), FC weights 64u, CONV weights 1u (64 B aligned
up). Resident R = W + momentum = 2*(1+64) = 130u (dW is allocated by each BACKWARD step and
released after the update).

Step needs (forward: inputs + output = 2u each, data 1u): S backward reads F and S and writes dF
over S: 2u; F backward reads A, dF, W and writes dA and dW(64u): 67u; A backward reads C, A, dA
and writes dC over dA: 3u; C backward reads D, dC and writes dW(1u): 3u. Bound 130 + 67 = 197u.

Baseline keeps the five outputs and the one gradient allocated (dA; dF and dC are renamed
buffers): 136u, plus F's dW at F's backward step: 200u. Liveness frees F:Y after S's backward
(F's backward does not read its output): 199u at F's backward (D, C, A, dF, dA + dW). UTP frees
C after ACT's forward and prefetches it after F's backward: 198u. Recomputation offloads D and C
and drops A; rebuilding A for F's backward needs C only until A exists: dF, A, dA + dW = 197u,
the bound.
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
    assert layer_working_sets(g) == [U, 3 * U, 3 * U, 67 * U, 2 * U]
    b = lower_bound(g)
    assert b.resident_bytes == 130 * U
    assert b.lower_bound_bytes == 197 * U and b.l_peak_layer == "F"


@pytest.mark.parametrize("policy, units", [("baseline", 200), ("liveness", 199), ("utp", 198),
                                           ("recompute", 197)])
def test_peaks_by_hand(policy: str, units: int) -> None:
    r = simulate(make_plan(five(), policy))
    assert r.peak_bytes == units * U


def test_liveness_records_by_hand() -> None:
    assert records(make_plan(five(), "liveness")) == [
        "ALLOC data:Y", "FORWARD data", "ALLOC C:Y", "FORWARD C", "ALLOC A:Y", "FORWARD A",
        "ALLOC F:Y", "FORWARD F", "ALLOC S:Y", "FORWARD S",
        "BACKWARD S", "MOVE F:DY <- S:Y", "FREE F:Y",
        "ALLOC A:DY", "BACKWARD F", "FREE F:DW", "FREE F:DY",
        "BACKWARD A", "MOVE C:DY <- A:DY", "FREE C:Y", "FREE A:Y",
        "BACKWARD C", "FREE C:DW", "FREE C:DY", "FREE data:Y"]


def test_baseline_frees_only_the_released_parameter_gradients() -> None:
    plan = make_plan(five(), "baseline")
    assert [plan.describe(s) for s in plan.steps if s.op == Op.FREE] == ["FREE F:DW",
                                                                          "FREE C:DW"]
    # 5 outputs, 1 gradient (the others are renamed buffers), W+M and one dW per layer
    assert plan.count(Op.ALLOC) == 5 + 1 + 6 and plan.count(Op.MOVE) == 2


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


def residual() -> Graph:
    """D -> C1 -> R -> C2 -> C3 -> J = C3 + R -> global pool -> F -> S, every tensor 1u, every
    weight 1u."""
    g = Graph("residual", 1)
    d = g.data(4, 4, 4)
    r = g.act(g.conv(d, 4, 1, bias=False, name="C1"), name="R")
    c3 = g.conv(g.conv(r, 4, 1, bias=False, name="C2"), 4, 1, bias=False, name="C3")
    j = g.join([c3, r], name="J")
    g.softmax(g.fc(g.global_pool(j, name="P"), 4, bias=False, name="F"), name="S")
    return g


def test_held_gradient_counts_in_the_bound() -> None:
    """R's gradient gets J's copy first and C2's contribution later, and R's backward reads it:
    it is held through C3's backward step, whose own need is x, dy, dx and dW (4u): 5u. Every
    other step needs at most 4u (P: x, y, dy, dx; F: x, dy, dx, dW). Resident: W + momentum of
    four layers = 8u, so the bound is 13u and every plan reaches it."""
    from pyd4j.sched.bounds import held_gradients

    g = residual()
    names = [layer.name for layer in g.layers]
    held = dict(zip(names, held_gradients(g)))
    assert held["C3"] == U and sum(held.values()) == U
    b = lower_bound(g)
    assert (b.resident_bytes, b.l_peak_bytes, b.l_peak_layer) == (8 * U, 5 * U, "C3")
    for policy in ("baseline", "liveness", "utp", "recompute", "superneurons"):
        plan = make_plan(g, policy)
        assert simulate(plan).peak_bytes >= 13 * U
        live: set[int] = set()
        for s in plan.steps:
            if s.op == Op.BACKWARD and s.arg == names.index("C3"):
                break
            if s.op == Op.ALLOC:
                live.add(s.arg)
            elif s.op == Op.FREE:
                live.discard(s.arg)
            elif s.op == Op.MOVE:
                live.discard(s.src)
                live.add(s.arg)
        assert 5 * names.index("R") + 1 in live  # R:DY is allocated when C3's backward runs
    assert simulate(make_plan(g, "recompute")).peak_bytes == 13 * U
