"""glibc's mmap threshold in this process: `pyd4j.malloc.fix_in_process` (which the in-process JVM's
start runs) against glibc's own statistics (`mallinfo`: bytes in mmapped blocks), in fresh Python
processes so that nothing else has moved the threshold."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# Free a 4 MiB block, then take a 1 MiB one: with glibc's dynamic threshold the freed block raised it
# to 4 MiB and the 1 MiB block comes from the heap; with the threshold fixed it is mmapped.
PROBE = r"""
import ctypes, json, sys
from pyd4j.malloc import fix_in_process
done = fix_in_process() if sys.argv[1] == "fixed" else ""
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                            "uordblks", "fordblks", "keepcost")]
libc.mallinfo.restype = Info
libc.free(libc.malloc(4 << 20))
before = libc.mallinfo().hblkhd
block = libc.malloc(1 << 20)
print(json.dumps({"mmapped": libc.mallinfo().hblkhd - before, "done": done}))
libc.free(block)
"""


def _run(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_fixed_threshold_returns_large_blocks_as_the_flags_do():
    assert _run("default")["mmapped"] == 0   # glibc's own rule: the freed 4 MiB block raised the threshold
    fixed = _run("fixed")
    assert fixed["mmapped"] >= 1 << 20 and "131072" in fixed["done"]


def test_a_threshold_from_the_environment_is_left_alone(monkeypatch):
    from pyd4j.malloc import fix_in_process

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert "MALLOC_MMAP_THRESHOLD_=65536" in fix_in_process() and "left as it is" in fix_in_process()


@pytest.mark.jvm
def test_the_in_process_jvm_started_with_the_threshold_fixed(jvm):
    import pyd4j.jvm

    assert "131072" in pyd4j.jvm.info().malloc or "left as it is" in pyd4j.jvm.info().malloc
