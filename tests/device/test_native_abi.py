"""The side-agent's C ABI driven through ctypes (host build on CPU machines).

Contents are checked byte for byte through the arena, which the host build can address;
byte counters and peaks are checked against hand-worked numbers (aligned to 256 bytes).
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import threading

import time

import numpy as np
import pytest

from pyd4j.device import native
from pyd4j.device.native import Agent, AgentError, AgentOutOfDeviceMemory, AgentOutOfHostPool

MiB = 1 << 20


@pytest.fixture
def agent():
    a = Agent(4 * MiB, 4 * MiB)
    yield a
    a.close()


def pattern(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def test_library_build_and_abi():
    lib = native.load_library()
    assert lib.pyd4j_agent_abi_version() == native.ABI_VERSION
    assert lib.pyd4j_agent_alignment() == 256
    kind = lib.pyd4j_agent_build_kind().decode()
    assert kind == ("cuda" if lib.pyd4j_agent_is_cuda() else "host")


def test_offload_release_prefetch_round_trip_is_byte_exact(agent):
    if agent.is_cuda:
        pytest.skip("reads the arena directly; the GPU twin is test_native_gpu.py")
    n = 300_001
    data = pattern(n, 1)
    buf = agent.alloc(n)
    first = agent.info(buf)
    assert (first.state, first.reserved, first.has_host) == ("RESIDENT", 300_032, False)
    agent.host_array(buf)[:] = data

    agent.offload(buf, release=True)
    assert agent.info(buf).state == "HOST"
    assert agent.info(buf).device_ptr is None
    assert agent.stats()["device_in_use"] == 0

    # The freed block is handed out again at once; the compute thread must not be able to
    # scribble over it before the offload has read it.
    other = agent.alloc(n)
    assert agent.info(other).device_ptr == first.device_ptr
    agent.host_array(other)[:] = 0xEE

    agent.prefetch(buf)
    agent.acquire(buf)
    back = agent.info(buf)
    assert back.state == "RESIDENT" and not back.pending
    assert back.device_ptr != first.device_ptr
    assert np.array_equal(agent.host_array(buf), data)
    assert np.array_equal(agent.host_array(buf, "host"), data)

    s = agent.stats()
    assert s["bytes_offloaded"] == n and s["bytes_prefetched"] == n
    assert s["n_offloads"] == 1 and s["n_prefetches"] == 1
    assert s["device_peak"] == 2 * 300_032
    assert s["host_in_use"] == 300_032
    agent.free(buf)
    agent.free(other)
    s = agent.stats()
    assert (s["device_in_use"], s["host_in_use"], s["n_buffers"]) == (0, 0, 0)


def test_external_numpy_buffer_survives_swap_in_place(agent):
    if agent.is_cuda:
        pytest.skip("registers host memory; the CUDA build registers device memory")
    arr = pattern(77_777, 2)
    want = arr.copy()
    buf = agent.register_external(arr.ctypes.data, arr.nbytes)
    agent.offload(buf, release=True)
    agent.wait(buf)
    arr[:] = 0  # the owner reuses its memory while the contents are away
    agent.prefetch(buf)
    agent.wait(buf)
    assert np.array_equal(arr, want)
    assert agent.info(buf).device_ptr == arr.ctypes.data
    s = agent.stats()
    assert s["device_in_use"] == 0
    assert s["bytes_offloaded"] == s["bytes_prefetched"] == 77_777


def test_external_buffer_rebound_to_fresh_memory_comes_back_there(agent):
    if agent.is_cuda:
        pytest.skip("registers host memory; the CUDA build registers device memory")
    arr = pattern(50_001, 3)
    want = arr.copy()
    buf = agent.register_external(arr.ctypes.data, arr.nbytes)
    agent.offload(buf, release=True)
    fresh = [np.zeros_like(arr), np.zeros_like(arr)]
    for dst in fresh:  # a checkpoint read twice, each time into a new array
        agent.rebind_external(buf, dst.ctypes.data)
        agent.prefetch(buf)
        agent.wait(buf)
        assert np.array_equal(dst, want)
        assert agent.info(buf).device_ptr == dst.ctypes.data
        agent.release_device(buf)  # back to HOST: the host slot still holds the contents
    with pytest.raises(AgentError, match="lives in the device arena"):
        arena_buf = agent.alloc(16)
        agent.offload(arena_buf, release=True)
        agent.rebind_external(arena_buf, arr.ctypes.data)


def test_errors_carry_codes_numbers_and_fixes(agent):
    with pytest.raises(AgentOutOfDeviceMemory) as e:
        agent.alloc(4 * MiB + 1)
    assert e.value.code == native.ERR_OUT_OF_DEVICE_MEMORY
    assert "4194560 bytes" in str(e.value) and "larger device arena" in str(e.value)
    assert isinstance(e.value, MemoryError)
    with pytest.raises(AgentError, match="buffer id 999 is not registered") as e:
        agent.offload(999)
    assert e.value.code == native.ERR_UNKNOWN_BUFFER
    with pytest.raises(AgentError, match="size=0") as e:
        agent.alloc(0)
    assert e.value.code == native.ERR_INVALID_ARGUMENT
    b = agent.alloc(3 * MiB)
    agent.offload(b, release=True)
    with pytest.raises(AgentError, match="prefetch it before offloading again") as e:
        agent.offload(b)
    assert e.value.code == native.ERR_BAD_STATE
    c = agent.alloc(3 * MiB)
    with pytest.raises(AgentOutOfHostPool, match="larger host pool"):
        agent.offload(c)
    assert agent.info(c).state == "RESIDENT"  # failed call changed nothing
    with pytest.raises(AgentError, match="stream=9"):
        agent.stream_handle(9)


def test_create_rejects_tiny_pools():
    with pytest.raises(AgentError, match="device_bytes=100 is below the minimum of 256"):
        Agent(100, MiB)


def test_closed_agent_refuses_calls():
    a = Agent(MiB, MiB)
    a.close()
    a.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        a.alloc(10)


def test_device_limit_enforces_budget_inside_a_larger_arena(agent):
    agent.set_device_limit(1000)
    keep = [agent.alloc(256) for _ in range(3)]
    with pytest.raises(AgentOutOfDeviceMemory, match="a limit of 1000 bytes"):
        agent.alloc(1)
    agent.free(keep[1])
    agent.set_device_limit(0)
    big = agent.alloc(512)  # does not fit the 256-byte hole: lands above
    s = agent.stats()
    assert s["device_limit"] == 4 * MiB
    assert s["device_peak"] == 1024
    assert s["device_high_water"] == 1280
    assert agent.info(big).reserved == 512


def test_random_swaps_many_buffers_exact(agent):
    if agent.is_cuda:
        pytest.skip("reads the arena directly")
    rng = np.random.default_rng(7)
    bufs = []
    for k in range(20):
        n = int(rng.integers(1, 60_000))
        data = pattern(n, 100 + k)
        b = agent.alloc(n)
        agent.host_array(b)[:] = data
        bufs.append([b, data, False])
    out = inn = 0
    for _ in range(300):
        entry = bufs[int(rng.integers(len(bufs)))]
        b, data, away = entry
        if away:
            agent.prefetch(b)
            inn += data.size
        else:
            agent.acquire(b)
            assert np.array_equal(agent.host_array(b), data)
            agent.offload(b, release=True)
            out += data.size
            tmp = agent.alloc(data.size)
            agent.host_array(tmp)[:] = 0x5A
            agent.free(tmp)
        entry[2] = not away
    agent.synchronize()
    for b, data, away in bufs:
        if away:
            agent.prefetch(b)
            inn += data.size
            agent.wait(b)
        assert np.array_equal(agent.host_array(b), data)
    s = agent.stats()
    assert (s["bytes_offloaded"], s["bytes_prefetched"]) == (out, inn)


def test_overlap_statistic_counts_copies_during_marked_compute(agent):
    if agent.is_cuda:
        pytest.skip("host-build timing")
    b = agent.alloc(2 * MiB)
    agent.host_array(b)[:] = 1
    with agent.compute():
        agent.offload(b, release=True)
        host = agent.host_array(b, "host")
        x = np.ones(2_000_000)
        # Compute until the copy has landed (not for a fixed time: a loaded machine may run the
        # copy worker late), so the whole copy falls inside the marked compute.
        deadline = time.monotonic() + 120
        while not (host[-1] == 1 and host.all()) and time.monotonic() < deadline:
            x = np.sqrt(x + 1.0)  # numpy releases the GIL; the worker copies meanwhile
    agent.wait(b)
    s = agent.stats()
    assert s["compute_seconds"] > 0 and s["offload_seconds"] > 0
    assert s["overlap_seconds"] <= min(s["copy_busy_seconds"], s["compute_seconds"]) + 1e-9
    assert s["overlap_seconds"] > 0.5 * s["copy_busy_seconds"]
    agent.reset_stats()
    s = agent.stats()
    assert s["bytes_offloaded"] == 0 and s["overlap_seconds"] == 0.0


def test_concurrent_callers_are_serialized(agent):
    if agent.is_cuda:
        pytest.skip("reads the arena directly")
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            for i in range(40):
                data = pattern(10_000 + i, seed * 1000 + i)
                b = agent.alloc(data.size)
                agent.host_array(b)[:] = data
                agent.offload(b, release=True)
                agent.prefetch(b)
                agent.wait(b)
                assert np.array_equal(agent.host_array(b), data)
                agent.free(b)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    s = agent.stats()
    assert s["n_offloads"] == s["n_prefetches"] == 160
    assert s["device_in_use"] == 0 and s["n_buffers"] == 0


def test_plain_copy_baseline_runs(agent):
    secs = agent.bench_plain_copy(MiB, native.HOST_TO_DEVICE, 3)
    assert secs > 0
    with pytest.raises(AgentError, match="direction=5"):
        agent.bench_plain_copy(MiB, 5, 3)


def test_library_path_override_names_the_bad_path(tmp_path):
    missing = tmp_path / "nope.so"
    code = (
        "import pyd4j.device.native as n\n"
        "try:\n    n.load_library()\nexcept n.LibraryNotFound as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYD4J_NATIVE_LIB": str(missing), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"PYD4J_NATIVE_LIB={missing} does not name a file" in out


def test_stats_struct_matches_the_header():
    # The C struct is all 8-byte fields: 12 counters, 6 doubles, 2 counters.
    assert ctypes.sizeof(native.StatsStruct) == 20 * 8
    assert ctypes.sizeof(native.BufferInfoStruct) == 2 * 8 + 4 * 4 + 2 * 8
