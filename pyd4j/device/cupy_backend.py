"""`Backend` on a GPU through CuPy: CuPy's memory pool for device buffers, one pinned host
buffer carved into slots for the host store, and separate non-blocking streams for compute,
offload (device -> host) and prefetch (host -> device).

What it avoids (the usual complaints about offload helpers): copies never run on the compute
stream; ordering is by events (`cudaStreamWaitEvent`), never by device-wide syncs; the pinned
memory is allocated once (`cudaHostAlloc` costs milliseconds per call) and reused.

Ordering rules:
- offload waits (on the GPU) for the compute work issued so far, then copies on the offload
  stream; `free` of a buffer whose offload is in flight makes the compute stream wait for that
  copy before the memory returns to CuPy's pool (the pool reuses it on the compute stream), so
  nobody blocks on the host;
- prefetch copies on the prefetch stream; `wait(key)` makes the compute stream wait for it
  (no host block); `synchronize` blocks the host.

The budget is a hard limit on the bytes CuPy's memory pool holds from the device
(`MemoryPool.set_limit`): its rounding (512 bytes), the blocks it caches and fragmentation count,
as they would on a real card. `stats().arena_peak_bytes` is the pool's high-water mark, to set
against the simulator's arena high-water; `peak_bytes` stays the accounted peak (sum of
`aligned(nbytes)` of live buffers), to set against the simulator's peak. `PoolBudget` holds that
logic and runs on the CPU with any pool-like object.

Importing this module does not import CuPy; constructing a `CupyBackend` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyd4j.device.backend import BackendStats, OutOfDeviceMemory
from pyd4j.sched.plan import ALIGNMENT, aligned

_D2H, _H2D = 2, 1  # cudaMemcpyKind


class PinnedSlots:
    """First-fit slots (offsets) in one fixed host buffer, coalescing on release. Pure Python,
    shared with the CPU tests."""

    def __init__(self, capacity: int, alignment: int = ALIGNMENT) -> None:
        self.capacity = capacity // alignment * alignment
        self.alignment = alignment
        self._holes: list[list[int]] = [[0, self.capacity]] if self.capacity else []
        self.in_use = 0
        self.peak = 0

    def allocate(self, nbytes: int) -> int:
        size = aligned(nbytes, self.alignment)
        for h in self._holes:
            if h[1] >= size:
                off = h[0]
                h[0] += size
                h[1] -= size
                if h[1] == 0:
                    self._holes.remove(h)
                self.in_use += size
                self.peak = max(self.peak, self.in_use)
                return off
        largest = max((h[1] for h in self._holes), default=0)
        raise MemoryError(
            f"pinned host pool cannot fit {size} bytes: {self.in_use} of {self.capacity} bytes in "
            f"use, largest free slot {largest} bytes; create the backend with a larger host_bytes"
        )

    def release(self, offset: int, nbytes: int) -> None:
        size = aligned(nbytes, self.alignment)
        self.in_use -= size
        holes = self._holes
        holes.append([offset, size])
        holes.sort()
        merged: list[list[int]] = []
        for h in holes:
            if merged and merged[-1][0] + merged[-1][1] == h[0]:
                merged[-1][1] += h[1]
            else:
                merged.append(h)
        self._holes = merged


class PoolBudget:
    """The budget on a memory pool's own bytes. `pool` has `malloc(size)`, `total_bytes()` and
    `free_all_blocks()`, and enforces its limit by raising one of `oom` (CuPy: `set_limit`
    and `OutOfMemoryError`); a refused request is retried once after the pool returned its
    cached blocks, then reported as `OutOfDeviceMemory` with the pool's bytes."""

    def __init__(self, pool: Any, budget_bytes: int | None, oom: tuple[type, ...] = (MemoryError,)
                 ) -> None:
        self.pool = pool
        self.budget_bytes = budget_bytes
        self.oom = oom
        self.high_water = 0

    def malloc(self, key: int, nbytes: int) -> Any:
        try:
            mem = self.pool.malloc(nbytes)
        except self.oom:
            self.pool.free_all_blocks()
            try:
                mem = self.pool.malloc(nbytes)
            except self.oom as e:
                total = int(self.pool.total_bytes())
                raise OutOfDeviceMemory(key, nbytes, total,
                                        self.budget_bytes if self.budget_bytes is not None
                                        else total) from e
        self.high_water = max(self.high_water, int(self.pool.total_bytes()))
        return mem


