"""The simulator rejects infeasible plans and times overlap as the stream model says."""

from __future__ import annotations

import pytest

from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.plan import Op, Plan, Step, tid, Kind
from pyd4j.sched.policies import make_plan
from pyd4j.sched.simulator import InfeasiblePlan, simulate

from tests.sched.test_handworked import U, five


def edited(plan: Plan, fn) -> Plan:
    return Plan(plan.graph, "edited", fn(list(plan.steps)), plan.nbytes)


def index(plan: Plan, op: Op, arg: int) -> int:
    return next(k for k, s in enumerate(plan.steps) if s.op == op and s.arg == arg)


def test_use_before_produce() -> None:
    plan = make_plan(five(), "liveness")
    k = index(plan, Op.FORWARD, 1)  # CONV before DATA
    j = index(plan, Op.FORWARD, 0)

    def swap(steps):
        steps[k], steps[j] = steps[j], steps[k]
        return steps

    with pytest.raises(InfeasiblePlan, match="before it is produced"):
        simulate(edited(plan, swap))


def test_free_of_a_live_tensor() -> None:
    plan = make_plan(five(), "liveness")
    k = index(plan, Op.FORWARD, 2) + 1  # free conv output right after ACT's forward

    def early_free(steps):
        return steps[:k] + [Step(Op.FREE, tid(1, Kind.Y))] + steps[k:-1]

    with pytest.raises(InfeasiblePlan, match="free of a live tensor") as e:
        simulate(edited(plan, early_free))
    assert "BACKWARD A" in e.value.record


def test_over_budget_names_the_numbers() -> None:
    plan = make_plan(five(), "liveness")
    with pytest.raises(InfeasiblePlan, match=f"{199 * U} live bytes exceed the budget of "
                                             f"{198 * U}"):
        simulate(plan, budget=198 * U)
    simulate(plan, budget=199 * U)


def test_double_alloc_free_prefetch_without_copy_and_missing_backward() -> None:
    plan = make_plan(five(), "utp")
    with pytest.raises(InfeasiblePlan, match="already allocated"):
        simulate(edited(plan, lambda s: s[:1] + s[:1] + s[1:]))
    with pytest.raises(InfeasiblePlan, match="not allocated"):
        simulate(edited(plan, lambda s: [Step(Op.FREE, tid(1, Kind.Y))] + s))
    off = index(plan, Op.OFFLOAD, tid(1, Kind.Y))
    with pytest.raises(InfeasiblePlan, match="no host copy"):
        simulate(edited(plan, lambda s: s[:off] + s[off + 1:]))
    last_bw = index(plan, Op.BACKWARD, 1)
    with pytest.raises(InfeasiblePlan, match="backward steps missing"):
        simulate(edited(plan, lambda s: s[:last_bw]))
    bw_a = index(plan, Op.BACKWARD, 2)
    bw_f = index(plan, Op.BACKWARD, 3)

    def reorder(s):
        s[bw_a], s[bw_f] = s[bw_f], s[bw_a]
        return s

    with pytest.raises(InfeasiblePlan):
        simulate(edited(plan, reorder))


def test_gradient_must_be_complete() -> None:
    from pyd4j.sched.zoo import small_resnet

    plan = make_plan(small_resnet(), "liveness")
    # move the backward step of the fork before one of its consumers' backward steps
    fork = next(layer.id for layer in plan.graph.layers if layer.name == "fork")
    k = index(plan, Op.BACKWARD, fork)
    first_consumer = index(plan, Op.BACKWARD, plan.graph.consumers[fork][-1])

    def early(s):
        step = s.pop(k)
        s.insert(first_consumer + 1, step)
        return s

    with pytest.raises(InfeasiblePlan, match="incomplete"):
        simulate(edited(plan, early))


