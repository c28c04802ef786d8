package org.pyd4j.train;

import org.nd4j.linalg.api.buffer.DataBuffer;
import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * An array the trainer holds, and the buffer its memory lives in ({@code base}: what to close
 * when it is released -- the array's own buffer, or the buffer a view was cut from -- or null
 * when the memory is not the trainer's to free, such as the network's input).
 */
final class Held {
    final INDArray array;
    final DataBuffer base;
    final long bytes;
    final long since;   // the buffer pool's clock when made: a buffer handed out later is not this holder's to release

    private Held(INDArray array, DataBuffer base) {
        this.array = array;
        this.base = base;
        this.bytes = base == null ? 0 : base.length() * base.getElementSize();
        this.since = BufferPool.now();
    }

    /** A result the trainer owns outright (a view: the buffer it was cut from). */
    static Held own(INDArray a) {
        return a == null ? null : new Held(a, root(a));
    }

    /** An array that is not the trainer's to free. */
    static Held borrowed(INDArray a) {
        return new Held(a, null);
    }

    /** A preprocessor's result {@code processed} made from {@code raw}, which the trainer owns: a
     *  view of raw keeps raw's buffer; anything else makes raw a dead intermediate (closed). */
    static Held preprocessed(INDArray raw, INDArray processed) {
        if (processed == null || processed == raw) return own(raw);
        if (!sameMemory(processed, raw) && !raw.wasClosed() && raw.closeable()) raw.close();
        return own(processed);
    }

    boolean sharesMemoryWith(INDArray other) {
        return other != null && (sameMemory(other, array) || (base != null && root(other) == base));
    }

    /** A copy of {@code a} out of any workspace. */
    static INDArray detachedCopy(INDArray a) {
        try (org.nd4j.linalg.api.memory.MemoryWorkspace ws = org.nd4j.linalg.factory.Nd4j.getMemoryManager().scopeOutOfWorkspaces()) {
            return a.dup(a.ordering());
        }
    }

    /** Bytes of the arrays that are not views. */
    static long bytes(java.util.List<INDArray> arrays) {
        long b = 0;
        for (INDArray a : arrays) if (!a.isView()) b += bytes(a);
        return b;
    }

    static long bytes(INDArray a) {
        return a.length() * a.dataType().width();
    }

    /** The buffer an array's memory belongs to (a view's buffer is a separate object over its base's). */
    static DataBuffer root(INDArray a) {
        DataBuffer d = a.data();
        for (DataBuffer o = d.originalDataBuffer(); o != null && o != d; o = d.originalDataBuffer()) d = o;
        return d;
    }

    /** Whether two arrays live in the same memory (one is, or is a view of, the other's buffer). */
    static boolean sameMemory(INDArray a, INDArray b) {
        return a == b || root(a) == root(b);
    }

    /** Free the memory now; false when ND4J will not close it (it then waits for the garbage collector). */
    boolean close() {
        if (base == null || base.wasClosed()) return true;
        if (!base.closeable()) return false;
        base.close();
        return true;
    }
}
