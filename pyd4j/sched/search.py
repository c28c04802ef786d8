"""Largest batch / deepest ResNet that fits a device under a policy.

Peak memory grows monotonically with batch and with ResNet depth, so the searches bisect.
The depth search starts from a linear extrapolation (resident state grows linearly with the
conv4_x blocks, the working set does not) and then brackets and bisects around it with real
plans; the answer is always confirmed by a full simulation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pyd4j.sched import zoo
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.graph import Graph
from pyd4j.sched.policies import make_plan
from pyd4j.sched.simulator import SimResult, peak_bytes, simulate


@dataclass
class SearchResult:
    value: int  # largest feasible batch or depth (0: nothing fits)
    result: SimResult | None  # full simulation at `value`
    evaluations: int


def _largest(ok: Callable[[int], bool], lo: int, guess: int | None = None,
             limit: int = 1 << 20) -> tuple[int, int]:
    """Largest x >= lo with ok(x) (ok monotone: true then false); (x or lo-1, evaluations)."""
    evals = 0

    def test(x: int) -> bool:
        nonlocal evals
        evals += 1
        return ok(x)

    if guess is not None and guess > lo:
        # bracket around the guess
        step = max(1, guess // 64)
        if test(guess):
            good, bad = guess, guess + step
            while bad <= limit and test(bad):
                good, step = bad, step * 2
                bad = good + step
        else:
            bad, good = guess, guess - step
            while good > lo and not test(good):
                bad, step = good, step * 2
                good = max(lo, bad - step)
            if good == lo and not test(lo):
                return lo - 1, evals
    else:
        if not test(lo):
            return lo - 1, evals
        good, bad = lo, lo * 2
        while bad <= limit and test(bad):
            good, bad = bad, bad * 2
    bad = min(bad, limit + 1)
    while bad - good > 1:
        mid = (good + bad) // 2
        if test(mid):
            good = mid
        else:
            bad = mid
    return good, evals


def max_batch(build: Callable[[int], Graph], policy: str, cost: CostModel,
              capacity: int | None = None) -> SearchResult:
    """Largest batch whose plan's peak (without optional workspace) fits `capacity`."""
    cap = capacity if capacity is not None else cost.device.memory_bytes
    ok = lambda b: peak_bytes(make_plan(build(b), policy, cost, cap)) <= cap  # noqa: E731
    best, evals = _largest(ok, 1, limit=1 << 16)
    if best < 1:
        return SearchResult(0, None, evals)
    return SearchResult(best, simulate(make_plan(build(best), policy, cost, cap), cost), evals)


def max_resnet_depth(policy: str, cost: CostModel, batch: int = 16, image: int = 227,
                     capacity: int | None = None, profile: str = "cudnn",
                     layout: str = "standard") -> SearchResult:
    """Deepest bottleneck ResNet-N (extra blocks in conv4_x of `layout`, see
    `pyd4j.sched.zoo.resnet_stages`) whose plan fits `capacity`."""
    cap = capacity if capacity is not None else cost.device.memory_bytes
    a, b, d = zoo.LAYOUTS[layout]

    def graph(k: int) -> Graph:
        return zoo.resnet(stages=(a, b, k, d), batch=batch, image=image).with_profile(profile)

    def peak(k: int) -> int:
        return peak_bytes(make_plan(graph(k), policy, cost, cap))

    p1, p2 = peak(4), peak(12)
    guess = None
    if p2 > p1 and p1 <= cap:
        guess = max(2, int(4 + (cap - p1) * 8 / (p2 - p1)))
    best, evals = _largest(lambda k: peak(k) <= cap, 1, guess)
    evals += 2
    if best < 1:
        return SearchResult(0, None, evals)
    g = graph(best)
    return SearchResult(zoo.resnet_depth((a, b, best, d)),
                        simulate(make_plan(g, policy, cost, cap), cost), evals)
