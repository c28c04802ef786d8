"""Plans run on the native agent (host build here) exactly as the reference run computes them,
with the measured peak equal to the simulated one, byte counters equal, and the budget
enforced. The GPU twin is test_native_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

from pyd4j.device.backend import OutOfDeviceMemory
from pyd4j.device.executor import execute, init_params, random_batch, reference_run
from pyd4j.device.native import NativeBackend
from pyd4j.sched import zoo
from pyd4j.sched.policies import POLICIES, make_plan
from pyd4j.sched.simulator import simulate


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), f"layer {k} differs"


@pytest.mark.parametrize("net", ["small_cnn", "small_resnet"])
@pytest.mark.parametrize("policy", POLICIES)
def test_plan_runs_exactly_with_simulated_peak(net, policy):
    g = getattr(zoo, net)()
    x, labels = random_batch(g)
    params = init_params(g)
    ref = reference_run(g, x, labels, params)
    plan = make_plan(g, policy)
    sim = simulate(plan)
    backend = NativeBackend(budget_bytes=sim.device_peak_bytes)
    try:
        run = execute(plan, backend, x, labels, params)
        agent = backend.agent_stats()
    finally:
        backend.close()
    _same(run.grads, ref.grads)
    _same(run.params, ref.params)
    assert run.loss == ref.loss
    assert run.stats.peak_bytes == sim.device_peak_bytes
    assert run.stats.bytes_offloaded == sim.bytes_offloaded
    assert run.stats.bytes_prefetched == sim.bytes_prefetched
    assert run.stats.live_bytes == 0 or run.stats.live_bytes <= sim.device_peak_bytes
    # what the agent moved, in unaligned bytes, is no more than the aligned accounting
    assert agent["bytes_offloaded"] <= sim.bytes_offloaded
    # the C++ first-fit arena places the buffers where the simulated one does
    assert agent["device_high_water"] == run.stats.arena_peak_bytes == sim.arena_peak_bytes


def test_budget_below_the_plan_is_refused():
    g = zoo.small_resnet()
    x, labels = random_batch(g)
    plan = make_plan(g, "superneurons")
    sim = simulate(plan)
    backend = NativeBackend(budget_bytes=sim.device_peak_bytes - 256)
    try:
        with pytest.raises(OutOfDeviceMemory) as e:
            execute(plan, backend, x, labels, init_params(g))
    finally:
        backend.close()
    assert e.value.budget == sim.device_peak_bytes - 256


def test_several_training_steps_under_a_budget_below_baseline():
    """CPU twin of the GPU benchmark: a ResNet-style net trained for a few steps under a budget
    smaller than its baseline peak, parameters identical to the unconstrained run each step."""
    g = zoo.small_resnet(batch=8, image=16, blocks=3)
    baseline = simulate(make_plan(g, "baseline"))
    plan = make_plan(g, "superneurons")
    sim = simulate(plan)
    assert sim.device_peak_bytes < baseline.device_peak_bytes
    params_ref = init_params(g)
    params_run = {k: v.copy() for k, v in params_ref.items()}
    for step in range(3):  # the executor runs one iteration per backend (parameters upload)
        x, labels = random_batch(g, seed=step)
        ref = reference_run(g, x, labels, params_ref)
        backend = NativeBackend(budget_bytes=sim.device_peak_bytes)
        try:
            run = execute(plan, backend, x, labels, params_run)
            agent = backend.agent_stats()
        finally:
            backend.close()
        _same(run.grads, ref.grads)
        _same(run.params, ref.params)
        params_ref, params_run = ref.params, run.params
        assert run.stats.peak_bytes == sim.device_peak_bytes
        assert run.stats.bytes_offloaded == sim.bytes_offloaded > 0
        assert agent["compute_seconds"] > 0
        assert agent["overlap_seconds"] <= agent["copy_busy_seconds"] + 1e-9
