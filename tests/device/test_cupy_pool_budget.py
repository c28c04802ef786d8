"""The CuPy backend's budget on its pool's bytes (`PoolBudget`), run on the CPU against a fake
pool that rounds like CuPy (512 bytes), keeps freed blocks cached and enforces a limit."""

from __future__ import annotations

import pytest

from pyd4j.device.backend import OutOfDeviceMemory
from pyd4j.device.cupy_backend import PoolBudget


class FakePoolOOM(MemoryError):
    pass


class FakePool:
    """Holds device bytes in 512-byte units; freed blocks stay cached until free_all_blocks."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held, self.cached = limit, 0, []

    def malloc(self, nbytes: int) -> int:
        size = -(-nbytes // 512) * 512
        for k, c in enumerate(self.cached):
            if c >= size:
                return self.cached.pop(k)
        if self.held + size > self.limit:
            raise FakePoolOOM(f"limit {self.limit}")
        self.held += size
        return size

    def release(self, block: int) -> None:
        self.cached.append(block)

    def total_bytes(self) -> int:
        return self.held

    def free_all_blocks(self) -> None:
        self.held -= sum(self.cached)
        self.cached = []


def test_budget_counts_the_pools_bytes_fake_pool() -> None:
    pool = FakePool(limit=2048)
    b = PoolBudget(pool, 2048, (FakePoolOOM,))
    blocks = [b.malloc(k, 256) for k in range(3)]  # 256 accounted, 512 held each
    assert pool.total_bytes() == 1536 and b.high_water == 1536
    pool.release(blocks[0])
    pool.release(blocks[1])  # cached: still held by the pool
    # 1024 bytes: no cached block fits, the limit is reached -> the cache goes back, retry fits
    assert b.malloc(3, 1024) == 1024 and pool.total_bytes() == 1536
    with pytest.raises(OutOfDeviceMemory) as e:
        b.malloc(4, 1024)  # 1536 held + 1024 > 2048, nothing cached to give back
    assert (e.value.key, e.value.live, e.value.budget) == (4, 1536, 2048)
    assert b.high_water == 1536
