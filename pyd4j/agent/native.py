"""The native side-agent (`native/`, C ABI `pyd4j_agent.h`) driven through ctypes.

Two layers:

- `Agent`: a thin, typed wrapper of the C ABI -- one device arena and one pinned host pool
  allocated once, offload/prefetch on their own streams, stream-ordered releases, statistics.
- `NativeBackend`: the `pyd4j.agent.backend.Backend` protocol on top of an `Agent`, so the plan
  executor runs the same plans on it as on the numpy host backend.

The library is found at `$PYD4J_NATIVE_LIB`, else at `native/build/libpyd4j_agent.so` of the
source tree (built by `make setup`). The host build (no CUDA toolkit) has the same ABI with host
memory standing in for device memory; `Agent.is_cuda` tells which one is loaded.
"""

from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from pyd4j.agent.backend import BackendStats, OutOfDeviceMemory

ABI_VERSION = 3
ALIGNMENT = 256

OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_OUT_OF_DEVICE_MEMORY = 2
ERR_OUT_OF_HOST_POOL = 3
ERR_UNKNOWN_BUFFER = 4
ERR_BAD_STATE = 5
ERR_CUDA = 6
ERR_SYSTEM = 7
ERR_NOT_SUPPORTED = 8

_ERROR_NAMES = {
    ERR_INVALID_ARGUMENT: "invalid argument",
    ERR_OUT_OF_DEVICE_MEMORY: "out of device memory",
    ERR_OUT_OF_HOST_POOL: "out of pinned host pool",
    ERR_UNKNOWN_BUFFER: "unknown buffer",
    ERR_BAD_STATE: "bad buffer state",
    ERR_CUDA: "CUDA error",
    ERR_SYSTEM: "system error",
    ERR_NOT_SUPPORTED: "not supported",
}

RESIDENT, HOST, RESERVED = 0, 1, 2
STATE_NAMES = {RESIDENT: "RESIDENT", HOST: "HOST", RESERVED: "RESERVED"}
STREAM_COMPUTE, STREAM_OFFLOAD, STREAM_PREFETCH = 0, 1, 2
DEVICE_TO_HOST, HOST_TO_DEVICE = 0, 1

ENV_LIB = "PYD4J_NATIVE_LIB"


class AgentError(RuntimeError):
    """A C ABI call failed. `code` is the status, `message` the library's explanation."""

    def __init__(self, code: int, message: str, call: str) -> None:
        self.code, self.message, self.call = code, message, call
        kind = _ERROR_NAMES.get(code, f"status {code}")
        super().__init__(f"{call}: {kind}: {message}")


class AgentOutOfDeviceMemory(AgentError, MemoryError):
    """The device arena (or its limit) cannot fit the request."""


class AgentOutOfHostPool(AgentError, MemoryError):
    """The pinned host pool cannot fit the request."""


class LibraryNotFound(FileNotFoundError):
    pass


class _Stats(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "device_capacity",
            "device_in_use",
            "device_peak",
            "device_largest_free",
            "host_capacity",
            "host_in_use",
            "host_peak",
            "bytes_offloaded",
            "bytes_prefetched",
            "n_offloads",
            "n_prefetches",
            "n_buffers",
        )
    ] + [
        (name, ctypes.c_double)
        for name in (
            "offload_seconds",
            "prefetch_seconds",
            "copy_busy_seconds",
            "compute_seconds",
            "overlap_seconds",
            "wait_seconds",
        )
    ] + [("device_high_water", ctypes.c_uint64), ("device_limit", ctypes.c_uint64)]


class _BufferInfo(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64),
        ("state", ctypes.c_uint32),
        ("external", ctypes.c_uint32),
        ("pending", ctypes.c_uint32),
        ("has_host", ctypes.c_uint32),
        ("device_ptr", ctypes.c_void_p),
        ("host_ptr", ctypes.c_void_p),
    ]


@dataclass(frozen=True)
class BufferInfo:
    size: int
    reserved: int
    state: str
    external: bool
    pending: bool
    has_host: bool
    device_ptr: int | None
    host_ptr: int | None


def default_library_path() -> Path:
    return Path(__file__).resolve().parents[2] / "native" / "build" / "libpyd4j_agent.so"


