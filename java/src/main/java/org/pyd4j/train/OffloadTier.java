package org.pyd4j.train;

import org.nd4j.linalg.api.ndarray.INDArray;

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
