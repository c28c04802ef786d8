"""The numpy executor runs plans for real: gradients equal a plain run's bit for bit and the
arena's measured peak equals the simulator's peak exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from pyd4j.device.backend import Backend, OutOfDeviceMemory
from pyd4j.device.executor import execute, init_params, random_batch, reference_run
from pyd4j.device.host import HostBackend
from pyd4j.sched import zoo
from pyd4j.sched.graph import Graph
from pyd4j.sched.policies import POLICIES, make_plan
from pyd4j.sched.simulator import simulate

from tests.sched.dags import random_graphs


def run_and_compare(g: Graph, policy: str, cache: bool = False, budget: int | None = None):
    params = init_params(g)
    x, labels = random_batch(g)
    ref = reference_run(g, x, labels, params)
    plan = make_plan(g, policy, budget=budget, cache=cache)
    sim = simulate(plan)
    backend = HostBackend(budget_bytes=sim.device_peak_bytes, arena_bytes=sim.arena_peak_bytes)
    res = execute(plan, backend, x, labels, params)
    assert set(res.grads) == set(ref.grads)
    for k in ref.grads:
        assert np.array_equal(res.grads[k], ref.grads[k]), g.layers[k].name
        assert np.array_equal(res.params[k], ref.params[k]), g.layers[k].name
    assert res.loss == ref.loss
    assert res.stats.peak_bytes == sim.device_peak_bytes
    assert res.stats.arena_peak_bytes == sim.arena_peak_bytes >= sim.device_peak_bytes
    return plan, sim, res


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("net", [zoo.small_cnn, zoo.small_resnet])
def test_gradients_and_peak_equal(net, policy: str) -> None:
    g = net()
    plan, sim, res = run_and_compare(g, policy, budget=simulate(make_plan(g, "baseline")).peak_bytes)
    if policy in ("utp", "recompute", "superneurons"):
        assert res.stats.bytes_offloaded > 0 and res.stats.bytes_prefetched > 0
    if policy == "superneurons":
        assert any(s.ws for s in plan.steps)


@pytest.mark.parametrize("net", [zoo.small_cnn, zoo.small_resnet])
def test_lru_cache_plans_run_exactly_too(net) -> None:
    g = net()
    tight = simulate(make_plan(g, "recompute")).peak_bytes
    budget = tight + (simulate(make_plan(g, "baseline")).peak_bytes - tight) // 2
    plan, sim, res = run_and_compare(g, "recompute", cache=True, budget=budget)
    assert tight <= sim.peak_bytes <= budget
    assert sim.bytes_prefetched < simulate(make_plan(g, "recompute")).bytes_prefetched


def test_budget_is_enforced_by_the_arena() -> None:
    g = zoo.small_resnet()
    plan = make_plan(g, "recompute")
    sim = simulate(plan)
    params = init_params(g)
    x, labels = random_batch(g)
    with pytest.raises(OutOfDeviceMemory) as e:
        execute(plan, HostBackend(budget_bytes=sim.device_peak_bytes - 256), x, labels, params)
    assert e.value.budget == sim.device_peak_bytes - 256


def test_recomputation_really_happens_and_saves_memory() -> None:
    g = zoo.small_resnet(blocks=4)
    _, base, _ = run_and_compare(g, "liveness")
    _, rc, _ = run_and_compare(g, "recompute")
    assert rc.recompute_s > 0 and rc.peak_bytes < base.peak_bytes


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(max_layers=10))
def test_random_dags_run_exactly(g) -> None:
    for policy in ("liveness", "recompute", "superneurons"):
        run_and_compare(g, policy, budget=simulate(make_plan(g, "baseline")).peak_bytes)


def grouped_cnn(**kw) -> Graph:
    return zoo.small_cnn(groups=2, **kw)


def test_grouped_convolution_runs_exactly() -> None:
    g = grouped_cnn()
    assert g.layers[[layer.name for layer in g.layers].index("conv2")].attrs["groups"] == 2
    run_and_compare(g, "superneurons", budget=simulate(make_plan(g, "baseline")).peak_bytes)


@pytest.mark.parametrize("net", [zoo.small_cnn, zoo.small_resnet, grouped_cnn])
def test_kernels_match_finite_differences(net) -> None:
    """The layer kernels are right: analytic gradients vs central differences in float64."""
    g = net(dtype="float64")
    params = init_params(g)
    x, labels = random_batch(g)
    grads = reference_run(g, x, labels, params, lr=0.0).grads
    rng = np.random.default_rng(3)
    eps = 1e-6
    for k, w in params.items():
        for idx in rng.choice(w.size, size=min(4, w.size), replace=False):
            plus = {**params, k: w.copy()}
            minus = {**params, k: w.copy()}
            plus[k][idx] += eps
            minus[k][idx] -= eps
            num = (reference_run(g, x, labels, plus, lr=0).loss
                   - reference_run(g, x, labels, minus, lr=0).loss) / (2 * eps)
            assert grads[k][idx] == pytest.approx(num, rel=1e-4, abs=1e-7), (g.layers[k].name, idx)


def test_host_backend_allocator() -> None:
    """First fit, holes merged, nothing moved: freed bytes in two pieces do not hold one block
    of their sum."""
    b = HostBackend(budget_bytes=4 * 256)
    assert isinstance(b, Backend)
    b.alloc(1, 100)
    b.alloc(2, 256)
    b.alloc(3, 257)  # two blocks: [512, 1024)
    with pytest.raises(OutOfDeviceMemory):
        b.alloc(4, 1)  # over the budget
    b.upload(3, np.arange(64, dtype=np.float32))
    b.free(1)
    b.free(2)
    b.alloc(5, 512)  # fits the merged hole at the bottom
    b.free(5)
    b.alloc(6, 256)  # [0, 256)
    b.free(3)  # hole [256, 1024) merged
    b.alloc(7, 700)  # [256, 1024)
    assert b.stats().peak_bytes == 1024 and b.stats().arena_peak_bytes == 1024
    b.free(6)
    b.free(7)
    b.alloc(8, 256)  # [0, 256)
    b.alloc(9, 256)  # [256, 512)
    b.upload(9, np.full(64, 7, np.float32))
    b.offload(9)
    b.alloc(10, 256)  # [512, 768)
    b.free(8)
    b.free(10)  # holes [0, 256) and [512, 1024): 768 bytes free, but no 768-byte range
    with pytest.raises(OutOfDeviceMemory, match="tensor 11"):
        b.alloc(11, 768)
    b.alloc(12, 512)  # [512, 1024): the data of 9 never moved
    assert np.array_equal(b.view(9, (64,), np.float32), np.full(64, 7, np.float32))
    b.free(9)
    b.alloc(9, 256)  # [0, 256)
    b.prefetch(9)
    assert np.array_equal(b.download(9, (64,), np.float32), np.full(64, 7, np.float32))
    st = b.stats()
    assert st.bytes_offloaded == 256 and st.bytes_prefetched == 256 and st.host_bytes == 256

def test_executor_refuses_a_profile_that_drops_what_its_kernels_read() -> None:
    """Under the dl4j framework an ActivationLayer's backward keeps x and dy only; the numpy ACT
    kernel reads y too (tanh, sigmoid), so a dl4j plan could free y before the kernel reads it."""
    g = zoo.small_cnn().with_framework("dl4j")
    params = init_params(g)
    x, labels = random_batch(g)
    with pytest.raises(ValueError, match="ACT kernel reads \\['y'\\].*'dl4j'.*with_framework"):
        execute(make_plan(g, "liveness"), HostBackend(), x, labels, params)


def test_fragmentation_is_seen_and_predicted() -> None:
    """A recomputation plan leaves holes: the arena needs more than the accounted peak. With the
    accounted peak as the arena the run fails although every allocation fits the budget; with
    the simulated high-water it runs, and the measured high-water is the simulated one."""
    g = zoo.small_resnet(blocks=4)
    plan = make_plan(g, "recompute")
    sim = simulate(plan)
    assert sim.arena_peak_bytes > sim.device_peak_bytes
    params = init_params(g)
    x, labels = random_batch(g)
    with pytest.raises(OutOfDeviceMemory) as e:
        execute(plan, HostBackend(budget_bytes=sim.device_peak_bytes), x, labels, params)
    assert "fragmentation" in str(e.value.__cause__)
    res = execute(plan, HostBackend(budget_bytes=sim.device_peak_bytes,
                                    arena_bytes=sim.arena_peak_bytes), x, labels, params)
    assert res.stats.arena_peak_bytes == sim.arena_peak_bytes
