"""The tensor cache: time-optimised plans under a device budget (`make_plan(..., cache=True)`).

With ample memory nothing moves and the iteration runs at infinite-memory speed; with a tight
budget frees are delayed until memory is needed, only evicted tensors move, and more memory
never makes an iteration slower. Every plan is replayed by the simulator under its budget.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from pyd4j.sched import zoo
from pyd4j.sched.bounds import lower_bound
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.policies import make_plan
from pyd4j.sched.simulator import ideal_time, simulate

from tests.sched.dags import random_graphs
from tests.sched.test_handworked import U, five, records

EPS = 1e-9
"""Relative tolerance on times: the simulator and `ideal_time` add the same step times in a
different order."""


@pytest.mark.parametrize("net", [five, zoo.small_cnn, zoo.small_resnet,
                                 lambda: zoo.alexnet(batch=2), lambda: zoo.resnet(50, batch=1)])
def test_ample_budget_runs_at_infinite_memory_speed_and_moves_nothing(net) -> None:
    g = net()
    cost = CostModel.for_device("k40c")
    # enough for every tensor at once plus the largest fastest-algorithm workspace
    budget = simulate(make_plan(g, "baseline"), cost).peak_bytes + \
        lower_bound(g, cost).workspace_bytes
    plan = make_plan(g, "superneurons", cost, budget, cache=True)
    r = simulate(plan, cost, budget=budget)
    assert r.time_s == pytest.approx(r.ideal_time_s, rel=EPS)
    assert r.bytes_offloaded == r.bytes_prefetched == r.recompute_s == r.stall_s == 0
    # the minimum-memory plan of the same policy is slower: it moves and recomputes
    small = simulate(make_plan(g, "superneurons", cost), cost)
    assert small.bytes_prefetched > 0 and small.time_s > r.time_s
    # the other pooled policies use the no-workspace algorithm and match that compute time
    for policy in ("utp", "recompute"):
        r = simulate(make_plan(g, policy, cost, budget, cache=True), cost, budget=budget)
        assert r.time_s == pytest.approx(ideal_time(plan, cost, fastest_conv=False), rel=EPS)
        assert r.bytes_offloaded == r.bytes_prefetched == r.recompute_s == 0


def test_delayed_free_by_hand() -> None:
    """five() under UTP (see test_handworked): the minimum-memory plan frees C right after A's
    forward step, so that FREE waits for C's offload. With a budget of 198u (the UTP minimum)
    the cache keeps C until F's dW (64u) needs the room, at F's backward step: the offload
    overlaps the rest of the forward pass, and C comes back right after F's backward step. With
    199u nothing is evicted: no copies at all."""
    g = five()
    cost = CostModel.for_device("k40c")
    assert simulate(make_plan(g, "utp", cost), cost).peak_bytes == 198 * U
    plan = make_plan(g, "utp", cost, 198 * U, cache=True)
    recs = records(plan)
    assert recs[recs.index("FORWARD C") + 1] == "OFFLOAD C:Y"
    assert recs.index("FREE C:Y") == recs.index("ALLOC A:DY") + 1  # evicted for F's dW
    assert recs[recs.index("BACKWARD F") + 1:recs.index("BACKWARD A")] == [
        "FREE F:DW", "FREE F:DY", "ALLOC C:Y", "PREFETCH C:Y"]
    r = simulate(plan, cost, budget=198 * U)
    assert r.peak_bytes == 198 * U
    # the two-stream timeline by hand: T per copy, f/b/u forward/backward/update per layer
    f, b, u = cost.layer_times(g)
    T = cost.transfer_time(U)
    free_c = max(f[0] + f[1] + T, sum(f) + b[4] + u[4])  # FREE C:Y waits for the offload
    total = free_c + (b[3] + u[3]) + T + (b[2] + u[2]) + (b[1] + u[1])
    assert r.time_s == pytest.approx(total, rel=EPS)
    assert r.time_s <= simulate(make_plan(g, "utp", cost), cost).time_s
    roomy = make_plan(g, "utp", cost, 199 * U, cache=True)
    r = simulate(roomy, cost, budget=199 * U)
    assert "OFFLOAD C:Y" not in records(roomy) and r.bytes_prefetched == 0
    assert r.time_s == pytest.approx(sum(f) + sum(b) + sum(u), rel=EPS)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(max_layers=10))
def test_more_memory_is_never_slower(g) -> None:
    cost = CostModel.for_device("k40c")
    small = simulate(make_plan(g, "superneurons", cost, budget=0), cost)  # no workspace
    top = simulate(make_plan(g, "baseline"), cost).peak_bytes + lower_bound(g, cost).workspace_bytes
    for policy in ("utp", "recompute", "superneurons"):
        low = simulate(make_plan(g, policy, cost), cost).peak_bytes
        if policy == "superneurons":
            low = small.peak_bytes
        times = []
        for k in range(6):
            budget = low + (top - low) * k // 5
            r = simulate(make_plan(g, policy, cost, budget, cache=True), cost, budget=budget)
            times.append(r.time_s)
        assert all(b <= a * (1 + EPS) for a, b in zip(times, times[1:])), (policy, times)
        if policy == "superneurons":
            assert times[-1] == pytest.approx(r.ideal_time_s, rel=EPS)


@pytest.mark.parametrize("net", [zoo.small_cnn, zoo.small_resnet])
@pytest.mark.parametrize("policy", ["utp", "recompute", "superneurons"])
def test_time_optimised_plans_execute_exactly(net, policy: str) -> None:
    """The numpy executor runs tensor-cache plans (evictions, delayed frees, prefetches,
    recomputation) with gradients equal to a plain run and measured peak == simulated peak."""
    import numpy as np

    from pyd4j.device.executor import execute, init_params, random_batch, reference_run
    from pyd4j.device.host import HostBackend

    g = net()
    params = init_params(g)
    x, labels = random_batch(g)
    ref = reference_run(g, x, labels, params)
    low = simulate(make_plan(g, policy, budget=0)).peak_bytes  # minimum memory, no workspace
    top = simulate(make_plan(g, "baseline")).peak_bytes
    moved = 0
    for budget in (low, (low + top) // 2, top):
        plan = make_plan(g, policy, budget=budget, cache=True)
        sim = simulate(plan, budget=budget)
        moved += sim.bytes_prefetched
        res = execute(plan, HostBackend(budget_bytes=sim.device_peak_bytes,
                                        arena_bytes=sim.arena_peak_bytes), x, labels, params)
        assert all(np.array_equal(res.grads[k], ref.grads[k]) for k in ref.grads)
        assert res.stats.peak_bytes == sim.device_peak_bytes
        assert res.stats.arena_peak_bytes == sim.arena_peak_bytes
        assert res.stats.bytes_prefetched == sim.bytes_prefetched
    assert moved > 0
