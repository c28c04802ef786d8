"""Byte sizes as people and the JVM write them: one parser, one formatter."""

from __future__ import annotations

import math
import re
from decimal import Decimal

from pyd4j.inputs import JAVA_LONG_MAX, InputError

_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1024, "kib": 1024,
    "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1024**3, "gib": 1024**3,
    "t": 1024**4, "tb": 1024**4, "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


class SizeError(InputError):
    """A byte size that cannot be read, or that no JVM could hold."""


def parse_bytes(value: str | int | float, what: str = "size") -> int:
    """'4g', '512 MiB', '1.5GB', 1048576 -> bytes (binary units, as the JVM reads them).

    Raises SizeError naming the value and the accepted forms; sizes past a Java long (8 EiB),
    NaN and infinity are refused. `what` (e.g. '--total') starts the message when given.
    """
    what = f"{what}: " if what else ""
    if isinstance(value, bool):
        raise SizeError(f"{what}{value!r} is not a byte size; write e.g. '4g', '512m' or 1073741824")
    if isinstance(value, float) and not math.isfinite(value):
        raise SizeError(f"{what}{value!r} is not a byte size; write e.g. '4g', '512m' or 1073741824")
    if isinstance(value, (int, float)):
        if value < 0:
            raise SizeError(f"{what}{value!r} is negative; a byte size must be >= 0")
        return _in_long(int(value), value, what)
    text = str(value)
    match = _SIZE.match(text) if len(text) <= 64 else None
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        shown = repr(text) if len(text) <= 64 else f"{text[:30]!r}... ({len(text)} characters)"
        raise SizeError(
            f"{what}cannot read {shown} as a byte size; write a number with an optional "
            f"unit b, k, m, g, t (or KiB/MB/GiB...), e.g. '4g' or '512m'"
        )
    return _in_long(int(Decimal(match.group(1)) * _UNITS[unit]), value, what)


def _in_long(n: int, value: object, what: str) -> int:
    if n > JAVA_LONG_MAX:
        raise SizeError(f"{what}{value!r} is more than the JVM can hold (a Java long, 8 EiB); write e.g. '4g'")
    return n


def jvm_size(n: int) -> str:
    """Bytes in the shortest exact form the JVM accepts: 4294967296 -> '4g', 1536k stays '1536k'."""
    if n < 0:
        raise SizeError(f"{n} is negative; a JVM size must be >= 0")
    for suffix, unit in (("g", 1024**3), ("m", 1024**2), ("k", 1024)):
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)
