"""Which JVM limit governs ND4J memory, proved with real ND4J in a child process.

-XX:MaxDirectMemorySize bounds NIO direct buffers only: a 256 MiB INDArray allocates under a 64 MiB
MaxDirectMemorySize. JavaCPP's maxbytes bounds JavaCPP Pointers (a 256 MiB FloatPointer fails
under maxbytes=128m), but ND4J 1.0.0-M2.1's CPU backend allocates INDArray buffers in libnd4j,
outside JavaCPP's totalBytes, so the same 256 MiB INDArray passes maxbytes=128m. What stops ND4J
arrays is maxphysicalbytes: JavaCPP checks the process RSS at ND4J's next Pointer.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = r"""
import json, pyd4j.jvm
pyd4j.jvm.start(heap_max="256m", max_direct_memory="64m", javacpp_maxbytes="128m", javacpp_maxphysicalbytes="1g")
from pyd4j.jvm import java_errors
from org.nd4j.linalg.factory import Nd4j
from org.nd4j.linalg.api.buffer import DataType
from org.bytedeco.javacpp import Pointer, FloatPointer
import jpype; ByteBuffer = jpype.JClass("java.nio.ByteBuffer")
out = {}
def attempt(name, fn):
    try:
        with java_errors():
            fn()
        out[name] = {"ok": True}
    except Exception as e:
        out[name] = {"ok": False, "type": type(e).__name__, "message": str(e)[:300],
                     "limit": getattr(e, "limit_property", None), "trace": getattr(e, "java_stacktrace", "")[:3000]}
keep = []
def nd4j_256m():
    a = Nd4j.create(DataType.FLOAT, 64 * 1024 * 1024); a.addi(1.0); keep.append(a)
attempt("indarray_256m", nd4j_256m)
out["javacpp_total_bytes_after_indarray"] = int(Pointer.totalBytes())
attempt("floatpointer_256m", lambda: FloatPointer(64 * 1024 * 1024))
attempt("direct_buffer_128m", lambda: ByteBuffer.allocateDirect(128 * 1024 * 1024))
def grow():
    for _ in range(8):
        nd4j_256m()
attempt("indarrays_past_maxphysicalbytes", grow)
out["arrays_held"] = len(keep)
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def child():
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line, f"child failed (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(line[len("RESULT "):])


@pytest.mark.jvm
def test_max_direct_memory_does_not_bound_nd4j(child):
    assert child["indarray_256m"]["ok"], child["indarray_256m"]  # 256 MiB > MaxDirectMemorySize=64m
    assert child["direct_buffer_128m"]["type"] == "DirectBufferOutOfMemoryError"  # what it does bound


@pytest.mark.jvm
def test_maxbytes_bounds_javacpp_pointers_not_libnd4j_buffers(child):
    # the 256 MiB INDArray passed maxbytes=128m, and JavaCPP did not even count it
    assert child["javacpp_total_bytes_after_indarray"] < 1024 * 1024
    fp = child["floatpointer_256m"]
    assert fp["type"] == "JavaCppOutOfMemoryError" and fp["limit"] == "org.bytedeco.javacpp.maxbytes"
    assert "maxBytes" in fp["trace"]


@pytest.mark.jvm
def test_maxphysicalbytes_stops_nd4j(child):
    err = child["indarrays_past_maxphysicalbytes"]
    assert err["ok"] is False and err["type"] == "JavaCppOutOfMemoryError"
    assert "Physical memory usage is too high" in err["trace"]
    assert child["arrays_held"] < 6  # stopped near 1 GiB RSS, not after 8 x 256 MiB more
