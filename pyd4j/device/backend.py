"""The device-memory contract every plan executor runs on.

`pyd4j.device.executor.execute` replays a plan (`pyd4j.sched.plan`) and does all device
memory traffic through one object that satisfies `Backend`. Implementations:

- `pyd4j.device.host.HostBackend`: numpy "device" = a first-fit arena in one host buffer
  with a hard byte budget, a dict as the host store; transfers are synchronous copies.
- a cupy / native (C ABI) backend: device arena in GPU memory, pinned host store, copy streams.

Keys are integer tensor ids (`pyd4j.sched.plan.tid`); key `WORKSPACE` is the transient
convolution workspace of the current compute step. Sizes passed to `alloc` are *unaligned*;
a backend accounts `aligned(nbytes, alignment)` per live allocation (see
`pyd4j.sched.plan.aligned`), and `stats().peak_bytes` is the maximum over time of the sum of
those aligned sizes -- the same definition the simulator uses, so both must agree exactly.

Rules an executor follows (and a backend may rely on):
- `view` results are valid until the next `alloc`/`free` call (an allocator may compact);
  executors re-fetch views after every allocation.
- `offload(key)` copies the device buffer to the host store asynchronously; the device buffer
  stays allocated until `free(key)`, and `free` of a buffer with a pending offload waits for it.
- `prefetch(key)` copies the host copy into an already `alloc`ated buffer asynchronously;
  `wait(key)` blocks until transfers of that key are done; executors call `wait` before a
  compute step reads a prefetched tensor.
- the host copy of a key lives until `drop_host(key)` or `close()`.
- `rename(src, dst)` follows an in-place compute step (a MOVE record); a plan renames only
  buffers without a transfer in flight.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

WORKSPACE = -1
"""Key of the convolution workspace (at most one live at a time)."""


class OutOfDeviceMemory(MemoryError):
    """An allocation would exceed the backend's byte budget. Carries the numbers."""

    def __init__(self, key: int, nbytes: int, live: int, budget: int) -> None:
        self.key, self.nbytes, self.live, self.budget = key, nbytes, live, budget
        super().__init__(
            f"allocating {nbytes} bytes for tensor {key} with {live} bytes live exceeds the "
            f"device budget of {budget} bytes; plan with a smaller budget or a stronger policy"
        )


@dataclass
class BackendStats:
    """Counters every backend keeps (bytes are aligned, see module doc)."""

    live_bytes: int = 0
    peak_bytes: int = 0
    arena_peak_bytes: int = 0  # high-water of the address range (fragmentation included)
    n_alloc: int = 0
    n_free: int = 0
    bytes_offloaded: int = 0
    bytes_prefetched: int = 0
    host_bytes: int = 0
    host_peak_bytes: int = 0


@runtime_checkable
class Backend(Protocol):
    """Device memory + host store + transfers. Compute happens on `view`s with `xp`."""

    name: str
    xp: Any  # array module for compute on views: numpy, cupy
    alignment: int
    budget_bytes: int | None  # None: unlimited

    def alloc(self, key: int, nbytes: int) -> None:
        """Allocate a device buffer of `nbytes` for `key` (error if `key` is live).
        Raises `OutOfDeviceMemory` if the budget would be exceeded."""

    def free(self, key: int) -> None:
        """Release the device buffer of `key` (waits for its pending offload)."""

    def rename(self, src: int, dst: int) -> None:
        """The device buffer of `src` becomes `dst`'s (an in-place step wrote `dst` there): no
        copy, no allocation; `src` is no longer allocated, its host copy (if any) stays `src`'s."""

    def view(self, key: int, shape: tuple[int, ...], dtype: Any) -> Any:
        """Array (type `xp.ndarray`) over the first bytes of `key`'s buffer."""

    def upload(self, key: int, data: np.ndarray) -> None:
        """Synchronously copy host `data` into `key`'s device buffer (inputs, parameters)."""

    def download(self, key: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """Synchronously copy `key`'s device buffer to a new host numpy array."""

    def offload(self, key: int) -> None:
        """Start copying `key`'s device buffer into the host store."""

    def prefetch(self, key: int) -> None:
        """Start copying the host copy of `key` into its (allocated) device buffer."""

    def wait(self, key: int) -> None:
        """Block until all transfers of `key` are complete."""

    def drop_host(self, key: int) -> None:
        """Forget the host copy of `key`."""

    def synchronize(self) -> None:
        """Block until every transfer is complete."""

    def stats(self) -> BackendStats:
        """Current counters (a snapshot)."""

    def close(self) -> None:
        """Release all device and host memory."""
