"""Property: on random DAGs every policy's plan is feasible and never above the baseline."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from pyd4j.sched.bounds import lower_bound
from pyd4j.sched.policies import POLICIES, make_plan
from pyd4j.sched.simulator import simulate

from tests.sched.dags import random_graphs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_every_plan_is_feasible_and_not_above_baseline(g) -> None:
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
