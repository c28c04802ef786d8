"""Reading jcmd GC.class_histogram text, checked against a hand-worked example."""

from __future__ import annotations

import pytest

from pyd4j.profile.histogram import read_histogram

TEXT = """12345:
 num     #instances         #bytes  class name (module)
-------------------------------------------------------
   1:         28537        4493808  [B (java.base@17.0.15)
   2:          1000          40000  org.nd4j.linalg.api.memory.deallocation.DeallocatableReference
   3:           900          43200  org.nd4j.nativeblas.OpaqueDataBuffer
   4:           900          14400  org.nd4j.linalg.cpu.nativecpu.buffer.CpuDeallocator
   5:           200          14400  org.bytedeco.javacpp.Pointer$NativeDeallocator
   6:             7            112  java.lang.Object (java.base@17.0.15)
Total        31544        4605920
"""


def test_total_and_bookkeeping_by_hand():
    total, bookkeeping = read_histogram(TEXT)
    assert total == 4605920
    # classes 40000 + 43200 + 14400 + 14400, ids and map nodes 1000 x 144, JavaCPP counts 200 x 16
    assert bookkeeping == 40000 + 43200 + 14400 + 14400 + 1000 * 144 + 200 * 16


def test_not_a_histogram_is_refused():
    with pytest.raises(ValueError, match="GC.class_histogram"):
        read_histogram("Exception in thread main")
