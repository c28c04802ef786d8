"""What the offload-tier tests share: ND4J calls with raw access to an array's bytes, Java exceptions
as pyd4j raises them, and the fixtures that open tiers and close them."""

from __future__ import annotations

import ctypes
import time
from contextlib import contextmanager
from math import prod

import numpy as np
import pytest

KiB, MiB = 1 << 10, 1 << 20
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
DTYPES = ["FLOAT", "DOUBLE", "HALF", "BFLOAT16", "INT", "LONG", "SHORT", "BYTE", "UBYTE", "BOOL",
          "UINT16", "UINT32", "UINT64"]
SHAPES = [((), "c"), ((7,), "c"), ((33, 17), "c"), ((33, 17), "f"), ((4, 5, 6), "f"),
          ((2, 3, 4, 5), "c"), ((0, 3), "c")]
TIERS = ["disk", "pinned"]



class Nd:
    """ND4J calls with Java long[] shapes, and raw access to an array's bytes."""

    def __init__(self) -> None:
        import jpype

        self.jpype = jpype
        self.Nd4j = jpype.JClass("org.nd4j.linalg.factory.Nd4j")
        self.DataType = jpype.JClass("org.nd4j.linalg.api.buffer.DataType")
        self.NDArrayIndex = jpype.JClass("org.nd4j.linalg.indexing.NDArrayIndex")
        self.DiskTier = jpype.JClass("org.pyd4j.train.DiskTier")
        self.PinnedHostTier = jpype.JClass("org.pyd4j.train.PinnedHostTier")
        self.Paths = jpype.JClass("java.nio.file.Paths")

    def longs(self, dims) -> object:
        return self.jpype.JArray(self.jpype.JLong)(list(dims))

    def tier(self, kind: str, max_bytes: int, directory=None):
        if kind == "disk":
            if directory is None:
                return self.DiskTier(max_bytes)
            return self.DiskTier(self.Paths.get(str(directory)), max_bytes)
        return self.PinnedHostTier(max_bytes)

    def filled(self, dtype: str, shape, order: str, rng: np.random.Generator):
        """A new ND4J array whose memory holds random bytes, and the same elements in numpy
        (as unsigned integers of the element's width, so every bit pattern compares)."""
        dt = self.DataType.valueOf(dtype)
        width = int(dt.width())
        x = self.Nd4j.create(dt, self.longs(shape), order)
        n = prod(shape)
        raw = rng.integers(0, 2, n, dtype=np.uint8).tobytes() if dtype == "BOOL" else rng.bytes(n * width)
        if n:
            ctypes.memmove(address(x), raw, n * width)
        ref = np.frombuffer(raw, UINT[width]).reshape(shape, order=order.upper())
        return x, ref

    def finite(self, dtype: str, shape, rng: np.random.Generator):
        """A c-order array of finite values (for views that ND4J itself must copy)."""
        x = self.Nd4j.create(self.DataType.valueOf(dtype), self.longs(shape), "c")
        vals = rng.integers(-1000, 1000, prod(shape)).astype({"FLOAT": np.float32, "DOUBLE": np.float64,
                                                              "INT": np.int32, "LONG": np.int64}[dtype])
        ctypes.memmove(address(x), vals.tobytes(), vals.nbytes)
        return x, vals.reshape(shape)


def address(x) -> int:
    return int(x.data().addressPointer().address())


def raw_bytes(x) -> bytes:
    n = int(x.length()) * int(x.dataType().width())
    return ctypes.string_at(address(x), n) if n else b""


@contextmanager
def raises(cls, match: str | None = None):
    """pytest.raises for a Java exception, translated as pyd4j translates it for users."""
    from pyd4j.jvm import java_errors

    with pytest.raises(cls, match=match) as info, java_errors():
        yield info


def wait_until(cond, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def assert_same(y, ref: np.ndarray, order: str, dtype: str, what: str) -> None:
    assert tuple(y.shape()) == ref.shape, what
    assert str(y.ordering()) == order, what
    assert str(y.dataType()) == dtype, what
    assert not y.isAttached(), f"{what}: the array from take must be detached"
    assert raw_bytes(y) == np.ascontiguousarray(ref).tobytes(order=order.upper()), what


@pytest.fixture
def nd(jvm):
    return Nd()


@pytest.fixture
def tiers():
    """Tiers a test opens; closed even when it fails."""
    opened = []
    yield opened
    for t in opened:
        t.close()


# -- contents ------------------------------------------------------------------------------
