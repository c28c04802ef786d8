"""The planned trainer's offload tiers on real ND4J (CPU backend): DiskTier and PinnedHostTier
(side-agent host build). Writes benchmarks/results/tiers.json.

    .venv/bin/python benchmarks/tiers.py [--arrays 8] [--mib 16] [--repeats 3] [--dir DIR]

Per tier, measured in one run:

1. Throughput. `--arrays` arrays of `--mib` MiB are offloaded back to back and awaited
   (offload), then prefetched back to back and taken (prefetch), wall time from the first call
   to the last return, on one tier after a warm-up round (as in training, where the tier's file
   or pool is reused every iteration). The baseline is a plain single-threaded copy of the same
   arrays between ND4J buffers (JavaCPP `Pointer.memcpy`) into arrays already touched
   (`plain`), and into arrays allocated just before, as `take` must (`plain_fresh`), timed in
   the same rounds; the figures are ratios tier / plain (medians of `--repeats`). The disk tier writes into the
   kernel's page cache: on a machine with memory to spare the bytes reach the disk later, in
   the background, and reads back come from the cache.
2. Copies hidden behind compute. A synthetic network of `--layers` linear layers (x @ W, W
   scaled by 1/sqrt(width)), forward then backward (two matrix products per layer), the way a plan uses a
   tier: each layer's input is offloaded right after the layer's forward step and closed one
   step later (after `awaitOffloaded`); in backward each input is prefetched one step ahead and
   taken when its step starts (the network's input and the last layer's input stay in memory,
   as a plan keeps them). The layer width is calibrated so that a layer's compute (forward and
   backward products) lasts about as long as the tier's round trip of its input
   (`compute_over_copy`, both timed back to back; the narrowest layer may still take longer). Reported: the tier's
   `hiddenShare()` (1 - time the loop waited for copies / time the copies ran) and the
   iteration time against the same loop keeping every activation in memory (no tier).
"""

from __future__ import annotations

import argparse
import statistics
import time

from harness import RESULTS, Recorder

MiB = 1 << 20


class Env:
    def __init__(self) -> None:
        import jpype

        import pyd4j.jvm

        pyd4j.jvm.start(heap_max="1g")
        self.jpype = jpype
        self.Nd4j = jpype.JClass("org.nd4j.linalg.factory.Nd4j")
        self.DataType = jpype.JClass("org.nd4j.linalg.api.buffer.DataType")
        self.Pointer = jpype.JClass("org.bytedeco.javacpp.Pointer")
        self.DiskTier = jpype.JClass("org.pyd4j.train.DiskTier")
        self.PinnedHostTier = jpype.JClass("org.pyd4j.train.PinnedHostTier")
        self.Paths = jpype.JClass("java.nio.file.Paths")

    def longs(self, *dims: int):
        return self.jpype.JArray(self.jpype.JLong)(list(dims))

    def floats(self, n: int, value: float = 1.0):
        return self.Nd4j.valueArrayOf(self.longs(n), float(value), self.DataType.FLOAT)

    def rand(self, *shape: int):
        return self.Nd4j.rand(self.DataType.FLOAT, self.longs(*shape)).subi(0.5)

    def tier(self, kind: str, max_bytes: int, directory: str | None):
        if kind == "disk":
            return self.DiskTier(self.Paths.get(directory), max_bytes) if directory else self.DiskTier(max_bytes)
        return self.PinnedHostTier(max_bytes)


