"""The numpy host backend: a first-fit arena in one buffer, with a hard byte budget.

"Device" memory is one `numpy.uint8` buffer; allocations are placed by `pyd4j.sched.arena.
FirstFit` -- the lowest free range that fits, holes merged on free, nothing ever moved -- so
buffers fragment the arena as in a real allocator. Two limits apply: `budget_bytes` on the
accounted bytes (sum of live aligned sizes) and `arena_bytes` on the address range (default: the
budget); an allocation that fits the budget but finds no free range raises
`OutOfDeviceMemory` too. `stats().arena_peak_bytes` is the high-water mark of the range, the
figure the simulator predicts (`SimResult.arena_peak_bytes`). The host store is a dict of
copies; transfers are synchronous.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyd4j.device.backend import BackendStats, OutOfDeviceMemory
from pyd4j.sched.arena import ArenaFull, FirstFit
from pyd4j.sched.plan import ALIGNMENT


class HostBackend:
    """`Backend` on the host CPU (numpy)."""

    name = "host"
    xp = np

    def __init__(self, budget_bytes: int | None = None, alignment: int = ALIGNMENT,
                 initial_bytes: int = 1 << 20, arena_bytes: int | None = None) -> None:
        self.alignment = alignment
        self.budget_bytes = budget_bytes
        capacity = arena_bytes if arena_bytes is not None else budget_bytes
        if capacity is not None and budget_bytes is not None and capacity < budget_bytes:
            raise ValueError(f"arena_bytes={capacity} is below budget_bytes={budget_bytes}; "
                             "pass at least the budget")
        self._arena = FirstFit(capacity, alignment)
        self._buf = np.zeros(capacity if capacity is not None else initial_bytes, np.uint8)
        self._host: dict[int, np.ndarray] = {}
        self._stats = BackendStats()

    # -- allocator -----------------------------------------------------------------------
    def alloc(self, key: int, nbytes: int) -> None:
        st = self._stats
        arena = self._arena
        size = -(-int(nbytes) // self.alignment) * self.alignment
        if self.budget_bytes is not None and st.live_bytes + size > self.budget_bytes:
            raise OutOfDeviceMemory(key, nbytes, st.live_bytes, self.budget_bytes)
        try:
            offset = arena.alloc(key, nbytes)
        except ArenaFull as e:
            raise OutOfDeviceMemory(key, nbytes, st.live_bytes,
                                    self.budget_bytes or arena.capacity or 0) from e
        if offset + size > len(self._buf):  # an open-ended arena grows (views stay valid
            self._grow(offset + size)       # until the next alloc, as the protocol says)
        st.live_bytes += size
        st.peak_bytes = max(st.peak_bytes, st.live_bytes)
        st.arena_peak_bytes = arena.high_water
        st.n_alloc += 1

    def free(self, key: int) -> None:
        self._arena.free(key)
        self._stats.live_bytes = self._arena.live_bytes
        self._stats.n_free += 1

    def rename(self, src: int, dst: int) -> None:
        self._arena.rename(src, dst)

    def _grow(self, need: int) -> None:
        new = np.zeros(max(need, 2 * len(self._buf)), np.uint8)
        new[: len(self._buf)] = self._buf
        self._buf = new

    # -- data ----------------------------------------------------------------------------
    def view(self, key: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        off, size = self._arena.blocks[key]
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        if count * dt.itemsize > size:
            raise ValueError(f"view of {count * dt.itemsize} bytes over a {size}-byte buffer")
        return self._buf[off:off + count * dt.itemsize].view(dt).reshape(shape)

    def upload(self, key: int, data: np.ndarray) -> None:
        data = np.ascontiguousarray(data)
        self.view(key, data.shape, data.dtype)[...] = data

    def download(self, key: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        return self.view(key, shape, dtype).copy()

    # -- transfers -----------------------------------------------------------------------
    def offload(self, key: int) -> None:
        off, size = self._arena.blocks[key]
        if key not in self._host:
            self._stats.host_bytes += size
            self._stats.host_peak_bytes = max(self._stats.host_peak_bytes, self._stats.host_bytes)
        self._host[key] = self._buf[off:off + size].copy()
        self._stats.bytes_offloaded += size

    def prefetch(self, key: int) -> None:
        off, size = self._arena.blocks[key]
        try:
            copy = self._host[key]
        except KeyError:
            raise ValueError(f"tensor {key} has no host copy to prefetch") from None
        self._buf[off:off + size] = copy
        self._stats.bytes_prefetched += size

    def wait(self, key: int) -> None:
        """Transfers are synchronous here."""

    def drop_host(self, key: int) -> None:
        copy = self._host.pop(key, None)
        if copy is not None:
            self._stats.host_bytes -= len(copy)

    def synchronize(self) -> None:
        """Transfers are synchronous here."""

    def stats(self) -> BackendStats:
        return BackendStats(**vars(self._stats))

    def close(self) -> None:
        self._arena = FirstFit(self._arena.capacity, self.alignment)
        self._host.clear()
        self._stats.live_bytes = self._stats.host_bytes = 0
