package org.pyd4j.train;

import java.util.HashSet;
import java.util.Set;

import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * Where an offloaded activation waits between its forward use and its backward use.
 *
 * <p>The planned trainer talks to exactly one tier through this interface; which one depends on
 * the backend: {@code DiskTier} for ND4J's CPU backend (a memory-mapped file, written behind the
 * forward step and read ahead of the backward step on a background thread) and
 * {@code PinnedHostTier} for device memory (the native side-agent's pinned host pool, copies on
 * its offload/prefetch streams).
 *
 * <p>Keys are the plan's tensor ids; one key holds one array at a time. The life of a key:
 * {@code offload} (returns at once, the copy runs in the background) → {@code awaitOffloaded}
 * (after it the caller may close the source array) → {@code prefetch} (starts the copy back,
 * returns at once) → {@code take} (waits for that copy, returns a fresh array the caller owns)
 * → {@code release} (the tier forgets the slot). {@code take} without {@code prefetch} starts
 * the copy itself. A key may be taken several times before it is released (memory-centric
 * recomputation reads a checkpoint more than once).
 */
public interface OffloadTier extends AutoCloseable {

    /**
     * The one place a tier is made for a plan: {@code kind} "disk" ({@link DiskTier}, in
     * {@code java.io.tmpdir}), "pinned" ({@link PinnedHostTier}) or "auto" (the disk tier on ND4J's CPU
     * backend, the pinned host pool for device memory), sized for every activation {@code plan}
     * offloads held at once, twice over. The caller closes it.
     */
    static OffloadTier forPlan(String kind, PlanFile plan) {
        if (!kind.equals("auto") && !kind.equals("disk") && !kind.equals("pinned")) {
            throw new IllegalArgumentException("tier kind '" + kind + "': use auto, disk or pinned");
        }
        Set<Integer> offloaded = new HashSet<>();
        long bytes = 0;
        for (PlanFile.Record r : plan.records) {
            if (r.op == PlanFile.Op.OFFLOAD && offloaded.add(r.arg)) {
                bytes += (plan.nodes.get(PlanFile.node(r.arg)).yBytes + DiskTier.PAGE - 1) / DiskTier.PAGE * DiskTier.PAGE;
            }
        }
        long size = Math.max(2 * bytes, 1L << 20);
        boolean disk = kind.equals("disk") || (kind.equals("auto") && Nd4j.getEnvironment().isCPU());
        return disk ? new DiskTier(size) : new PinnedHostTier(size);
    }

    /** Start copying {@code array} out under {@code key}; the array must stay open until
     *  {@link #awaitOffloaded(int)} returns. */
    void offload(int key, INDArray array);

    /** Wait until the copy started by {@link #offload} has finished reading the source. */
    void awaitOffloaded(int key);

    /** Start bringing {@code key} back (read-ahead); returns at once. */
    void prefetch(int key);

    /** The contents of {@code key} in a fresh array of the original shape, order and data type,
     *  waiting for its prefetch if one is in flight. The caller owns (and closes) the array. */
    INDArray take(int key);

    /** Forget {@code key}: its slot may be reused. Waits for the key's copies still in flight
     *  (so the source may be closed afterwards even without {@link #awaitOffloaded(int)}) and
     *  closes a prefetched array that was never taken. */
    void release(int key);

    /** Counters since the tier was opened. */
    TierStats stats();

    /** Release every slot, stop background threads, delete files. Idempotent. */
    @Override
    void close();
}
