"""numpy <-> ND4J INDArray in the same process, without copying where memory allows.

    import numpy as np, pyd4j.nd as nd
    x = nd.from_numpy(np.ones((3, 4), np.float32))   # INDArray over the numpy memory
    x.addi(1.0)                                      # numpy sees the 2.0s
    y = nd.to_numpy(x.mmul(x.transpose()))           # numpy view of ND4J's result

Zero-copy rules
---------------
`from_numpy(a)` wraps `a`'s memory when its dtype is one both sides share (see SUPPORTED_DTYPES),
it is aligned, writeable, in native byte order, and every stride is a non-negative multiple of the
item size: C order, F order, and views with offsets and steps (`a[1:, ::2]`) all qualify. ND4J
strides count elements where numpy's count bytes; `from_numpy` converts them and wraps only the
bytes the view spans. Anything else (negative or zero strides, byte-swapped or unaligned data,
read-only arrays ND4J could write into) cannot be wrapped. Copies are never silent:

    copy=False (default)  wrap, or raise CopyRequiredError saying why and how to fix it
    copy=None             wrap when possible, else copy (like numpy's `copy=None`)
    copy=True             always copy into new memory of the other side

A copy into ND4J is made by numpy into new numpy memory that the INDArray then wraps and alone
keeps alive: numpy's allocator asks Linux for huge pages, so the copy runs at `np.copyto` speed,
where ND4J's own allocator touches every fresh 4 KiB page first (about 1 GB/s on a loaded VM).
Such memory, like any wrapped numpy memory, is not counted against JavaCPP's maxbytes.

`to_numpy(x)` views the INDArray's memory, with the same `copy` choices. Arrays attached to an
ND4J workspace cannot be viewed: the workspace reuses their memory when it closes.

Lifetime (both ways, no global lists)
-------------------------------------
numpy -> ND4J: `jpype.nio.convertToDirectBuffer` makes a Java direct ByteBuffer over the numpy
memory; JPype ties the Python buffer (and so the numpy array) to that ByteBuffer and releases it
when Java collects the ByteBuffer. The Java helper `org.pyd4j.Buffers.wrap` builds the ND4J
DataBuffer on it and registers a `java.lang.ref.Cleaner` action that holds the ByteBuffer until the
DataBuffer, and every INDArray or view on it, is unreachable. So the numpy memory stays valid while
ND4J can reach it, however the Python name is dropped, and is freed after Java's GC collects the
last INDArray. (Over 2 GiB, where a ByteBuffer cannot reach, a JPype proxy holding the numpy array
plays the ByteBuffer's part.)

ND4J -> numpy: the numpy array's `base` is a small `_Nd4jMemory` object that holds the INDArray
(a JPype global reference). While numpy (or any view of it) lives, the INDArray and its memory
live; when the last numpy reference goes, the reference is released and Java may collect it.

The CPU backend is assumed (memory addresses are host addresses).
"""

from __future__ import annotations

import sys
from typing import Any, Literal

import numpy as np

import pyd4j.jvm
from pyd4j.dtypes import (  # noqa: F401  (re-exported: nd is where users look for them)
    SUPPORTED_DTYPES,
    UnsupportedDtypeError,
    nd4j_dtype,
    supported_dtypes,
)
from pyd4j.dtypes import numpy_dtype as _numpy_dtype

_MAX_BYTEBUFFER = (1 << 31) - 1  # a java.nio.ByteBuffer's capacity is an int

Copy = Literal[True, False] | None


class CopyRequiredError(ValueError):
    """The array cannot be shared without a copy, and the caller did not allow one."""


def _java():
    """The Java classes nd needs; starts the JVM with default options if none runs yet."""
    global _J
    if _J is None:
        pyd4j.jvm.info()
        import jpype  # noqa: PLC0415
        import jpype.nio  # noqa: PLC0415

        buffers = jpype.JClass("org.pyd4j.Buffers")
        _J = {
            "jpype": jpype,
            "Buffers": buffers,
            "names": [str(n) for n in buffers.dataTypeNames()],
            "long_array": jpype.JArray(jpype.JLong),
            "INDArray": jpype.JClass("org.nd4j.linalg.api.ndarray.INDArray"),
        }
    return _J


