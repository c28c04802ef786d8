"""GPU tests of the CUDA build and of the CuPy backend (skipped without an NVIDIA GPU).

Their CPU twins: test_native_abi.py / test_native_exec.py run the same ABI calls and the same
plans through the host build; `PinnedSlots` (the CuPy backend's pinned-slot allocator) is
tested here on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from pyd4j.device.cupy_backend import PinnedSlots


def test_pinned_slots_first_fit_and_coalescing():
    s = PinnedSlots(4096)
    a, b, c = s.allocate(10), s.allocate(300), s.allocate(256)
    assert (a, b, c) == (0, 256, 768)
    assert s.in_use == 1024 and s.peak == 1024
    s.release(b, 300)
    assert s.allocate(200) == 256  # first hole
    s.release(256, 200)
    s.release(a, 10)
    s.release(c, 256)
    assert s.in_use == 0
    assert s.allocate(4096) == 0  # everything coalesced back into one slot
    with pytest.raises(MemoryError, match="larger host_bytes"):
        s.allocate(1)


def _cuda_agent():
    from pyd4j.device.native import Agent

    a = Agent(64 << 20, 64 << 20)
    if not a.is_cuda:
        a.close()
        pytest.fail("a GPU is present but the loaded side-agent is the host build: rebuild "
                    "native/ with nvcc (make setup)")
    return a


@pytest.mark.gpu
def test_cuda_build_round_trip_through_cupy():
    import cupy as cp

    from pyd4j.device.native import STREAM_COMPUTE

    agent = _cuda_agent()
    try:
        n = 10_000_019
        buf = agent.alloc(n)
        ptr = agent.info(buf).device_ptr
        mem = cp.cuda.UnownedMemory(ptr, n, agent)
        dev = cp.ndarray((n,), cp.uint8, cp.cuda.MemoryPointer(mem, 0))
        want = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8)
        stream = cp.cuda.ExternalStream(agent.stream_handle(STREAM_COMPUTE))
        dev.set(want, stream=stream)
        agent.offload(buf, release=True)
        other = agent.alloc(n)  # same memory, ordered after the offload on the GPU
        optr = agent.info(other).device_ptr
        with stream:
            cp.ndarray((n,), cp.uint8, cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(optr, n, agent), 0)).fill(7)
        agent.wait(buf)
        assert np.array_equal(agent.host_array(buf, "host"), want)
        agent.prefetch(buf)
        agent.acquire(buf)
        ptr2 = agent.info(buf).device_ptr
        back = cp.ndarray((n,), cp.uint8, cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(ptr2, n, agent), 0))
        got = back.get(stream=stream)
        stream.synchronize()
        assert np.array_equal(got, want)
        s = agent.stats()
        assert s["bytes_offloaded"] == s["bytes_prefetched"] == n
    finally:
        agent.close()


@pytest.mark.gpu
@pytest.mark.parametrize("backend_name", ["native", "cupy"])
def test_plan_on_gpu_matches_unconstrained_gpu_run(backend_name):
    from pyd4j.device.cupy_backend import CupyBackend
    from pyd4j.device.executor import execute, init_params, random_batch
    from pyd4j.device.native import NativeBackend
    from pyd4j.sched import zoo
    from pyd4j.sched.policies import make_plan
    from pyd4j.sched.simulator import simulate

    make = {"native": NativeBackend, "cupy": CupyBackend}[backend_name]
    if backend_name == "native":
        _cuda_agent().close()
    g = zoo.small_resnet(batch=8, image=16, blocks=3)
    x, labels = random_batch(g)
    params = init_params(g)
    free_run = make(budget_bytes=None)
    try:
        ref = execute(make_plan(g, "baseline"), free_run, x, labels, params)
    finally:
        free_run.close()
    plan = make_plan(g, "superneurons")
    sim = simulate(plan)
    if backend_name == "cupy":  # the budget is on CuPy's pool bytes
        from pyd4j.commands.plan import cupy_budget

        b = make(budget_bytes=cupy_budget(sim.arena_peak_bytes))
    else:
        b = make(budget_bytes=sim.device_peak_bytes, arena_bytes=sim.arena_peak_bytes)
    try:
        run = execute(plan, b, x, labels, params)
    finally:
        b.close()
    for k in ref.grads:
        assert np.array_equal(run.grads[k], ref.grads[k])
        assert np.array_equal(run.params[k], ref.params[k])
    assert run.stats.peak_bytes == sim.device_peak_bytes
    if backend_name == "native":
        assert run.stats.arena_peak_bytes == sim.arena_peak_bytes
    else:
        assert sim.device_peak_bytes <= run.stats.arena_peak_bytes <= cupy_budget(sim.arena_peak_bytes)
