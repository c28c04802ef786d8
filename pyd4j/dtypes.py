"""The numpy <-> ND4J data type table, kept apart from `pyd4j.nd` so that the JVM layer (the Py4J
gateway's array transfer) and `nd` above it share one table without importing each other."""

from __future__ import annotations

import numpy as np

# numpy dtype -> ND4J DataType name. Both sides store these identically (little-endian x86/ARM);
# ND4J's BFLOAT16 and UTF8 have no numpy twin, numpy's complex/object/str/datetime none in ND4J.
SUPPORTED_DTYPES: dict[np.dtype, str] = {
    np.dtype(np.float16): "HALF",
    np.dtype(np.float32): "FLOAT",
    np.dtype(np.float64): "DOUBLE",
    np.dtype(np.int8): "BYTE",
    np.dtype(np.int16): "SHORT",
    np.dtype(np.int32): "INT",
    np.dtype(np.int64): "LONG",
    np.dtype(np.uint8): "UBYTE",
    np.dtype(np.uint16): "UINT16",
    np.dtype(np.uint32): "UINT32",
    np.dtype(np.uint64): "UINT64",
    np.dtype(np.bool_): "BOOL",
}
_NUMPY_OF: dict[str, np.dtype] = {name: dt for dt, name in SUPPORTED_DTYPES.items()}


class UnsupportedDtypeError(TypeError):
    """A dtype with no counterpart on the other side."""


def supported_dtypes() -> list[str]:
    """numpy names of the dtypes that cross without conversion."""
    return [dt.name for dt in SUPPORTED_DTYPES]


def nd4j_dtype(dtype: np.dtype | type | str) -> str:
    """The ND4J DataType name for a numpy dtype; UnsupportedDtypeError names the supported ones."""
    dt = np.dtype(dtype)
    native = dt.newbyteorder("=") if dt.byteorder not in ("=", "|") else dt
    name = SUPPORTED_DTYPES.get(native) if native.fields is None else None
    if name is None:
        raise UnsupportedDtypeError(
            f"numpy dtype {dt.str!r} ({dt}) has no ND4J counterpart; supported: "
            f"{', '.join(supported_dtypes())}. Convert first, e.g. a.astype(np.float32)"
        )
    return name


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype for an ND4J DataType name; UnsupportedDtypeError names the supported ones."""
    dt = _NUMPY_OF.get(name)
    if dt is None:
        raise UnsupportedDtypeError(
            f"ND4J data type {name} has no numpy counterpart; supported: {', '.join(_NUMPY_OF)}. "
            f"Cast first, e.g. x.castTo(DataType.FLOAT)"
        )
    return dt
