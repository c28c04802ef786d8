"""NativeBackend against the Backend protocol: the executor's call sequences, byte-exact
contents, and peak accounting equal to the simulator's rule (sum of aligned live sizes)."""

from __future__ import annotations

import numpy as np
import pytest

from pyd4j.device.backend import Backend, OutOfDeviceMemory
from pyd4j.device.native import NativeBackend


def aligned(n: int) -> int:
    return -(-n // 256) * 256


@pytest.fixture
def backend():
    b = NativeBackend(budget_bytes=1 << 20)
    yield b
    b.close()


def test_is_a_backend(backend):
    assert isinstance(backend, Backend)
    assert backend.alignment == 256 and backend.budget_bytes == 1 << 20


def test_swap_cycle_keeps_values_and_accounts_like_the_simulator(backend):
    x = np.arange(1000, dtype=np.float32) * 0.5
    backend.alloc(1, x.nbytes)
    backend.upload(1, x)
    backend.alloc(2, 10)
    backend.offload(1)
    backend.free(1)  # host copy lives on
    assert backend.stats().live_bytes == aligned(10)
    backend.alloc(3, x.nbytes)  # may reuse tensor 1's memory while its offload runs
    backend.view(3, x.shape, x.dtype)[...] = -1.0
    backend.alloc(1, x.nbytes)
    backend.prefetch(1)
    backend.wait(1)
    assert np.array_equal(backend.download(1, x.shape, np.float32), x)
    backend.drop_host(1)
    st = backend.stats()
    assert st.peak_bytes == aligned(4000) * 2 + aligned(10)
    assert st.live_bytes == aligned(4000) * 2 + aligned(10)
    assert st.bytes_offloaded == st.bytes_prefetched == aligned(4000)
    assert st.host_bytes == 0 and st.host_peak_bytes == aligned(4000)
    assert (st.n_alloc, st.n_free) == (4, 1)
    for k in (1, 2, 3):
        backend.free(k)
    assert backend.stats().live_bytes == 0


def test_zero_byte_tensors_and_views(backend):
    backend.alloc(5, 0)
    assert backend.view(5, (0,), np.float32).shape == (0,)
    backend.offload(5)
    backend.free(5)
    assert backend.stats().peak_bytes == 0


def test_budget_overflow_raises_the_protocol_error(backend):
    backend.alloc(1, 600_000)
    with pytest.raises(OutOfDeviceMemory) as e:
        backend.alloc(2, 600_000)
    assert (e.value.key, e.value.nbytes, e.value.live, e.value.budget) == (2, 600_000, aligned(600_000), 1 << 20)
    with pytest.raises(ValueError, match="already allocated"):
        backend.alloc(1, 10)
    with pytest.raises(KeyError):
        backend.free(9)


def test_random_plan_like_sequence_peak_equals_model():
    """Random ALLOC/OFFLOAD/FREE/re-ALLOC+PREFETCH sequences: contents exact, peak equal to
    an independent model of the simulator's rule."""
    rng = np.random.default_rng(3)
    b = NativeBackend(budget_bytes=8 << 20)
    try:
        live: dict[int, int] = {}
        away: dict[int, np.ndarray] = {}
        truth: dict[int, np.ndarray] = {}
        used = peak = 0
        for step in range(400):
            op = rng.integers(4)
            if op == 0 and len(live) < 30:  # new tensor
                k = 1000 + step
                n = int(rng.integers(1, 50_000))
                b.alloc(k, n)
                data = rng.integers(0, 256, n, dtype=np.uint8)
                b.upload(k, data)
                live[k], truth[k] = n, data
                used += aligned(n)
            elif op == 1 and live:  # offload + free
                k = int(rng.choice(list(live)))
                b.offload(k)
                b.free(k)
                used -= aligned(live.pop(k))
                away[k] = truth[k]
            elif op == 2 and away:  # bring back
                k = int(rng.choice(list(away)))
                n = away.pop(k).size
                b.alloc(k, n)
                b.prefetch(k)
                used += aligned(n)
                live[k] = n
                b.wait(k)
                assert np.array_equal(b.download(k, (n,), np.uint8), truth[k])
                b.drop_host(k)
            elif op == 3 and live:  # drop for good
                k = int(rng.choice(list(live)))
                b.free(k)
                used -= aligned(live.pop(k))
            peak = max(peak, used)
            assert b.stats().live_bytes == used
        b.synchronize()
        for k, n in live.items():
            assert np.array_equal(b.download(k, (n,), np.uint8), truth[k])
        assert b.stats().peak_bytes == peak
        assert b.agent_stats()["device_high_water"] >= peak
    finally:
        b.close()
