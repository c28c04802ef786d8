"""Largest batch / deepest ResNet that fits a device under a policy.

Peak memory grows monotonically with batch and with ResNet depth -- about affinely: resident
state grows with the conv4_x blocks, the working set does not -- so the searches interpolate on
the peak (regula falsi, bisection when that stalls) and need a handful of plans. The peak of a
candidate is the policy's minimum-memory peak (`pyd4j.sched.policies.minimum_peak`); the answer
is confirmed by a full plan and simulation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pyd4j.sched import zoo
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.deps import FrameworkDeps
from pyd4j.sched.graph import Graph
from pyd4j.sched.plan import gc_paused
from pyd4j.sched.policies import evaluate, make_plan, minimum_peak
from pyd4j.sched.simulator import SimResult, simulate


MAX_SEARCH_BATCH = 1 << 16
"""The largest batch `max_batch` tries."""
MAX_SEARCH_BLOCKS = 10_000
"""The most conv4_x blocks `max_resnet_depth` builds: ResNet-30,011, about 100,000 layers, a few
hundred MB and seconds per candidate; the search's memory and time grow with the depth it tries."""


class SearchLimit(ValueError):
    """Even the search's largest candidate fits: the answer lies past what it builds."""


@dataclass
class SearchResult:
    value: int  # largest feasible batch or depth (0: nothing fits)
    result: SimResult | None  # full simulation at `value`
    evaluations: int


def _largest(peak: Callable[[int], int], cap: int, lo: int = 1,
             limit: int = 1 << 20) -> tuple[int, int]:
    """Largest x in [lo, limit] with peak(x) <= cap (peak non-decreasing); (x or lo-1,
    evaluations). Interpolates on the peak, which is nearly affine in x here; `limit` also when
    the first two points put the answer past four times the limit."""
    evals = 0

    def f(x: int) -> int:
        nonlocal evals
        evals += 1
        return peak(x)

    a, pa = lo, f(lo)
    if pa > cap:
        return lo - 1, evals
    b = min(limit, max(lo + 1, 2 * lo, lo + 8))
    if b == a:
        return a, evals
    pb = f(b)
    if pb <= cap and pb > pa and b + (cap - pb) * (b - a) / (pb - pa) > 4 * limit:
        return limit, evals  # the answer lies far past the limit: not worth building up to it
    while pb <= cap:  # extrapolate past the capacity
        if b == limit:
            return limit, evals
        slope = (pb - pa) / (b - a)
        step = int((cap - pb) / slope) + 1 if slope > 0 else b - a
        a, pa = b, pb
        b = min(limit, b + max(1, min(step, 4 * b)))
        pb = f(b)
    # a fits, b does not: interpolate, falling back to bisection when an end does not move
    stuck = 0
    while b - a > 1:
        if stuck < 2 and pb > pa:
            m = a + int((cap - pa) * (b - a) / (pb - pa))
            m = min(max(m, a + 1), b - 1)
        else:
            m = (a + b) // 2
        pm = f(m)
        if pm <= cap:
            stuck = stuck + 1 if m - a < (b - a) // 4 and b - m > 1 else 0
            a, pa = m, pm
        else:
            stuck = stuck + 1 if b - m < (b - a) // 4 and m - a > 1 else 0
            b, pb = m, pm
    return a, evals


@gc_paused
def max_batch(build: Callable[[int], Graph], policy: str, cost: CostModel,
              capacity: int | None = None) -> SearchResult:
    """Largest batch whose plan's peak (without optional workspace) fits `capacity`."""
    cap = capacity if capacity is not None else cost.device.memory_bytes
    best, evals = _largest(lambda b: minimum_peak(build(b), policy), cap, 1, limit=MAX_SEARCH_BATCH)
    if best == MAX_SEARCH_BATCH:
        raise SearchLimit(f"a budget of {cap} bytes holds even batch {MAX_SEARCH_BATCH} (the largest this search "
                          f"tries) under {policy}; give a smaller budget, or plan that batch directly")
    if best < 1:
        return SearchResult(0, None, evals)
    return SearchResult(best, simulate(make_plan(build(best), policy, cost, cap), cost), evals)


@gc_paused
def max_resnet_depth(policy: str, cost: CostModel, batch: int = 16, image: int = 227,
                     capacity: int | None = None, framework: "str | FrameworkDeps" = "cudnn",
                     layout: str = "standard", fit: str = "peak") -> SearchResult:
    """Deepest bottleneck ResNet-N (extra blocks in conv4_x of `layout`, see
    `pyd4j.sched.zoo.resnet_stages`) whose plan fits `capacity`: its accounted peak
    (`fit="peak"`), or the high-water of a first-fit arena holding its minimum-memory plan
    without optional workspace (`fit="arena"`: fragmentation included)."""
    cap = capacity if capacity is not None else cost.device.memory_bytes
    a, b, d = zoo.LAYOUTS[layout]
    if fit not in ("peak", "arena"):
        raise ValueError(f"fit {fit!r} not in ('peak', 'arena')")

    def graph(k: int) -> Graph:
        return zoo.resnet(stages=(a, b, k, d), batch=batch, image=image).with_framework(framework)

    def arena(k: int) -> int:
        return evaluate(make_plan(graph(k), policy, cost, 0), cost).arena_peak_bytes

    best, evals = _largest(
        arena if fit == "arena" else (lambda k: minimum_peak(graph(k), policy)), cap, 1, limit=MAX_SEARCH_BLOCKS)
    if best == MAX_SEARCH_BLOCKS:
        deepest = zoo.resnet_depth((a, b, MAX_SEARCH_BLOCKS, d))
        raise SearchLimit(f"a budget of {cap} bytes holds even ResNet-{deepest} (the deepest this search builds, "
                          f"{MAX_SEARCH_BLOCKS} blocks in conv4_x) at batch {batch} under {policy}; give a smaller "
                          "budget or a larger batch")
    if best < 1:
        return SearchResult(0, None, evals)
    g = graph(best)
    return SearchResult(zoo.resnet_depth((a, b, best, d)),
                        simulate(make_plan(g, policy, cost, cap), cost), evals)