def test_timing_by_hand() -> None:
    """Baseline: no transfers, time = sum of compute; UTP adds the copies that do not overlap."""
    g = five()
    cost = CostModel.for_device("k40c")
    fwd, bwd, upd = cost.layer_times(g)
    base = simulate(make_plan(g, "baseline"), cost)
    assert base.time_s == pytest.approx(sum(fwd) + sum(bwd) + sum(upd))
    assert base.stall_s == 0 and base.bytes_offloaded == 0
    utp = simulate(make_plan(g, "utp"), cost)
    t = cost.transfer_time(g.layers[1].out_bytes)
    assert utp.bytes_offloaded == U and utp.bytes_prefetched == U
    # the offload (10 us latency) cannot hide behind the tiny ACT forward: FREE waits for it
    assert utp.stall_s > 0.9 * t
    assert utp.time_s >= base.time_s + t - 2 * (sum(fwd) + sum(bwd))


def test_disk_tier_when_host_memory_is_short() -> None:
    g = five()
    cost = CostModel.for_device("k40c")
    cost.host_memory_bytes = 0
    r = simulate(make_plan(g, "utp"), cost)
    assert r.host_peak_bytes == 0 and r.disk_peak_bytes == U
    slow = simulate(make_plan(g, "utp"), cost).time_s
    cost2 = CostModel.for_device("k40c")
    assert slow > simulate(make_plan(g, "utp"), cost2).time_s


def test_device_profiles_cover_the_issue_and_load_overrides(tmp_path) -> None:
    for name in ("k40c", "v100-16", "v100-32", "a100-40", "a100-80", "h100", "h200"):
        c = CostModel.for_device(name)
        assert c.device.memory_bytes > 10 << 30 and c.device.tflops > 1
    f = tmp_path / "measured.json"
    f.write_text('{"devices": {"k40c": {"link_gbps": 6.5}}, "compute_efficiency": 0.5}')
    c = CostModel.for_device("k40c", f)
    assert c.device.link_gbps == 6.5
    assert c.device.memory_bytes == CostModel.for_device("k40c").device.memory_bytes
    # the global default applies where a profile has no measured efficiency; k40c has a fitted one
    assert CostModel.for_device("v100-16", f).efficiency == 0.5
    assert c.efficiency == c.device.efficiency == CostModel.for_device("k40c").efficiency != 0.5
    f.write_text('{"devices": {"k40c": {"efficiency": 0.5}}}')
    assert CostModel.for_device("k40c", f).efficiency == 0.5
    with pytest.raises(KeyError, match="unknown device 'p100'"):
        CostModel.for_device("p100")


def test_model_rules_partial_gradients_resident_tensors_and_in_place_renames() -> None:
    plan = make_plan(five(), "liveness")
    # C's gradient got its one contribution from A's backward (renamed into place); freeing it
    # before C's backward read it loses the sum
    k = index(plan, Op.BACKWARD, 1)
    with pytest.raises(InfeasiblePlan, match="frees C:DY before its backward step read it"):
        simulate(edited(plan, lambda s: s[:k] + [Step(Op.FREE, tid(1, Kind.DY))] + s[k:]))
    # gradients never go to the host
    with pytest.raises(InfeasiblePlan, match="only layer outputs"):
        simulate(edited(plan, lambda s: s[:k] + [Step(Op.OFFLOAD, tid(1, Kind.DY))] + s[k:]))
    # parameters and momentum stay for the whole run, allocated before any compute step
    with pytest.raises(InfeasiblePlan, match="F:W, which stays allocated"):
        simulate(edited(plan, lambda s: s + [Step(Op.FREE, tid(3, Kind.W))]))
    late = [st for st in plan.steps if st != Step(Op.ALLOC, tid(3, Kind.M))]
    with pytest.raises(InfeasiblePlan, match="F:M and 0 more resident tensors are not allocated"):
        simulate(edited(plan, lambda s: late))
    # an in-place backward step must be followed by the MOVE naming where its result went
    mv = index(plan, Op.MOVE, tid(1, Kind.DY))
    with pytest.raises(InfeasiblePlan, match="writes C:DY, which is not allocated"):
        simulate(edited(plan, lambda s: s[:mv] + s[mv + 1:]))
    with pytest.raises(InfeasiblePlan, match="without the in-place step"):
        simulate(edited(plan, lambda s: s[:mv - 1] + [s[mv], s[mv - 1]] + s[mv + 1:]))
