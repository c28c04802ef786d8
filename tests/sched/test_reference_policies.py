"""The reference policies of the budget sweeps: sqrt(n) checkpointing (Chen et al. 2016) and the
DTR-style online greedy replay in the one simulator and keep to their budgets."""

from __future__ import annotations

import math

import pytest

from pyd4j.sched import zoo
from pyd4j.sched.bounds import lower_bound
from pyd4j.sched.checkpoint import checkpoints, plan_checkpoint, thresholds
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.dtr import DTRFailed, plan_dtr
from pyd4j.sched.plan import Op
from pyd4j.sched.policies import make_plan
from pyd4j.sched.simulator import simulate

from tests.sched.test_handworked import U, five

COST = CostModel.for_device("k40c")


def test_chen_greedy_checkpoints_by_hand() -> None:
    # five-layer net, every output 1u (256 B): with a threshold of 1.5u the running sum passes
    # it at every second layer; DATA and the SOFTMAX loss are always kept
    g = five()
    assert checkpoints(g, 1.5 * U) == {0, 2, 4}  # D (kept), A (sum 2u), S (kept)
    assert checkpoints(g, 10 * U) == {0, 4}
    assert checkpoints(g, 0) == {0, 1, 2, 3, 4}


def test_sqrt_n_trades_memory_for_recomputation() -> None:
    g = zoo.vgg(16, batch=2, image=64)
    plans = [plan_checkpoint(g, COST, 0, th) for th in thresholds(g, 8)]
    results = [simulate(p, COST) for p in plans]
    assert results[0].recompute_s == 0  # every layer a checkpoint: nothing to rebuild
    assert results[0].peak_bytes == simulate(make_plan(g, "liveness", COST), COST).peak_bytes
    default = simulate(plan_checkpoint(g, COST, 0), COST)
    assert default.recompute_s > 0
    assert default.peak_bytes < results[0].peak_bytes
    assert plan_checkpoint(g, COST, 0).notes["threshold"] == pytest.approx(
        sum(g.deps.ysz) / math.sqrt(len(g)))


def test_dtr_keeps_to_its_budget_and_says_when_it_cannot() -> None:
    g = zoo.small_cnn()
    roomy = simulate(make_plan(g, "liveness", COST), COST).peak_bytes
    free_run = plan_dtr(g, COST, roomy)
    assert free_run.count(Op.RECOMPUTE) == 0  # nothing evicted when everything fits
    tight = (roomy + lower_bound(g).lower_bound_bytes) // 2
    plan = plan_dtr(g, COST, tight)
    assert plan.count(Op.RECOMPUTE) > 0
    assert simulate(plan, COST, tight).device_peak_bytes <= tight
    with pytest.raises(DTRFailed, match="pinned"):
        plan_dtr(g, COST, lower_bound(g).lower_bound_bytes // 2)