def throughput(env: Env, kind: str, arrays: int, mib: int, repeats: int, directory: str | None) -> list[dict]:
    """A first round on a new tier, then `repeats` rounds on the same tier (the steady state of
    training, where the tier's file or pool is reused every iteration), each against plain
    copies timed in the same round."""
    size, total = mib * MiB, arrays * mib * MiB
    srcs = [env.floats(size // 4, i + 1) for i in range(arrays)]
    dsts = [env.floats(size // 4, 0) for _ in range(arrays)]
    tier = env.tier(kind, total + MiB, directory)
    rounds = []
    try:
        for r in range(repeats + 1):
            t0 = time.perf_counter()
            for s, d in zip(srcs, dsts):
                env.Pointer.memcpy(d.data().addressPointer(), s.data().addressPointer(), size)
            plain = time.perf_counter() - t0
            t0 = time.perf_counter()
            for s in srcs:  # what take must do: a new array, then the copy
                d = env.Nd4j.createUninitializedDetached(env.DataType.FLOAT, "c", env.longs(size // 4))
                env.Pointer.memcpy(d.data().addressPointer(), s.data().addressPointer(), size)
                d.close()
            plain_fresh = time.perf_counter() - t0
            t0 = time.perf_counter()
            for key, s in enumerate(srcs):
                tier.offload(key, s)
            for key in range(arrays):
                tier.awaitOffloaded(key)
            out = time.perf_counter() - t0
            t0 = time.perf_counter()
            for key in range(arrays):
                tier.prefetch(key)
            back = [tier.take(key) for key in range(arrays)]
            into = time.perf_counter() - t0
            for key, b in enumerate(back):
                if b.getFloat(env.jpype.JLong(size // 4 - 1)) != key + 1:
                    raise AssertionError(f"{kind}: array {key} came back wrong")
                b.close()
                tier.release(key)
            # Round 0 warms up the tier (new file pages, new pool pages), the copy routines and
            # the JIT; it is kept apart as "first_round".
            rounds.append({"plain_GBps": total / plain / 1e9, "plain_fresh_GBps": total / plain_fresh / 1e9,
                           "offload_GBps": total / out / 1e9, "prefetch_GBps": total / into / 1e9,
                           "offload_over_plain": plain / out, "prefetch_over_plain": plain / into,
                           "prefetch_over_plain_fresh": plain_fresh / into})
    finally:
        tier.close()
        for a in srcs + dsts:
            a.close()
    return rounds


def iteration(env: Env, weights: list, x, tier) -> float:
    """One forward/backward pass of the synthetic network; seconds. With a tier, the inputs of
    layers 1 .. L-2 are offloaded (the network's input belongs to the data, and the last
    layer's input is needed again at once, so a plan keeps both)."""
    n = len(weights)
    offloaded = set(range(1, n - 1)) if tier is not None else set()
    t0 = time.perf_counter()
    acts = [x]
    for i, w in enumerate(weights):
        acts.append(acts[i].mmul(w))
        if i in offloaded:
            tier.offload(i, acts[i])  # written behind the next forward step
        if i - 1 in offloaded:
            tier.awaitOffloaded(i - 1)
            acts[i - 1].close()  # its memory goes back
            acts[i - 1] = None
    grad = acts[n].dup()
    acts[n].close()
    for i in reversed(range(n)):
        if i - 1 in offloaded:
            tier.prefetch(i - 1)  # read ahead of the next backward step
        a = tier.take(i) if i in offloaded else acts[i]
        d_w = a.transpose().mmul(grad)
        new_grad = grad.mmul(weights[i].transpose())
        d_w.close()
        grad.close()
        grad = new_grad
        if i > 0:
            a.close()
        if i in offloaded:
            tier.release(i)
    grad.close()
    return time.perf_counter() - t0


def calibrate(env: Env, kind: str, mib: int, directory: str | None) -> tuple[int, int, float]:
    """The layer width (and batch, for `mib` MiB activations) whose layer step -- its forward
    product and its two backward products -- lasts about as long as the tier's round trip of
    its input (offload, then take): both timed back to back, medians of three."""
    best = None
    tier = env.tier(kind, 2 * mib * MiB + MiB, directory)
    try:
        for width in (4, 8, 16, 32, 64, 128, 256, 512, 1024):
            batch = max(1, mib * MiB // 4 // width)
            x, w = env.rand(batch, width), env.rand(width, width)
            compute, copy = [], []
            for _ in range(4):
                t0 = time.perf_counter()
                y = x.mmul(w)
                x.transpose().mmul(y).close()
                y.mmul(w.transpose()).close()
                y.close()
                compute.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                tier.offload(0, x)
                tier.awaitOffloaded(0)
                tier.take(0).close()
                copy.append(time.perf_counter() - t0)
                tier.release(0)
            x.close()
            w.close()
            ratio = statistics.median(compute[1:]) / statistics.median(copy[1:])
            if best is None or abs(ratio - 1) < abs(best[2] - 1):
                best = (width, batch, ratio)
    finally:
        tier.close()
    return best


def overlap(env: Env, kind: str, layers: int, mib: int, repeats: int, directory: str | None) -> dict:
    width, batch, ratio = calibrate(env, kind, mib, directory)
    weights = [env.rand(width, width).muli(1.0 / width ** 0.5) for _ in range(layers)]
    x = env.rand(batch, width)
    plain, tiered, shares = [], [], []
    iteration(env, weights, x, None)  # warm-up
    for r in range(repeats):
        tier = env.tier(kind, layers * batch * width * 4 + MiB, directory)
        try:
            iteration(env, weights, x, tier)  # warm-up of the tier's threads and mappings
            before = tier.stats()
            runs = []
            for _ in range(2):  # alternate so that drifts in machine load cancel
                plain.append(iteration(env, weights, x, None))
                runs.append(iteration(env, weights, x, tier))
            after = tier.stats()
        finally:
            tier.close()
        tiered += runs
        copy_ns = after.copyNanos - before.copyNanos
        wait_ns = after.waitNanos - before.waitNanos
        shares.append({"copy_s": copy_ns / 1e9, "wait_s": wait_ns / 1e9,
                       "hidden_share": max(0.0, 1 - wait_ns / copy_ns) if copy_ns else 1.0})
    for w in weights:
        w.close()
    x.close()
    copy_s = sum(s["copy_s"] for s in shares)
    wait_s = sum(s["wait_s"] for s in shares)
    return {
        "layers": layers, "batch": batch, "width": width, "activation_bytes": batch * width * 4,
        "compute_over_copy": ratio,
        "hidden_share": max(0.0, 1 - wait_s / copy_s) if copy_s else 1.0,
        "copy_s": copy_s, "wait_s": wait_s,
        "iteration_s_no_tier": statistics.median(plain), "iteration_s_tier": statistics.median(tiered),
        "tier_over_no_tier_time": statistics.median(tiered) / statistics.median(plain),
        "per_repeat": shares,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrays", type=int, default=8)
    parser.add_argument("--mib", type=int, default=16, help="size of each array (throughput) and activation (overlap)")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="directory of the disk tier's file (default: java.io.tmpdir)")
    parser.add_argument("--out", default=str(RESULTS / "tiers.json"))
    args = parser.parse_args()
    rec = Recorder("tiers")

    env = Env()
    tiers = {}
    for kind, name in (("disk", "disk"), ("pinned", "pinned-host")):
        first, *runs = throughput(env, kind, args.arrays, args.mib, args.repeats, args.dir)
        tp = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"{name}: offload {tp['offload_GBps']:.2f} GB/s ({tp['offload_over_plain']:.2f} of plain "
              f"{tp['plain_GBps']:.2f}), prefetch {tp['prefetch_GBps']:.2f} GB/s ({tp['prefetch_over_plain']:.2f})",
              flush=True)
        ov = overlap(env, kind, args.layers, args.mib, args.repeats, args.dir)
        print(f"{name}: width {ov['width']} (compute/copy {ov['compute_over_copy']:.2f}), hidden "
              f"{ov['hidden_share']:.0%}, iteration {ov['tier_over_no_tier_time']:.2f}x no tier", flush=True)
        tiers[name] = {"throughput": {**tp, "runs": runs, "first_round": first}, "overlap": ov}
    directory = args.dir or str(env.jpype.JClass("java.lang.System").getProperty("java.io.tmpdir"))
    store = str(env.jpype.JClass("java.nio.file.Files").getFileStore(env.Paths.get(directory)).type())
    rec.doc.update({"arrays": args.arrays, "mib": args.mib, "repeats": args.repeats, "disk_directory_fs": store,
                    "tiers": tiers})
    rec.write(args.out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
