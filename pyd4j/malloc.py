"""glibc's malloc setting pyd4j's memory model of DL4J's fit() assumes, and setting it in this process.

glibc serves a block over its mmap threshold from its own mapping and unmaps it when freed, but it
raises the threshold to the size of each such block freed (up to 32 MiB), after which blocks of that
size come from its heap and stay resident when freed. DL4J frees many large arrays (those made while
its workspaces learn their size, batch normalization's), so a fixed threshold returns them at once
(pyd4j.dl4j.fitmem). A child JVM gets the setting as an environment variable (pyd4j's flags write
it); the in-process JVM lives in this Python process, whose C library read its environment at
start, so `fix_in_process` sets the same threshold with glibc's `mallopt`. (The planned trainer does the
same in a job's JVM when it attaches: org.pyd4j.train.ReturnFreedMemory.)
"""

from __future__ import annotations

import ctypes
import os

MMAP_THRESHOLD_BYTES = 131072   # glibc's initial threshold (128 KiB), fixed
MALLOC_ENV: dict[str, str] = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD_BYTES)}

_M_MMAP_THRESHOLD = -3   # mallopt's parameter number (glibc's malloc.h)


class MallocSettingError(RuntimeError):
    """This process's C library cannot take the setting the memory model assumes."""


def fix_in_process() -> str:
    """Fix this process's mmap threshold as MALLOC_ENV does for a child JVM, unless its environment
    already sets one (the user's choice, which glibc has read). Returns what was done; raises
    MallocSettingError where the C library has no `mallopt` (not glibc) or refuses the value."""
    name = next(iter(MALLOC_ENV))
    if os.environ.get(name):
        return f"{name}={os.environ[name]} from this process's environment (left as it is)"
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        raise MallocSettingError(f"this process's C library has no mallopt (not glibc), so its mmap threshold "
                                 f"cannot be fixed at {MMAP_THRESHOLD_BYTES}; pyd4j's memory estimates of DL4J's "
                                 f"fit() assume it and may be low in this process") from None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1:
        raise MallocSettingError(f"glibc refused mallopt(M_MMAP_THRESHOLD, {MMAP_THRESHOLD_BYTES}); pyd4j's memory "
                                 f"estimates of DL4J's fit() assume it and may be low in this process")
    return f"mmap threshold fixed at {MMAP_THRESHOLD_BYTES} bytes (mallopt), as {name}={MMAP_THRESHOLD_BYTES}"
