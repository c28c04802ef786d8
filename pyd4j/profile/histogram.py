"""`jcmd <pid> GC.class_histogram` output read back: the total, and how much of it is ND4J's and
JavaCPP's deallocation bookkeeping.

Every ND4J array buffer (and op context) is registered with ND4J's DeallocatorService, every JavaCPP
Pointer with a deallocator with JavaCPP's list; the reference objects, deallocators, native handles
and ids stay reachable until the deallocator threads have run, after the collection that found the
array dead. A histogram right after a collection counts them for every array that just died, so two
histograms taken seconds apart can differ 2x on a DL4J job for that alone. The agent leaves the same
classes out of its heap verdict (java/.../agent/LiveSet.java, `Histogram.deallocationBookkeeping`).
"""

from __future__ import annotations

BOOKKEEPING_CLASSES = (
    "org.nd4j.linalg.api.memory.deallocation.DeallocatableReference",
    "org.nd4j.linalg.cpu.nativecpu.buffer.CpuDeallocator",
    "org.nd4j.nativeblas.OpaqueDataBuffer",
    "org.nd4j.nativeblas.OpaqueContext",
    "org.nd4j.linalg.cpu.nativecpu.ops.CpuOpContextDeallocator",
    "org.bytedeco.javacpp.Pointer$NativeDeallocator",
)
ND4J_ID_BYTES = 2 * (24 + 32) + 32  # per ND4J entry: its id twice (String + byte[]) and its registry map node
JAVACPP_COUNT_BYTES = 16            # per JavaCPP deallocator: its AtomicInteger reference count


def read_histogram(text: str) -> tuple[int, int]:
    """(Total bytes, bytes of deallocation bookkeeping) from GC.class_histogram text."""
    total, classes = None, {}
    for line in text.splitlines():
        parts = line.split()
        if parts[:1] == ["Total"] and len(parts) >= 3:
            total = int(parts[2])
        elif len(parts) >= 4 and parts[0].endswith(":") and parts[0][:-1].isdigit():
            classes[parts[3]] = (int(parts[1]), int(parts[2]))
    if total is None:
        raise ValueError("no 'Total' line: not the output of jcmd GC.class_histogram")
    bookkeeping = sum(classes.get(c, (0, 0))[1] for c in BOOKKEEPING_CLASSES)
    bookkeeping += classes.get(BOOKKEEPING_CLASSES[0], (0, 0))[0] * ND4J_ID_BYTES
    bookkeeping += classes.get(BOOKKEEPING_CLASSES[-1], (0, 0))[0] * JAVACPP_COUNT_BYTES
    return total, bookkeeping
