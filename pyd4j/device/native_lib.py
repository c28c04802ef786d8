"""The native side-agent's C ABI (`native/`, `pyd4j_agent.h`) as ctypes sees it: its version, status codes,
buffer states, streams, structures, errors, and where the library is found and how it is loaded.

The library is found at `$PYD4J_NATIVE_LIB`, else at `native/build/libpyd4j_agent.so` of the
source tree (built by `make setup`). The host build (no CUDA toolkit) has the same ABI with host
memory standing in for device memory.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


class StatsStruct(ctypes.Structure):
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


class BufferInfoStruct(ctypes.Structure):
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
        "pyd4j_agent_buffer_info": (i, [vp, u64, ctypes.POINTER(BufferInfoStruct)]),
        "pyd4j_agent_stream_handle": (i, [vp, i, ctypes.POINTER(vp)]),
        "pyd4j_agent_mark_compute": (i, [vp, i]),
        "pyd4j_agent_get_stats": (i, [vp, ctypes.POINTER(StatsStruct)]),
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


def check_status(lib: ctypes.CDLL, status: int, call: str) -> None:
    if status == OK:
        return
    msg = (lib.pyd4j_agent_last_error() or b"").decode("utf-8", "replace")
    cls = {
        ERR_OUT_OF_DEVICE_MEMORY: AgentOutOfDeviceMemory,
        ERR_OUT_OF_HOST_POOL: AgentOutOfHostPool,
    }.get(status, AgentError)
    raise cls(status, msg, call)