def find_library() -> Path:
    """The agent library: `$PYD4J_NATIVE_LIB` if set, else the source tree's build."""
    env = os.environ.get(ENV_LIB)
    if env:
        p = Path(env)
        if not p.is_file():
            raise LibraryNotFound(
                f"{ENV_LIB}={env} does not name a file; point it at libpyd4j_agent.so or unset "
                f"it to use the build of `make setup`"
            )
        return p
    p = default_library_path()
    if not p.is_file():
        raise LibraryNotFound(
            f"the side-agent library is not built ({p} is missing); run `make setup` (or "
            f"`cmake -S native -B native/build && cmake --build native/build`), or set "
            f"{ENV_LIB} to a built libpyd4j_agent.so"
        )
    return p


_LIB: ctypes.CDLL | None = None


def load_library() -> ctypes.CDLL:
    """Loads the library once and declares every ABI function's signature."""
    global _LIB
    if _LIB is not None:
        return _LIB
    path = find_library()
    lib = ctypes.CDLL(str(path))
    u64, p_u64, vp, i = ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_int
    sigs: dict[str, tuple[Any, list[Any]]] = {
        "pyd4j_agent_abi_version": (i, []),
        "pyd4j_agent_is_cuda": (i, []),
        "pyd4j_agent_build_kind": (ctypes.c_char_p, []),
        "pyd4j_agent_last_error": (ctypes.c_char_p, []),
        "pyd4j_agent_alignment": (ctypes.c_size_t, []),
        "pyd4j_agent_create": (i, [u64, u64, i, ctypes.POINTER(vp)]),
        "pyd4j_agent_destroy": (i, [vp]),
        "pyd4j_agent_alloc": (i, [vp, u64, p_u64]),
        "pyd4j_agent_register_external": (i, [vp, vp, u64, p_u64]),
        "pyd4j_agent_offload": (i, [vp, u64, i]),
        "pyd4j_agent_release_device": (i, [vp, u64]),
        "pyd4j_agent_reserve_device": (i, [vp, u64]),
        "pyd4j_agent_drop_host": (i, [vp, u64]),
        "pyd4j_agent_prefetch": (i, [vp, u64]),
        "pyd4j_agent_rebind_external": (i, [vp, u64, vp]),
        "pyd4j_agent_acquire": (i, [vp, u64]),
        "pyd4j_agent_wait": (i, [vp, u64]),
        "pyd4j_agent_synchronize": (i, [vp]),
        "pyd4j_agent_free": (i, [vp, u64]),
        "pyd4j_agent_buffer_info": (i, [vp, u64, ctypes.POINTER(_BufferInfo)]),
        "pyd4j_agent_stream_handle": (i, [vp, i, ctypes.POINTER(vp)]),
        "pyd4j_agent_mark_compute": (i, [vp, i]),
        "pyd4j_agent_get_stats": (i, [vp, ctypes.POINTER(_Stats)]),
        "pyd4j_agent_set_device_limit": (i, [vp, u64]),
        "pyd4j_agent_reset_peak": (i, [vp]),
        "pyd4j_agent_reset_stats": (i, [vp]),
        "pyd4j_agent_bench_plain_copy": (i, [vp, u64, i, i, ctypes.POINTER(ctypes.c_double)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    version = lib.pyd4j_agent_abi_version()
    if version != ABI_VERSION:
        raise ImportError(
            f"{path} has side-agent ABI version {version}, this pyd4j needs {ABI_VERSION}; "
            f"rebuild it with `make setup`"
        )
    _LIB = lib
    return lib


def _check(lib: ctypes.CDLL, status: int, call: str) -> None:
    if status == OK:
        return
    msg = (lib.pyd4j_agent_last_error() or b"").decode("utf-8", "replace")
    cls = {
        ERR_OUT_OF_DEVICE_MEMORY: AgentOutOfDeviceMemory,
        ERR_OUT_OF_HOST_POOL: AgentOutOfHostPool,
    }.get(status, AgentError)
    raise cls(status, msg, call)


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
        _check(self._lib, getattr(self._lib, name)(*args), name)

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
        i = _BufferInfo()
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
        s = _Stats()
        self._call("pyd4j_agent_get_stats", self.handle, ctypes.byref(s))
        return {name: getattr(s, name) for name, _ in _Stats._fields_}

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