_J: dict[str, Any] | None = None


# --------------------------------------------------------------------------------------------
# numpy -> ND4J


def why_not_zero_copy(a: np.ndarray) -> str | None:
    """Why `a` cannot be wrapped by ND4J as it is (None when it can)."""
    if a.dtype.byteorder == (">" if sys.byteorder == "little" else "<"):
        return f"its byte order is non-native ({a.dtype.str})"
    if not a.flags.aligned:
        return "its data is not aligned to its item size"
    if not a.flags.writeable:
        return "it is read-only and ND4J could write into it"
    for n, s in zip(a.shape, a.strides):
        if n > 1 and (s <= 0 or s % a.itemsize):
            return (f"its strides {a.strides} (bytes, item size {a.itemsize}) include a negative, zero or "
                    f"non-multiple stride, which ND4J cannot express")
    return None


def _element_strides(a: np.ndarray) -> list[int]:
    """numpy byte strides -> ND4J element strides; length-1 axes get their natural stride."""
    strides = []
    for i, (n, s) in enumerate(zip(a.shape, a.strides)):
        if n > 1:
            strides.append(s // a.itemsize)
        else:
            natural = 1
            for m in (a.shape[i + 1:] if not _is_fortran_like(a) else a.shape[:i]):
                natural *= m
            strides.append(max(natural, 1))
    return strides


def _is_fortran_like(a: np.ndarray) -> bool:
    return a.ndim > 1 and a.flags.f_contiguous and not a.flags.c_contiguous


def _order(a: np.ndarray) -> str:
    """'f' for Fortran-contiguous or Fortran-like strided views, else 'c'."""
    if a.flags.c_contiguous:
        return "c"
    if a.flags.f_contiguous:
        return "f"
    big = [s for n, s in zip(a.shape, a.strides) if n > 1]
    return "f" if big and big == sorted(big) and big != sorted(big, reverse=True) else "c"


def from_numpy(a: np.ndarray | Any, copy: Copy = False):
    """An INDArray for the numpy array `a`, sharing its memory (see module doc for `copy`).

    Writes through either side are seen by the other. Raises UnsupportedDtypeError for dtypes
    ND4J lacks and CopyRequiredError when `a` cannot be shared and `copy` is False.
    """
    if not isinstance(a, np.ndarray):
        a = np.asarray(a)
    dtype_name = nd4j_dtype(a.dtype)
    if a.size == 0 or copy is True:
        return _copy_in(a, dtype_name)
    reason = why_not_zero_copy(a)
    if reason is not None:
        if copy is None:
            return _copy_in(a, dtype_name)
        raise CopyRequiredError(
            f"cannot share a {a.dtype} array of shape {a.shape} with ND4J without copying: {reason}. "
            f"Pass copy=True (or copy=None to copy only when needed), or np.ascontiguousarray(a) first"
        )
    return _wrap(a, dtype_name)


def _wrap(a: np.ndarray, dtype_name: str):
    """The zero-copy INDArray over `a` (which why_not_zero_copy accepted)."""
    j = _java()
    order = _order(a)
    strides = _element_strides(a)
    span = a.itemsize * (1 + sum((n - 1) * s for n, s in zip(a.shape, strides)))
    # The bytes the view spans, starting at its first element, as one flat array whose base chain
    # keeps `a`'s memory alive.
    flat = np.lib.stride_tricks.as_strided(a, shape=(span // a.itemsize,), strides=(a.itemsize,)) \
        if not (a.flags.c_contiguous or a.flags.f_contiguous) else a
    longs = j["long_array"]
    with pyd4j.jvm.java_errors():
        if span <= _MAX_BYTEBUFFER:
            memory = j["jpype"].nio.convertToDirectBuffer(flat if flat.flags.c_contiguous else flat.T)
            return j["Buffers"].wrap(memory, dtype_name, longs(list(a.shape)), longs(strides), order)
        owner = j["jpype"].JProxy("java.lang.Runnable", inst=_PythonOwner(flat))
        return j["Buffers"].wrapAddress(a.ctypes.data, span, owner, dtype_name, longs(list(a.shape)),
                                        longs(strides), order)


class _PythonOwner:
    """What a JPype proxy holds to keep a large numpy array alive for Java (see module doc)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def run(self) -> None:  # java.lang.Runnable; never called
        pass


def _copy_in(a: np.ndarray, dtype_name: str):
    """A copy of `a` that ND4J owns the only reference to: numpy copies into new memory (its
    allocator asks for transparent huge pages, so first touch is cheap), which is then wrapped
    like any numpy array and lives exactly as long as the INDArray (see module doc)."""
    j = _java()
    order = "F" if _is_fortran_like(a) else "C"
    if a.size == 0:
        with pyd4j.jvm.java_errors():
            return j["Buffers"].allocate(dtype_name, j["long_array"](list(a.shape)), order.lower())
    fresh = np.empty(a.shape, dtype=a.dtype.newbyteorder("="), order=order)
    np.copyto(fresh, a, casting="equiv")
    return _wrap(fresh, dtype_name)


# --------------------------------------------------------------------------------------------
# ND4J -> numpy


class _Nd4jMemory:
    """numpy `base` for a view of ND4J memory: holds the INDArray while numpy uses its memory."""

    __slots__ = ("indarray", "__array_interface__")

    def __init__(self, indarray, interface: dict) -> None:
        self.indarray = indarray
        self.__array_interface__ = interface


def _describe(x) -> tuple[int, str, bool, bool, tuple[int, ...], tuple[int, ...]]:
    j = _java()
    with pyd4j.jvm.java_errors():
        d = [int(v) for v in j["Buffers"].describe(x)]
    rank = d[4]
    return d[0], j["names"][d[1]], bool(d[2]), bool(d[3]), tuple(d[5:5 + rank]), tuple(d[5 + rank:5 + 2 * rank])


def _view(x, facts: tuple | None = None) -> np.ndarray:
    address, name, _attached, empty, shape, strides = facts or _describe(x)
    dt = _numpy_dtype(name)
    if empty:
        return np.empty(shape, dtype=dt)
    interface = {
        "version": 3,
        "shape": shape,
        "typestr": dt.str,
        "data": (address, False),
        "strides": tuple(s * dt.itemsize for s in strides),
    }
    return np.asarray(_Nd4jMemory(x, interface))


def to_numpy(x, copy: Copy = False) -> np.ndarray:
    """A numpy array over the INDArray `x`'s memory (see module doc for `copy`).

    Raises UnsupportedDtypeError for ND4J types numpy lacks (BFLOAT16, UTF8) and CopyRequiredError
    for workspace-attached arrays when `copy` is False.
    """
    j = _java()
    if not isinstance(x, j["INDArray"]):
        raise TypeError(f"to_numpy needs an ND4J INDArray, got {type(x).__name__}; use from_numpy for numpy data")
    facts = _describe(x)
    _numpy_dtype(facts[1])
    if facts[2] and copy is False:
        raise CopyRequiredError(
            "the INDArray is attached to an ND4J workspace, whose memory is reused when the workspace "
            "closes, so numpy cannot keep a view of it. Pass copy=True (or copy=None), or x.detach() first"
        )
    view = _view(x, facts)
    if copy is True or facts[2] or facts[3]:
        return np.array(view, copy=True, order="K")
    return view


def is_shared(a: np.ndarray, x) -> bool:
    """Whether numpy array `a` and INDArray `x` share memory (useful in tests and assertions)."""
    return bool(np.shares_memory(a, _view(x)))
