"""The exact optimum (MILP): its plans replay in the one simulator within the budget, at exactly
the time the solver reports, reach the hand-worked lower bound, and no reference policy beats
them under the same budget (tiny graphs: each solve takes well under a second)."""

from __future__ import annotations

import pytest

from pyd4j.sched import zoo
from pyd4j.sched.bounds import lower_bound
from pyd4j.sched.checkpoint import plan_checkpoint, thresholds
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.dtr import DTRFailed, plan_dtr
from pyd4j.sched.optimum import OptimumError, min_budget, optimum_plan, smallest_budget
from pyd4j.sched.plan import Op
from pyd4j.sched.policies import make_plan
from pyd4j.sched.simulator import InfeasiblePlan, simulate

from tests.sched.test_handworked import U, five

COST = CostModel.for_device("k40c")


def _time(plan, budget: int) -> float | None:
    try:
        return simulate(plan, COST, budget).time_s
    except InfeasiblePlan:
        return None


def test_smallest_budget_is_the_hand_worked_bound() -> None:
    # test_handworked: no plan of the five-layer net goes below 197u, and recomputation reaches it
    g = five()
    assert lower_bound(g).lower_bound_bytes == 197 * U
    best, proven, status = smallest_budget(g, COST)
    assert (best, proven, status) == (197 * U, 197 * U, "Optimal")
    opt = min_budget(g, COST)
    sim = simulate(opt.plan, COST, 197 * U)
    assert sim.device_peak_bytes <= 197 * U
    assert sim.time_s == pytest.approx(opt.time_s, rel=1e-9)
    # C is needed again at A's backward but cannot stay through F's: it comes back
    assert opt.plan.count(Op.RECOMPUTE) + opt.plan.count(Op.PREFETCH) >= 1


def test_ample_budget_gives_the_ideal_time() -> None:
    # with memory to spare, nothing moves, nothing is rebuilt and every conv step takes the
    # fastest algorithm: the iteration time with infinite memory
    g = five()
    opt = optimum_plan(g, COST, 1 << 30)
    sim = simulate(opt.plan, COST, 1 << 30)
    assert opt.plan.count(Op.RECOMPUTE) == opt.plan.count(Op.PREFETCH) == 0
    assert opt.time_s == pytest.approx(sim.ideal_time_s, rel=1e-9)
    assert sim.time_s == pytest.approx(opt.time_s, rel=1e-9)


def test_budget_below_the_smallest_is_refused() -> None:
    with pytest.raises(OptimumError, match="fits"):
        optimum_plan(five(), COST, 196 * U)


@pytest.mark.parametrize("build,tightest", [(zoo.small_cnn, True),
                                            (lambda: zoo.small_resnet(blocks=1), False)],
                         ids=["cnn", "resnet"])
def test_replays_within_budget_at_the_solver_time_and_beats_reference_policies(
        build, tightest: bool) -> None:
    # the residual net (JOIN, FORK, CONCAT, ELTWISE, in-place gradients) skips its smallest
    # budget, where the solver takes tens of seconds
    g = build()
    smallest = smallest_budget(g, COST)[0]
    roomy = simulate(make_plan(g, "liveness", COST), COST).peak_bytes
    for budget in ((smallest,) if tightest else ()) + ((smallest + roomy) // 2, roomy):
        opt = optimum_plan(g, COST, budget)
        sim = simulate(opt.plan, COST, budget)
        assert sim.device_peak_bytes <= budget
        assert sim.time_s == pytest.approx(opt.time_s, rel=1e-9)
        others = [_time(make_plan(g, "superneurons", COST, budget, cache=True), budget)]
        others += [_time(plan_checkpoint(g, COST, budget, th), budget) for th in thresholds(g, 6)]
        try:
            others.append(_time(plan_dtr(g, COST, budget), budget))
        except DTRFailed:
            pass
        fitting = [t for t in others if t is not None]
        assert fitting, "no reference policy fits: the check would be empty"
        assert opt.time_s <= min(fitting) * (1 + 1e-9)
