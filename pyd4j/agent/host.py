"""The numpy host backend: a real first-fit arena in one buffer, with a hard byte budget.

"Device" memory is one `numpy.uint8` buffer; allocations are placed first-fit at offsets that
are multiples of the alignment, and when no hole fits but enough bytes are free the arena
compacts (moves live blocks down) -- so a plan that fits the budget in accounted bytes always
runs, which is what lets measured peak and simulated peak be compared exactly. The host store is
a dict of copies; transfers are synchronous.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from pyd4j.agent.backend import BackendStats, OutOfDeviceMemory
from pyd4j.sched.plan import ALIGNMENT, aligned


class HostBackend:
    """`Backend` on the host CPU (numpy)."""

    name = "host"
    xp = np

    def __init__(self, budget_bytes: int | None = None, alignment: int = ALIGNMENT,
                 initial_bytes: int = 1 << 20) -> None:
        self.alignment = alignment
        self.budget_bytes = budget_bytes
        self._buf = np.zeros(budget_bytes if budget_bytes is not None else initial_bytes, np.uint8)
        self._blocks: dict[int, tuple[int, int]] = {}  # key -> (offset, aligned size)
        self._holes: list[tuple[int, int]] = [(0, len(self._buf))] if len(self._buf) else []
        self._host: dict[int, np.ndarray] = {}
        self._stats = BackendStats()
        self.n_compactions = 0

    # -- allocator -----------------------------------------------------------------------
    def alloc(self, key: int, nbytes: int) -> None:
        if key in self._blocks:
            raise ValueError(f"tensor {key} is already allocated")
        size = aligned(nbytes, self.alignment)
        st = self._stats
        if self.budget_bytes is not None and st.live_bytes + size > self.budget_bytes:
            raise OutOfDeviceMemory(key, nbytes, st.live_bytes, self.budget_bytes)
        offset = self._first_fit(size)
        if offset is None:
            if len(self._buf) - st.live_bytes < size:
                self._grow(st.live_bytes + size)
            self._compact()
            offset = self._first_fit(size)
            assert offset is not None
        self._blocks[key] = (offset, size)
        st.live_bytes += size
        st.peak_bytes = max(st.peak_bytes, st.live_bytes)
        st.n_alloc += 1

    def _first_fit(self, size: int) -> int | None:
        if size == 0:
            return 0
        for h, (off, hsize) in enumerate(self._holes):
            if hsize >= size:
                if hsize == size:
                    del self._holes[h]
                else:
                    self._holes[h] = (off + size, hsize - size)
                return off
        return None

    def free(self, key: int) -> None:
        try:
            off, size = self._blocks.pop(key)
        except KeyError:
            raise ValueError(f"tensor {key} is not allocated") from None
        self._stats.live_bytes -= size
        self._stats.n_free += 1
        if size == 0:
            return
        h = bisect.bisect_left(self._holes, (off, 0))
        self._holes.insert(h, (off, size))
        # merge with the next and the previous hole
        if h + 1 < len(self._holes) and off + size == self._holes[h + 1][0]:
            self._holes[h] = (off, size + self._holes[h + 1][1])
            del self._holes[h + 1]
        if h > 0 and self._holes[h - 1][0] + self._holes[h - 1][1] == off:
            self._holes[h - 1] = (self._holes[h - 1][0], self._holes[h - 1][1] + self._holes[h][1])
            del self._holes[h]

    def rename(self, src: int, dst: int) -> None:
        if dst in self._blocks:
            raise ValueError(f"tensor {dst} is already allocated")
        try:
            self._blocks[dst] = self._blocks.pop(src)
        except KeyError:
            raise ValueError(f"tensor {src} is not allocated") from None

    def _compact(self) -> None:
        """Move live blocks to the bottom of the arena (views taken before are invalid)."""
        top = 0
        for key, (off, size) in sorted(self._blocks.items(), key=lambda kv: kv[1][0]):
            if off != top:
                self._buf[top:top + size] = self._buf[off:off + size]
                self._blocks[key] = (top, size)
            top += size
        self._holes = [(top, len(self._buf) - top)] if top < len(self._buf) else []
        self.n_compactions += 1

    def _grow(self, need: int) -> None:
        new = np.zeros(max(need, 2 * len(self._buf)), np.uint8)
        new[: len(self._buf)] = self._buf
        old = len(self._buf)
        self._buf = new
        self._holes.append((old, len(new) - old))
        # merge a trailing hole
        if len(self._holes) > 1 and sum(self._holes[-2]) == old:
            a = self._holes.pop()
            self._holes[-1] = (self._holes[-1][0], self._holes[-1][1] + a[1])

    # -- data ----------------------------------------------------------------------------
    def view(self, key: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        off, size = self._blocks[key]
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
        off, size = self._blocks[key]
        if key not in self._host:
            self._stats.host_bytes += size
            self._stats.host_peak_bytes = max(self._stats.host_peak_bytes, self._stats.host_bytes)
        self._host[key] = self._buf[off:off + size].copy()
        self._stats.bytes_offloaded += size

    def prefetch(self, key: int) -> None:
        off, size = self._blocks[key]
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
        self._blocks.clear()
        self._host.clear()
        self._holes = [(0, len(self._buf))]
        self._stats.live_bytes = self._stats.host_bytes = 0
