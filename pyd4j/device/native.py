"""The native side-agent (`native/`, C ABI `pyd4j_agent.h`) driven through ctypes.

Two layers:

- `Agent` (pyd4j.device.native_agent): a thin, typed wrapper of the C ABI -- one device arena and one
  pinned host pool allocated once, offload/prefetch on their own streams, stream-ordered releases,
  statistics. The ABI's constants, structures, errors and the library's loading: pyd4j.device.native_lib.
- `NativeBackend` (here): the `pyd4j.device.backend.Backend` protocol on top of an `Agent`, so the plan
  executor runs the same plans on it as on the numpy host backend.

The library is found at `$PYD4J_NATIVE_LIB`, else at `native/build/libpyd4j_agent.so` of the
source tree (built by `make setup`). The host build (no CUDA toolkit) has the same ABI with host
memory standing in for device memory; `Agent.is_cuda` tells which one is loaded.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np

from pyd4j.device.backend import BackendStats, OutOfDeviceMemory
from pyd4j.device.native_agent import Agent
from pyd4j.device.native_lib import (ABI_VERSION, ALIGNMENT, DEVICE_TO_HOST, ENV_LIB, ERR_BAD_STATE, ERR_CUDA,
                                    ERR_INVALID_ARGUMENT, ERR_NOT_SUPPORTED, ERR_OUT_OF_DEVICE_MEMORY,
                                    ERR_OUT_OF_HOST_POOL, ERR_SYSTEM, ERR_UNKNOWN_BUFFER, HOST, HOST_TO_DEVICE, OK,
                                    RESERVED, RESIDENT, STATE_NAMES, STREAM_COMPUTE, STREAM_OFFLOAD, STREAM_PREFETCH,
                                    AgentError, AgentOutOfDeviceMemory, AgentOutOfHostPool, BufferInfo,
                                    BufferInfoStruct, LibraryNotFound, StatsStruct, default_library_path, find_library,
                                    load_library)

__all__ = ["ABI_VERSION", "ALIGNMENT", "DEVICE_TO_HOST", "ENV_LIB", "ERR_BAD_STATE", "ERR_CUDA",
           "ERR_INVALID_ARGUMENT", "ERR_NOT_SUPPORTED", "ERR_OUT_OF_DEVICE_MEMORY", "ERR_OUT_OF_HOST_POOL", "ERR_SYSTEM",
           "ERR_UNKNOWN_BUFFER", "OK", "HOST", "HOST_TO_DEVICE", "RESERVED", "RESIDENT",
           "STATE_NAMES", "STREAM_COMPUTE", "STREAM_OFFLOAD", "STREAM_PREFETCH", "Agent", "AgentError",
           "AgentOutOfDeviceMemory", "AgentOutOfHostPool", "BufferInfo", "BufferInfoStruct", "LibraryNotFound",
           "NativeBackend", "StatsStruct", "default_arena_bytes", "default_library_path", "find_library",
           "load_library"]


def _backend_call(fn):  # type: ignore[no-untyped-def]
    """Closes the compute interval around a backend call: the executor's time between
    backend calls is its compute, so copies running then count as overlapped."""

    def wrapper(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self._compute_mark(False)
        try:
            return fn(self, *args, **kwargs)
        finally:
            self._compute_mark(True)

    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


def _aligned(n: int) -> int:
    return -(-int(n) // ALIGNMENT) * ALIGNMENT


def default_arena_bytes(budget_bytes: int | None) -> int:
    """Arena size for a budget: the budget is enforced as a limit on bytes in use, and the
    arena gets 25 % + 1 MiB of room on top so first-fit fragmentation cannot fail a plan
    that fits the budget (the high-water statistic shows how much of it was used)."""
    if budget_bytes is None:
        return int(os.environ.get("PYD4J_AGENT_ARENA_BYTES", 1 << 30))
    return _aligned(int(budget_bytes * 1.25) + (1 << 20))


class NativeBackend:
    """`Backend` over the native agent.

    Host build: views are numpy arrays over the arena (host memory), compute runs on the
    calling thread. CUDA build: views are CuPy arrays over the arena, and the agent's compute
    stream is made CuPy's current stream, so kernels and copies are ordered by the agent's
    events; `wait` orders the compute stream after the copy without blocking the host.

    Device and host lifetimes map onto the agent as: alloc -> alloc (or reserve_device when
    the key has a host copy), offload -> offload without release, free -> release_device
    (when a host copy exists) or free, drop_host -> drop_host.

    With `mark_compute` (default) the time between backend calls -- the executor's compute --
    is marked as compute on the agent, so `agent_stats()["overlap_seconds"]` is the time
    copies ran while the executor computed.
    """

    name = "native"

    def __init__(
        self,
        budget_bytes: int | None = None,
        host_bytes: int | None = None,
        *,
        arena_bytes: int | None = None,
        device: int = 0,
        mark_compute: bool = True,
    ) -> None:
        self.budget_bytes = budget_bytes
        self.alignment = ALIGNMENT
        arena = arena_bytes if arena_bytes is not None else default_arena_bytes(budget_bytes)
        if budget_bytes is not None and arena < budget_bytes:
            raise ValueError(f"arena_bytes={arena} is below budget_bytes={budget_bytes}; pass at least the budget")
        host = host_bytes if host_bytes is not None else max(2 * arena, 1 << 20)
        self.agent = Agent(arena, host, device)
        if budget_bytes is not None:
            self.agent.set_device_limit(max(int(budget_bytes), 1))
        self._ids: dict[int, int] = {}  # key -> agent buffer id
        self._live: dict[int, int] = {}  # key -> nbytes of its live device buffer
        self._zero: set[int] = set()  # live keys of 0 bytes (no agent buffer)
        self._stats = BackendStats()
        self._marking = mark_compute
        self._open = False
        self._stream = None
        self._prev_stream = None
        if self.agent.is_cuda:
            import cupy  # noqa: PLC0415 - only the CUDA build needs CuPy

            self.xp = cupy
            self._stream = cupy.cuda.ExternalStream(self.agent.stream_handle(STREAM_COMPUTE))
            self._prev_stream = cupy.cuda.get_current_stream()
            self._stream.use()
        else:
            self.xp = np
        self._compute_mark(True)

    def _compute_mark(self, begin: bool) -> None:
        if self._marking and begin != self._open and self.agent._h is not None:
            self.agent.mark_compute(begin)
            self._open = begin

    # -- device buffers ------------------------------------------------------------------
    @_backend_call
    def alloc(self, key: int, nbytes: int) -> None:
        if key in self._live:
            raise ValueError(f"tensor {key} is already allocated ({self._live[key]} bytes); free it first")
        nbytes = int(nbytes)
        if nbytes == 0:
            self._zero.add(key)
            self._live[key] = 0
            self._stats.n_alloc += 1
            return
        try:
            buf = self._ids.get(key)
            if buf is not None:  # a host copy exists: re-reserve the same buffer
                size = self.agent.info(buf).size
                if size != nbytes:
                    raise ValueError(
                        f"tensor {key} has a host copy of {size} bytes but is allocated with {nbytes}; "
                        f"drop_host({key}) first"
                    )
                self.agent.reserve_device(buf)
            else:
                self._ids[key] = self.agent.alloc(nbytes)
        except AgentOutOfDeviceMemory as e:
            s = self.agent.stats()
            budget = self.budget_bytes if self.budget_bytes is not None else int(s["device_capacity"])
            raise OutOfDeviceMemory(key, nbytes, int(s["device_in_use"]), budget) from e
        self._live[key] = nbytes
        self._stats.n_alloc += 1

    @_backend_call
    def free(self, key: int) -> None:
        if key not in self._live:
            raise KeyError(f"tensor {key} is not allocated on the device")
        del self._live[key]
        self._stats.n_free += 1
        if key in self._zero:
            self._zero.discard(key)
            return
        buf = self._ids[key]
        if self.agent.info(buf).has_host:
            self.agent.release_device(buf)  # the host copy lives on until drop_host
        else:
            self.agent.free(buf)
            del self._ids[key]

    @_backend_call
    def rename(self, src: int, dst: int) -> None:
        if dst in self._live:
            raise ValueError(f"tensor {dst} is already allocated ({self._live[dst]} bytes); free it first")
        if src not in self._live:
            raise KeyError(f"tensor {src} is not allocated on the device")
        self._live[dst] = self._live.pop(src)
        if src in self._zero:
            self._zero.discard(src)
            self._zero.add(dst)
            return
        buf = self._ids[src]
        if self.agent.info(buf).has_host:
            raise ValueError(f"tensor {src} has a host copy; a plan renames only buffers without one")
        self._ids[dst] = self._ids.pop(src)

    def _buf(self, key: int) -> int:
        if key not in self._ids:
            raise KeyError(f"tensor {key} has no buffer (never allocated, or freed and not offloaded)")
        return self._ids[key]

    @_backend_call
    def view(self, key: int, shape: tuple[int, ...], dtype: Any) -> Any:
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        need = count * dtype.itemsize
        have = self._live.get(key)
        if have is None:
            raise KeyError(f"tensor {key} is not allocated on the device")
        if need > have:
            raise ValueError(f"view of {need} bytes over tensor {key} of {have} bytes; allocate more")
        if need == 0:
            return self.xp.zeros(shape, dtype)
        ptr = self.agent.info(self._buf(key)).device_ptr
        if self.agent.is_cuda:
            cp = self.xp
            mem = cp.cuda.UnownedMemory(ptr, have, self)
            return cp.ndarray(shape, dtype, cp.cuda.MemoryPointer(mem, 0))
        raw = (ctypes.c_ubyte * need).from_address(ptr)
        return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)

    @_backend_call
    def upload(self, key: int, data: np.ndarray) -> None:
        data = np.ascontiguousarray(data)
        v = self.view(key, data.shape, data.dtype)
        if self.agent.is_cuda:
            v.set(data, stream=self._stream)
            self._stream.synchronize()
        else:
            v[...] = data

    @_backend_call
    def download(self, key: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        v = self.view(key, shape, dtype)
        if self.agent.is_cuda:
            out = v.get(stream=self._stream)
            self._stream.synchronize()
            return out
        return np.array(v, copy=True)

    # -- transfers -----------------------------------------------------------------------
    @_backend_call
    def offload(self, key: int) -> None:
        if key in self._zero:
            return
        self.agent.offload(self._buf(key), release=False)
        self._stats.bytes_offloaded += _aligned(self._live[key])

    @_backend_call
    def prefetch(self, key: int) -> None:
        if key in self._zero:
            return
        buf = self._buf(key)
        self.agent.prefetch(buf)
        self._stats.bytes_prefetched += _aligned(self.agent.info(buf).size)

    @_backend_call
    def wait(self, key: int) -> None:
        if key in self._zero or key not in self._ids:
            return
        if self.agent.is_cuda:
            self.agent.acquire(self._ids[key])  # compute stream waits, host does not
        else:
            self.agent.wait(self._ids[key])

    @_backend_call
    def drop_host(self, key: int) -> None:
        buf = self._ids.get(key)
        if buf is None or not self.agent.info(buf).has_host:
            return
        self.agent.drop_host(buf)
        if key not in self._live:  # nothing left: the agent freed the buffer
            del self._ids[key]

    @_backend_call
    def synchronize(self) -> None:
        self.agent.synchronize()
        if self._stream is not None:
            self._stream.synchronize()

    # -- statistics ------------------------------------------------------------------------
    def stats(self) -> BackendStats:
        s = self.agent.stats()
        out = BackendStats(**vars(self._stats))
        out.live_bytes = int(s["device_in_use"])
        out.peak_bytes = int(s["device_peak"])
        out.arena_peak_bytes = int(s["device_high_water"])
        out.host_bytes = int(s["host_in_use"])
        out.host_peak_bytes = int(s["host_peak"])
        return out

    @_backend_call
    def agent_stats(self) -> dict[str, float]:
        """The agent's own counters: copy timings, overlap, high-water mark."""
        return self.agent.stats()

    def close(self) -> None:
        self._compute_mark(False)
        self._marking = False
        if self._prev_stream is not None:
            self._prev_stream.use()
            self._prev_stream = None
        self.agent.close()
        self._ids.clear()
        self._live.clear()
        self._zero.clear()


__all__ = [
    "Agent",
    "AgentError",
    "AgentOutOfDeviceMemory",
    "AgentOutOfHostPool",
    "BufferInfo",
    "LibraryNotFound",
    "NativeBackend",
    "find_library",
    "load_library",
]