class CupyBackend:
    """`Backend` over CuPy (see the module doc)."""

    name = "cupy"

    def __init__(self, budget_bytes: int | None = None, host_bytes: int | None = None,
                 *, device: int = 0) -> None:
        import cupy  # noqa: PLC0415

        self.cp = cupy
        self.xp = cupy
        self.alignment = ALIGNMENT
        self.budget_bytes = budget_bytes
        self._device = cupy.cuda.Device(device)
        self._device.use()
        self.pool = cupy.cuda.MemoryPool()
        if budget_bytes is not None:
            self.pool.set_limit(size=int(budget_bytes))
        self._budget = PoolBudget(self.pool, budget_bytes, (cupy.cuda.memory.OutOfMemoryError,))
        self._prev_allocator = cupy.cuda.get_allocator()
        cupy.cuda.set_allocator(self.pool.malloc)
        self.compute = cupy.cuda.Stream(non_blocking=True)
        self.offload_stream = cupy.cuda.Stream(non_blocking=True)
        self.prefetch_stream = cupy.cuda.Stream(non_blocking=True)
        self._prev_stream = cupy.cuda.get_current_stream()
        self.compute.use()
        if host_bytes is None:
            host_bytes = 2 * budget_bytes if budget_bytes else 1 << 30
        self._pinned = cupy.cuda.alloc_pinned_memory(int(host_bytes))  # once
        self._pinned_ptr = int(self._pinned.ptr)
        self._slots = PinnedSlots(int(host_bytes))
        self._mem: dict[int, Any] = {}  # key -> MemoryPointer
        self._size: dict[int, int] = {}  # key -> nbytes
        self._host: dict[int, tuple[int, int]] = {}  # key -> (slot offset, nbytes)
        self._last: dict[int, Any] = {}  # key -> event of its last copy
        self._copies: list[tuple[Any, Any, bool, int]] = []  # (start, end, offload, nbytes)
        self._stats = BackendStats()

    # -- device buffers ------------------------------------------------------------------
    def alloc(self, key: int, nbytes: int) -> None:
        if key in self._size:
            raise ValueError(f"tensor {key} is already allocated; free it first")
        size = aligned(nbytes, self.alignment)
        st = self._stats
        with self.compute:
            self._mem[key] = self._budget.malloc(key, size) if size else None
        self._size[key] = int(nbytes)
        st.live_bytes += size
        st.peak_bytes = max(st.peak_bytes, st.live_bytes)
        st.arena_peak_bytes = self._budget.high_water
        st.n_alloc += 1

    def free(self, key: int) -> None:
        if key not in self._size:
            raise KeyError(f"tensor {key} is not allocated on the device")
        ev = self._last.get(key)
        if ev is not None:
            self.compute.wait_event(ev)  # memory goes back to the compute stream's pool
        self._mem.pop(key, None)
        self._stats.live_bytes -= aligned(self._size.pop(key), self.alignment)
        self._stats.n_free += 1

    def rename(self, src: int, dst: int) -> None:
        if dst in self._size:
            raise ValueError(f"tensor {dst} is already allocated; free it first")
        if src not in self._size:
            raise KeyError(f"tensor {src} is not allocated on the device")
        self._mem[dst] = self._mem.pop(src, None)
        self._size[dst] = self._size.pop(src)
        ev = self._last.get(src)
        if ev is not None:
            self._last[dst] = ev

    def view(self, key: int, shape: tuple[int, ...], dtype: Any) -> Any:
        dtype = np.dtype(dtype)
        mem = self._mem.get(key)
        if mem is None:
            if key not in self._size:
                raise KeyError(f"tensor {key} is not allocated on the device")
            return self.cp.zeros(shape, dtype)
        return self.cp.ndarray(shape, dtype, mem)

    def upload(self, key: int, data: np.ndarray) -> None:
        data = np.ascontiguousarray(data)
        self.view(key, data.shape, data.dtype).set(data, stream=self.compute)
        self.compute.synchronize()  # `data` may be a temporary

    def download(self, key: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        out = self.view(key, shape, dtype).get(stream=self.compute)
        self.compute.synchronize()
        return out

    # -- transfers -----------------------------------------------------------------------
    def _copy(self, stream: Any, dst: int, src: int, n: int, kind: int, key: int) -> None:
        cp = self.cp
        start = cp.cuda.Event()
        end = cp.cuda.Event()
        start.record(stream)
        cp.cuda.runtime.memcpyAsync(dst, src, n, kind, stream.ptr)
        end.record(stream)
        self._last[key] = end
        self._copies.append((start, end, kind == _D2H, n))

    def offload(self, key: int) -> None:
        n = self._size[key]
        if n == 0:
            return
        if key not in self._host:
            self._host[key] = (self._slots.allocate(n), n)
            self._stats.host_bytes = self._slots.in_use
            self._stats.host_peak_bytes = self._slots.peak
        off, _ = self._host[key]
        self.offload_stream.wait_event(self.compute.record())
        ev = self._last.get(key)
        if ev is not None:
            self.offload_stream.wait_event(ev)
        self._copy(self.offload_stream, self._pinned_ptr + off, int(self._mem[key].ptr), n, _D2H, key)
        self._stats.bytes_offloaded += aligned(n, self.alignment)

    def prefetch(self, key: int) -> None:
        n = self._size[key]
        if n == 0:
            return
        if key not in self._host:
            raise ValueError(f"tensor {key} has no host copy to prefetch; offload it first")
        off, _ = self._host[key]
        self.prefetch_stream.wait_event(self.compute.record())  # the buffer may be reused memory
        ev = self._last.get(key)
        if ev is not None:
            self.prefetch_stream.wait_event(ev)
        self._copy(self.prefetch_stream, int(self._mem[key].ptr), self._pinned_ptr + off, n, _H2D, key)
        self._stats.bytes_prefetched += aligned(n, self.alignment)

    def wait(self, key: int) -> None:
        ev = self._last.get(key)
        if ev is not None:
            self.compute.wait_event(ev)  # the GPU waits; the host does not

    def drop_host(self, key: int) -> None:
        slot = self._host.pop(key, None)
        if slot is None:
            return
        ev = self._last.get(key)
        if ev is not None:
            self.offload_stream.wait_event(ev)  # later offloads may land in this slot
        self._slots.release(*slot)
        self._stats.host_bytes = self._slots.in_use

    def synchronize(self) -> None:
        self.offload_stream.synchronize()
        self.prefetch_stream.synchronize()
        self.compute.synchronize()

    # -- statistics ------------------------------------------------------------------------
    def stats(self) -> BackendStats:
        return BackendStats(**vars(self._stats))

    def copy_stats(self) -> dict[str, float]:
        """Copy durations (GPU events), bytes moved, pool usage. Waits for the copies."""
        cp = self.cp
        out = {"offload_seconds": 0.0, "prefetch_seconds": 0.0, "offload_bytes": 0, "prefetch_bytes": 0}
        for start, end, off, n in self._copies:
            end.synchronize()
            s = cp.cuda.get_elapsed_time(start, end) / 1000.0
            out["offload_seconds" if off else "prefetch_seconds"] += s
            out["offload_bytes" if off else "prefetch_bytes"] += n
        out["pool_used_bytes"] = int(self.pool.used_bytes())
        out["pool_total_bytes"] = int(self.pool.total_bytes())
        return out

    def close(self) -> None:
        self.synchronize()
        self._mem.clear()
        self._size.clear()
        self._host.clear()
        self._last.clear()
        self._copies.clear()
        self.pool.free_all_blocks()
        self._prev_stream.use()
        self.cp.cuda.set_allocator(self._prev_allocator)
