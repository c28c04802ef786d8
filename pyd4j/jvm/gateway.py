"""An out-of-process JVM with ND4J, driven over Py4J: its own JVM flags, its own crash domain.

    from pyd4j.jvm.gateway import Gateway
    with Gateway(heap_max="2g", javacpp_maxbytes="8g") as gw:
        x = gw.put(np.ones((1024, 1024), np.float32))   # INDArray in the child JVM
        y = gw.get(x.mmul(x))                          # numpy array

Use it when the in-process JVM (pyd4j.jvm.start) already runs with other options, or to keep a
job's memory and crashes out of the Python process.

Security and lifetime (the pattern of pyspark's java_gateway.py): the child JVM gets a random
auth token in an environment variable (never on its command line, which other users can read),
listens on 127.0.0.1 at a free port it prints on stdout, and refuses connections without the
token. It exits when its stdin closes, which happens when `close()` is called or when this
Python process dies in any way (the OS closes the pipe), so no JVM outlives its parent. The
child runs in its own session, so Ctrl-C in a terminal reaches Python, not the JVM.

Bulk data: Py4J would send a byte[] base64-encoded through its socket (about 10 MB/s). Arrays go
instead through a shared-memory arena: a file (in /dev/shm where there is one; PYD4J_SHM_DIR
overrides) that both processes map once and that is unlinked at once, so nothing is left behind.
`put` copies the array into the arena chunk by chunk and the child memcpys each chunk into a new
ND4J-owned array; `get` runs the other way into a new numpy array. Each side makes one copy, both
at memcpy speed; a fresh shared-memory file per transfer would instead pay for allocating its
pages every time (tmpfs pages fault in at roughly 1 GB/s, without huge pages). The arena grows to
at most ARENA_MAX_BYTES (64 MiB), so any size of array moves, and the results have ordinary
lifetimes: the INDArray is ND4J's (Py4J releases it when the Python JavaObject goes), the numpy
array is numpy's.
"""

from __future__ import annotations

import collections
import mmap
import os
import secrets
import subprocess
import tempfile
import threading
import time
from typing import Any

import numpy as np

from pyd4j.dtypes import nd4j_dtype, numpy_dtype
from pyd4j.jvm.classpath import ClasspathError
from pyd4j.jvm.core import java_command
from pyd4j.jvm.options import JvmOptionError, JvmOptions

MAIN_CLASS = "org.pyd4j.Gateway"
TOKEN_ENV = "PYD4J_GATEWAY_TOKEN"
PORT_LINE = "PYD4J_GATEWAY_PORT "
# Transfers move through one shared-memory arena of at most this size, chunk by chunk; memory for
# it is allocated once, so large transfers do not pay for fresh shared-memory pages every time.
ARENA_MAX_BYTES = 64 << 20


class GatewayError(RuntimeError):
    """The child JVM did not start, or died; the message carries the end of its stderr."""


def shm_dir() -> str:
    """Where transfer files go: PYD4J_SHM_DIR, else /dev/shm (RAM-backed), else the temp dir."""
    chosen = os.environ.get("PYD4J_SHM_DIR")
    if chosen:
        if not os.path.isdir(chosen) or not os.access(chosen, os.W_OK):
            raise GatewayError(f"PYD4J_SHM_DIR={chosen!r} is not a writable folder; fix or unset it")
        return chosen
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


