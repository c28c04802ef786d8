"""`Agent`: a thin, typed wrapper of the native side-agent's C ABI -- one device arena and one pinned
host pool allocated once, offload/prefetch on their own streams, stream-ordered releases, statistics.
`Agent.is_cuda` tells whether the CUDA build or the host build is loaded."""

from __future__ import annotations

import ctypes
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

from pyd4j.device.native_lib import (STATE_NAMES, STREAM_COMPUTE, BufferInfo, BufferInfoStruct, StatsStruct, check_status,
                                    load_library)


class Agent:
    """One side-agent: a device arena of `device_bytes` and a pinned pool of `host_bytes`,
    each allocated once. Buffers are integer ids. See `native/include/pyd4j_agent.h`."""

    def __init__(self, device_bytes: int, host_bytes: int, device: int = 0) -> None:
        self._lib = load_library()
        handle = ctypes.c_void_p()
        self._call("pyd4j_agent_create", int(device_bytes), int(host_bytes), int(device), ctypes.byref(handle))
        self._h: int | None = handle.value
        self.is_cuda = bool(self._lib.pyd4j_agent_is_cuda())
        self.build_kind = self._lib.pyd4j_agent_build_kind().decode()
        self.alignment = int(self._lib.pyd4j_agent_alignment())

    # -- plumbing ------------------------------------------------------------------------
    def _call(self, name: str, *args: Any) -> None:
        check_status(self._lib, getattr(self._lib, name)(*args), name)

    @property
    def handle(self) -> int:
        if self._h is None:
            raise ValueError("this agent is closed; create a new Agent")
        return self._h

    def close(self) -> None:
        if self._h is not None:
            h, self._h = self._h, None
            self._call("pyd4j_agent_destroy", h)

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass

    # -- buffers -------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        out = ctypes.c_uint64()
        self._call("pyd4j_agent_alloc", self.handle, int(nbytes), ctypes.byref(out))
        return out.value

    def register_external(self, ptr: int, nbytes: int) -> int:
        out = ctypes.c_uint64()
        self._call("pyd4j_agent_register_external", self.handle, ctypes.c_void_p(ptr), int(nbytes), ctypes.byref(out))
        return out.value

    def offload(self, buf: int, release: bool = False) -> None:
        self._call("pyd4j_agent_offload", self.handle, buf, 1 if release else 0)

    def release_device(self, buf: int) -> None:
        self._call("pyd4j_agent_release_device", self.handle, buf)

    def reserve_device(self, buf: int) -> None:
        self._call("pyd4j_agent_reserve_device", self.handle, buf)

    def drop_host(self, buf: int) -> None:
        self._call("pyd4j_agent_drop_host", self.handle, buf)

    def prefetch(self, buf: int) -> None:
        self._call("pyd4j_agent_prefetch", self.handle, buf)

    def rebind_external(self, buf: int, ptr: int) -> None:
        """Points an offloaded external buffer at other memory of its size: the next prefetch
        copies there (the owner gave the old memory back and allocated a fresh array)."""
        self._call("pyd4j_agent_rebind_external", self.handle, buf, ctypes.c_void_p(ptr))

    def acquire(self, buf: int) -> None:
        self._call("pyd4j_agent_acquire", self.handle, buf)

    def wait(self, buf: int) -> None:
        self._call("pyd4j_agent_wait", self.handle, buf)

    def synchronize(self) -> None:
        self._call("pyd4j_agent_synchronize", self.handle)

    def free(self, buf: int) -> None:
        self._call("pyd4j_agent_free", self.handle, buf)

    def info(self, buf: int) -> BufferInfo:
        i = BufferInfoStruct()
        self._call("pyd4j_agent_buffer_info", self.handle, buf, ctypes.byref(i))
        return BufferInfo(
            size=i.size,
            reserved=i.reserved,
            state=STATE_NAMES.get(i.state, str(i.state)),
            external=bool(i.external),
            pending=bool(i.pending),
            has_host=bool(i.has_host),
            device_ptr=i.device_ptr,
            host_ptr=i.host_ptr,
        )

    def host_array(self, buf: int, which: str = "device") -> np.ndarray:
        """uint8 numpy array over a buffer's memory: `which` = "device" (host build only,
        where device memory is host memory) or "host" (the pinned slot, any build)."""
        i = self.info(buf)
        if which == "device":
            if self.is_cuda and not i.external:
                raise ValueError("device memory of the CUDA build is not host-addressable; use which='host'")
            ptr = i.device_ptr
        elif which == "host":
            ptr = i.host_ptr
        else:
            raise ValueError(f"which={which!r}: use 'device' or 'host'")
        if not ptr:
            raise ValueError(f"buffer {buf} has no {which} memory now (state {i.state}, host copy {i.has_host})")
        return np.ctypeslib.as_array((ctypes.c_ubyte * i.size).from_address(ptr))

    # -- streams, statistics ---------------------------------------------------------------
    def stream_handle(self, stream: int = STREAM_COMPUTE) -> int | None:
        out = ctypes.c_void_p()
        self._call("pyd4j_agent_stream_handle", self.handle, int(stream), ctypes.byref(out))
        return out.value

    def mark_compute(self, begin: bool) -> None:
        self._call("pyd4j_agent_mark_compute", self.handle, 1 if begin else 0)

    @contextmanager
    def compute(self) -> Iterator[None]:
        """Marks the enclosed work as a compute interval (for overlap statistics)."""
        self.mark_compute(True)
        try:
            yield
        finally:
            self.mark_compute(False)

    def stats(self) -> dict[str, float]:
        s = StatsStruct()
        self._call("pyd4j_agent_get_stats", self.handle, ctypes.byref(s))
        return {name: getattr(s, name) for name, _ in StatsStruct._fields_}

    def set_device_limit(self, nbytes: int) -> None:
        self._call("pyd4j_agent_set_device_limit", self.handle, int(nbytes))

    def reset_peak(self) -> None:
        self._call("pyd4j_agent_reset_peak", self.handle)

    def reset_stats(self) -> None:
        self._call("pyd4j_agent_reset_stats", self.handle)

    def bench_plain_copy(self, nbytes: int, direction: int, reps: int) -> float:
        out = ctypes.c_double()
        self._call("pyd4j_agent_bench_plain_copy", self.handle, int(nbytes), int(direction), int(reps), ctypes.byref(out))
        return out.value

