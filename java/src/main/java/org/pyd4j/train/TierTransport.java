package org.pyd4j.train;

import java.util.List;

import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * How a {@link KeyedTier} moves an array's bytes out and back: a memory-mapped file
 * ({@link DiskTransport}) or the native side-agent's pinned host pool ({@link PinnedTransport}).
 * The tier keeps the keys and their life cycle; a transport keeps one slot per key ({@code S}) and
 * runs its copies. Methods marked "under the tier's lock" are called holding it; the others not.
 */
interface TierTransport<S> {

    /** A copy in flight. */
    interface Copy {
        /** Blocks until the copy is done; its failure as an exception that names the key. */
        void await();

        /** Blocks until the copy is done, its failure ignored (the key is being dropped). */
        default void settle() {
            await();
        }
    }

    /** A copy that has nothing to do. */
    Copy DONE = () -> { };

    /** Under the tier's lock: room for {@code spec} and the copy out of {@code array} started;
     *  {@code keysHeld} names how full the tier is when there is no room. */
    S write(int key, ArraySpec spec, INDArray array, int keysHeld);

    /** Blocks until the copy out has read its source. */
    void awaitWritten(int key, S slot);

    /** Under the tier's lock, after {@link #awaitWritten}: drop what only the write needed. */
    default void written(S slot) {
    }

    /** Under the tier's lock: starts copying the slot back into {@code fresh}. */
    Copy read(int key, S slot, INDArray fresh);

    /** The array {@code take} hands out once its copy is done. */
    default INDArray taken(S slot, INDArray fresh) {
        return fresh;
    }

    /** Before a key is dropped: waits for its copies still in flight ({@code reading}: a read not
     *  taken, or null). */
    void settle(int key, S slot, Copy reading);

    /** Under the tier's lock: the slot's room given back ({@code open}: the tier is not closed). */
    void drop(S slot, boolean open);

    /** The counters, with the time callers waited on copies. */
    TierStats stats(long waitNanos);

    /** Under the tier's lock, closing: the slots still held, about to be dropped. */
    default void closing(List<S> left) {
    }

    /** Stops the copies (queued ones still run); false if they did not stop in time, so arrays
     *  they write must stay open. */
    boolean stop();

    /** Closes the transport itself (its file, its library handle), after every slot was dropped. */
    void close();
}
