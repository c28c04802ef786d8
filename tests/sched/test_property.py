"""Properties on random DAGs under both frameworks' dependencies: every policy's plan is feasible,
never below the lower bound and never above the baseline."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from pyd4j.sched.bounds import lower_bound
from pyd4j.sched.policies import POLICIES, make_plan
from pyd4j.sched.simulator import simulate

from tests.sched.dags import random_graphs


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(frameworks=("cudnn", "dl4j")))
def test_no_plan_goes_below_the_bound_or_above_the_baseline(g) -> None:
    base = simulate(make_plan(g, "baseline"))
    bound = lower_bound(g).lower_bound_bytes
    assert base.peak_bytes >= bound
    for policy in POLICIES:
        for cache in (False, True):
            plan = make_plan(g, policy, budget=base.peak_bytes, cache=cache)
            r = simulate(plan, budget=base.peak_bytes if policy != "superneurons" else None)
            assert bound <= r.peak_bytes <= base.peak_bytes, policy
            if policy == "superneurons":
                assert r.device_peak_bytes <= max(base.peak_bytes, r.peak_bytes)
        # a tight budget (the minimum-memory plan's own peak) still fits
        low = simulate(make_plan(g, policy)).peak_bytes
        assert bound <= low
        simulate(make_plan(g, policy, budget=low, cache=True), budget=low)
