"""Child process of test_offload_tiers.py: offloads large arrays through each tier in a fresh
process (a clean allocator, so resident-set changes are the arrays' own) and prints one JSON line
of resident-set sizes and checks. Run: python tests/train/rss_child.py DIRECTORY"""

from __future__ import annotations

import json
import sys

N, SIZE = 4, 64 << 20


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main(directory: str) -> None:
    import jpype

    import pyd4j.jvm

    pyd4j.jvm.start(heap_max="512m")
    Nd4j = jpype.JClass("org.nd4j.linalg.factory.Nd4j")
    DataType = jpype.JClass("org.nd4j.linalg.api.buffer.DataType")
    Paths = jpype.JClass("java.nio.file.Paths")
    shape = jpype.JArray(jpype.JLong)([SIZE // 4])

    def arrays():
        return [Nd4j.valueArrayOf(shape, float(i + 1), DataType.FLOAT) for i in range(N)]

    def exact(y, i: int) -> bool:
        return float(y.minNumber().doubleValue()) == float(y.maxNumber().doubleValue()) == i + 1.0

    out = {}
    # Disk: sources closed after the copy, the file's pages never resident.
    tier = jpype.JClass("org.pyd4j.train.DiskTier")(Paths.get(directory), N * SIZE + (1 << 20))
    r0 = rss()
    xs = arrays()
    r1 = rss()
    for i, x in enumerate(xs):
        tier.offload(i, x)
    for i, x in enumerate(xs):
        tier.awaitOffloaded(i)
        x.close()
    r2 = rss()
    held, length = tier.stats().bytesHeld, tier.fileLength()
    ok = []
    for i in range(N):
        y = tier.take(i)
        ok.append(exact(y, i))
        y.close()
        tier.release(i)
    tier.close()
    out["disk"] = {"r0": r0, "r1": r1, "r2": r2, "r3": rss(), "held": held, "file_length": length, "exact": ok}

    # Pinned pool (host build): the sources' memory returns when closed, the pool's at close.
    tier = jpype.JClass("org.pyd4j.train.PinnedHostTier")(N * SIZE + (1 << 20))
    xs = arrays()
    for i, x in enumerate(xs):
        tier.offload(i, x)
    for i in range(N):
        tier.awaitOffloaded(i)
    r1 = rss()
    for x in xs:
        x.close()
    r2 = rss()
    y = tier.take(2)
    ok = [exact(y, 2)]
    y.close()
    held = tier.stats().bytesHeld
    tier.close()
    out["pinned"] = {"r1": r1, "r2": r2, "r3": rss(), "held": held, "exact": ok}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
