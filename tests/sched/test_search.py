"""The searches: interpolation finds the same answer as brute force, and the peak they bisect on
is the full plan's."""

from __future__ import annotations

import random

import pytest

from pyd4j.sched import zoo
from pyd4j.sched.policies import POLICIES, make_plan, minimum_peak
from pyd4j.sched.search import _largest
from pyd4j.sched.simulator import simulate


def test_largest_matches_brute_force_on_monotone_steps() -> None:
    rng = random.Random(1)
    for _ in range(2000):
        n = rng.randint(1, 200)
        vals = sorted(rng.choices(range(1000), k=n))
        cap = rng.randint(-10, 1100)
        got, _ = _largest(lambda x: vals[x - 1], cap, 1, limit=n)
        assert got == max([x for x in range(1, n + 1) if vals[x - 1] <= cap], default=0)


def test_largest_needs_few_plans_on_an_affine_peak() -> None:
    got, evals = _largest(lambda k: 10_000 + 37 * k + k % 3, 10_000 + 37 * 4000, 1)
    assert got == 3999 and evals <= 8


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("net", [zoo.small_resnet, lambda: zoo.resnet(50, batch=2)])
def test_minimum_peak_is_the_plans_peak(net, policy: str) -> None:
    g = net()
    assert minimum_peak(g, policy) == simulate(make_plan(g, policy)).peak_bytes


def test_depth_that_fits_a_first_fit_arena() -> None:
    """Placing the plan in an arena that never moves a buffer needs at least the accounted
    bytes, so the arena-fit depth is never deeper; at it the arena fits, one block deeper not."""
    from pyd4j.sched.costmodel import CostModel
    from pyd4j.sched.policies import evaluate
    from pyd4j.sched.search import max_resnet_depth

    cost = CostModel.for_device("k40c")
    cap = 1 << 30
    peak = max_resnet_depth("superneurons", cost, batch=2, image=64, capacity=cap)
    arena = max_resnet_depth("superneurons", cost, batch=2, image=64, capacity=cap, fit="arena")
    assert 0 < arena.value <= peak.value

    def arena_of(depth: int) -> int:
        g = zoo.resnet(depth, batch=2, image=64)
        return evaluate(make_plan(g, "superneurons", cost, 0), cost).arena_peak_bytes

    assert arena_of(arena.value) <= cap < arena_of(arena.value + 3)