class Gateway:
    """A child JVM with ND4J on pyd4j's classpath, reached over Py4J on loopback with a token."""

    def __init__(self, options: JvmOptions | None = None, start_timeout: float = 120.0, **option_values: Any) -> None:
        """Start the child JVM with `options` (or keyword options as for pyd4j.jvm.start)."""
        if options is not None and option_values:
            raise TypeError("pass either a JvmOptions or keyword options, not both")
        self.options = options if options is not None else JvmOptions.of(**option_values)
        self._token = secrets.token_urlsafe(32)
        self._stderr: collections.deque[str] = collections.deque(maxlen=60)
        self._closed = False
        self._gateway = None
        self._lock = threading.Lock()
        self._arena: np.ndarray | None = None
        self._arena_map: mmap.mmap | None = None
        command = java_command(self.options, MAIN_CLASS)
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=self._child_env(), start_new_session=True, text=True, bufsize=1,
        )
        threading.Thread(target=self._drain, args=(self._process.stderr, self._stderr), daemon=True,
                         name="pyd4j-gateway-stderr").start()
        try:
            self.port = self._read_port(start_timeout)
            self._connect()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ process plumbing

    def _child_env(self) -> dict[str, str]:
        """The child's environment: ours, the token, and transparent huge pages for glibc malloc
        (ND4J's off-heap arrays fault in several times faster; glibc 2.35+, ignored elsewhere)."""
        env = {**os.environ, TOKEN_ENV: self._token}
        tunables = env.get("GLIBC_TUNABLES", "")
        if "glibc.malloc.hugetlb" not in tunables:
            env["GLIBC_TUNABLES"] = ":".join(t for t in (tunables, "glibc.malloc.hugetlb=1") if t)
        return env

    @staticmethod
    def _drain(stream, sink: collections.deque | None) -> None:
        for line in stream:
            if sink is not None:
                sink.append(line.rstrip("\n"))

    def _read_port(self, timeout: float) -> int:
        found: list[int] = []

        def reader() -> None:
            for line in self._process.stdout:
                if line.startswith(PORT_LINE):
                    found.append(int(line[len(PORT_LINE):].strip()))
                    break
            self._drain(self._process.stdout, None)   # keep the pipe empty for the child's lifetime

        thread = threading.Thread(target=reader, daemon=True, name="pyd4j-gateway-stdout")
        thread.start()
        deadline = time.monotonic() + timeout
        while not found:
            if self._process.poll() is not None:
                time.sleep(0.2)  # let the stderr thread collect the last lines
                self._raise_start_failure()
            if time.monotonic() > deadline:
                raise GatewayError(f"the gateway JVM did not report its port within {timeout:.0f} s; "
                                   f"its stderr ends with: {self._stderr_tail()}")
            time.sleep(0.02)
        return found[0]

    def _stderr_tail(self) -> str:
        return " | ".join(self._stderr) or "(nothing)"

    def _raise_start_failure(self) -> None:
        tail = self._stderr_tail()
        if "Unrecognized VM option" in tail or "Could not create the Java Virtual Machine" in tail:
            raise JvmOptionError(f"the gateway JVM rejects the options {self.options.args()}: {tail}; "
                                 f"fix the spelling (see `java -X` and `java -XX:+PrintFlagsFinal -version`)")
        if "ClassNotFoundException" in tail or "Could not find or load main class" in tail:
            raise ClasspathError(f"the gateway JVM cannot find {MAIN_CLASS}: {tail}; run `make setup`")
        raise GatewayError(f"the gateway JVM exited with status {self._process.returncode}: {tail}")

    def _connect(self) -> None:
        from py4j.java_gateway import GatewayParameters, JavaGateway  # noqa: PLC0415

        self._gateway = JavaGateway(gateway_parameters=GatewayParameters(
            address="127.0.0.1", port=self.port, auth_token=self._token, auto_convert=True, eager_load=True))
        self.entry = self._gateway.entry_point
        self.pid: int = int(self.entry.pid())

    # ------------------------------------------------------------------ public API

    @property
    def jvm(self):
        """Py4J's view of the child's classes: `gw.jvm.org.nd4j.linalg.factory.Nd4j`."""
        self._check_open()
        return self._gateway.jvm

    def longs(self, values: list[int]):
        """A Java long[] in the child (ND4J's shape arguments)."""
        array = self._gateway.new_array(self._gateway.jvm.long, len(values))
        for i, v in enumerate(values):
            array[i] = int(v)
        return array

    def describe(self) -> dict[str, str]:
        """What ND4J in the child runs on (flat keys: nd4j.version, nd4j.backend, blas.vendor, ...)."""
        self._check_open()
        return {str(k): str(v) for k, v in self.entry.describe().items()}

    def put(self, a: np.ndarray):
        """Send a numpy array to the child; returns the child's INDArray (a Py4J JavaObject).

        The array's bytes go through the shared-memory arena in chunks: numpy copies a chunk in,
        the child copies it into a new ND4J-owned array. C- and F-contiguous arrays go as they
        are; other layouts are made C-contiguous first (one more copy).
        """
        self._check_open()
        a = np.asarray(a)
        dtype = nd4j_dtype(a.dtype)
        order = "f" if (a.ndim > 1 and a.flags.f_contiguous and not a.flags.c_contiguous) else "c"
        if not (a.flags.c_contiguous or a.flags.f_contiguous) or not a.dtype.isnative:
            a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))
        x = self.entry.allocate(dtype, [int(d) for d in a.shape], order)
        if a.nbytes == 0:
            return x
        raw = a.reshape(-1, order="A").view(np.uint8)
        with self._lock:
            arena = self._arena_for(a.nbytes)
            for start in range(0, a.nbytes, len(arena)):
                n = min(len(arena), a.nbytes - start)
                np.copyto(arena[:n], raw[start:start + n])
                self.entry.fromArena(x, start, n)
        return x

    def get(self, x, out: np.ndarray | None = None) -> np.ndarray:
        """Bring the child's INDArray `x` into a new numpy array (same order if x is dense), or
        into `out` (a C-contiguous array of x's dtype and shape; saves allocating fresh pages)."""
        self._check_open()
        dense = self.entry.dense(x)
        header = str(self.entry.header(dense)).split(",")
        dtype = numpy_dtype(header[0])
        nbytes, order, shape = int(header[1]), header[2].upper(), tuple(int(d) for d in header[3:])
        if out is None:
            out = np.empty(shape, dtype=dtype, order=order)
        elif out.dtype != dtype or out.shape != shape or not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError(f"out must be a writeable C-contiguous {dtype} array of shape {shape}; got "
                             f"{out.dtype} {out.shape} (C-contiguous: {out.flags.c_contiguous})")
        elif order == "F" and len(shape) > 1:
            dense = self.entry.denseC(x)
        if nbytes == 0:
            return out
        raw = out.reshape(-1, order="A").view(np.uint8)
        with self._lock:
            arena = self._arena_for(nbytes)
            for start in range(0, nbytes, len(arena)):
                n = min(len(arena), nbytes - start)
                self.entry.toArena(dense, start, n)
                np.copyto(raw[start:start + n], arena[:n])
        return out

    def _arena_for(self, nbytes: int) -> np.ndarray:
        """The shared-memory arena (grown up to ARENA_MAX_BYTES), as a uint8 array on this side."""
        want = min(max(nbytes, 1 << 20), ARENA_MAX_BYTES)
        if self._arena is None or len(self._arena) < want:
            self._arena = None
            if self._arena_map is not None:
                self._arena_map.close()
                self._arena_map = None
            fd, path = tempfile.mkstemp(prefix="pyd4j-arena-", suffix=".shm", dir=shm_dir())
            try:
                os.ftruncate(fd, want)
                self._arena_map = mmap.mmap(fd, want, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
                self.entry.attachArena(path, want)
            finally:
                os.close(fd)
                os.unlink(path)   # both sides hold mappings; nothing stays behind in the folder
            self._arena = np.frombuffer(self._arena_map, dtype=np.uint8)
        return self._arena

    def is_alive(self) -> bool:
        """Whether the child JVM is still running."""
        return self._process.poll() is None

    def close(self, timeout: float = 20.0) -> None:
        """Stop the child JVM (closing its stdin makes it exit; killed if it does not in `timeout` s)."""
        if self._closed:
            return
        self._closed = True
        if self._gateway is not None:
            try:
                self._gateway.close(keep_callback_server=False, close_callback_server_connections=False)
            except Exception:  # noqa: BLE001  (the child may already be gone)
                pass
        self._arena = None
        if self._arena_map is not None:
            try:
                self._arena_map.close()
            except BufferError:
                pass
        try:
            if self._process.stdin:
                self._process.stdin.close()
        except OSError:
            pass
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)

    def _check_open(self) -> None:
        if self._closed:
            raise GatewayError("this gateway is closed; open a new Gateway()")
        if not self.is_alive():
            raise GatewayError(f"the gateway JVM (pid {self._process.pid}) died with status "
                               f"{self._process.returncode}: {self._stderr_tail()}")

    def __enter__(self) -> "Gateway":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"pid {getattr(self, 'pid', '?')}, port {getattr(self, 'port', '?')}"
        return f"Gateway({state}, options={self.options.args()})"
