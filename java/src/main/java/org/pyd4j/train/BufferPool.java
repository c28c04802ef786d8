package org.pyd4j.train;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

import org.nd4j.linalg.api.buffer.DataBuffer;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * The buffers of arrays the trainer released, kept for the next array of the same type and length.
 *
 * <p>Why: with glibc's mmap threshold fixed ({@link ReturnFreedMemory}) a closed array's pages go
 * back to the system at once, and the next array of that size faults fresh, zeroed pages in. DL4J's
 * own fit() takes its arrays from workspaces and pays that once. Measured on the zoo's ResNet50 at
 * batch 16 (perf, one JVM per side): 11% of a planned run's samples in the kernel's page-fault path
 * against 6% for fit(), the whole of the speed gap between them. An iteration repeats its shapes, so
 * the arrays of the next one find these buffers.
 *
 * <p>Bounded by the trainer: a buffer is kept only while what the pool keeps plus what the trainer
 * holds stays within the most it had out of workspaces at once, before each step the pool gives up
 * what the step would make above that ({@link #trim}), and between iterations it leaves room for
 * DL4J's update step, so that the pool does not raise the peak a plan gives (measured: 0.99-1.03x
 * under liveness plans); otherwise a buffer is closed as before. Small buffers are left to malloc, whose arenas keep
 * them anyway.
 *
 * <p>Safe against a stale release: a buffer handed out again belongs to its new array, and a release
 * through a holder made before that ({@code since} earlier than the hand-out) is ignored and counted
 * (closing it, as the trainer did before the pool, was a no-op on an already closed buffer).
 * Plans made for the least memory go without it ({@link #forPlan}).
 */
final class BufferPool {
    static final long MIN_BYTES = ReturnFreedMemory.THRESHOLD;
    private static final AtomicLong CLOCK = new AtomicLong();

    private final boolean enabled;
    private final Map<String, ArrayDeque<DataBuffer>> free = new HashMap<>();
    private final Set<DataBuffer> kept = Collections.newSetFromMap(new IdentityHashMap<>());
    private final Map<DataBuffer, Long> handedOutAt = new IdentityHashMap<>();
    private long keptBytes;
    long reuses;
    long reusedBytes;
    long staleReleases;

    BufferPool(boolean enabled) {
        this.enabled = enabled;
    }

    /** The pool for {@code plan}: on unless the plan was made for the least memory (it recomputes or
     *  slices a step: keeping buffers raised such plans' peaks 2.5-4.8% on three of five networks,
     *  benchmarks/buffer_pool.py) or
     *  {@code -Dpyd4j.train.pool=false}. */
    static BufferPool forPlan(PlanFile plan) {
        String option = System.getProperty("pyd4j.train.pool", "true");
        if (!option.equals("true") && !option.equals("false")) {
            throw new IllegalArgumentException("-Dpyd4j.train.pool=" + option + " is neither true nor false; "
                    + "give -Dpyd4j.train.pool=false to make every array anew, or leave it out");
        }
        boolean leastMemory = false;
        for (PlanFile.Record r : plan.records) leastMemory |= r.op == PlanFile.Op.RECOMPUTE || r.chunks > 1;
        return new BufferPool(!leastMemory && option.equals("true"));
    }

    boolean enabled() {
        return enabled;
    }

    /** The pool's clock: a holder records it when made, and releases with it ({@link #release}). */
    static long now() {
        return CLOCK.get();
    }

    /** A new array of this type, shape and order on a kept buffer (zeroed when asked), or null when none is kept. */
    INDArray take(DataType type, long[] shape, char order, boolean zeroed) {
        if (!enabled) return null;
        long length = 1;
        for (long d : shape) length *= d;
        if (length * type.width() < MIN_BYTES) return null;
        ArrayDeque<DataBuffer> q = free.get(key(type, length));
        DataBuffer b = null;
        while (q != null && !q.isEmpty() && b == null) {
            DataBuffer c = poll(q);
            if (!c.wasClosed()) b = c;
        }
        if (b == null) return null;
        handedOutAt.put(b, CLOCK.incrementAndGet());
        reuses++;
        reusedBytes += bytes(b);
        try (MemoryWorkspace ws = Nd4j.getMemoryManager().scopeOutOfWorkspaces()) {
            INDArray a = Nd4j.create(b, shape, Nd4j.getStrides(shape, order), 0, order);
            if (zeroed) a.assign(0);
            return a;
        }
    }

    /**
     * Take a released buffer: true when the pool took care of it (kept, already kept, or a stale
     * release of a buffer handed out since {@code since}); false when the caller closes it as
     * before. {@code held} is what the trainer holds now, {@code limit} the most it ever held.
     */
    boolean release(DataBuffer b, long since, long held, long limit) {
        if (!enabled || b == null || b.wasClosed() || !b.closeable() || b.isAttached() || b.isConstant()) return false;
        if (kept.contains(b)) return true;
        Long at = handedOutAt.get(b);
        if (at != null && at > since) {
            staleReleases++;
            return true;
        }
        long size = bytes(b);
        if (size < MIN_BYTES || keptBytes + size + held > limit) return false;
        free.computeIfAbsent(key(b.dataType(), b.length()), k -> new ArrayDeque<>()).push(b);
        kept.add(b);
        keptBytes += size;
        return true;
    }

    /** Close kept buffers, largest first, until the pool keeps at most {@code most} bytes. */
    void trim(long most) {
        long limit = Math.max(0, most);
        if (keptBytes <= limit) return;
        List<ArrayDeque<DataBuffer>> queues = new ArrayList<>();
        for (ArrayDeque<DataBuffer> q : free.values()) if (!q.isEmpty()) queues.add(q);
        queues.sort((a, b) -> Long.compare(bytes(b.peek()), bytes(a.peek())));
        for (ArrayDeque<DataBuffer> q : queues) {
            while (!q.isEmpty() && keptBytes > limit) close(poll(q));
        }
    }

    /** Forget hand-outs of buffers closed since (by a path that closes rather than releases). */
    void prune() {
        for (Iterator<DataBuffer> it = handedOutAt.keySet().iterator(); it.hasNext(); ) {
            if (it.next().wasClosed()) it.remove();
        }
    }

    /** Close every kept buffer: their memory goes back now. */
    void clear() {
        for (ArrayDeque<DataBuffer> q : free.values()) for (DataBuffer b : q) close(b);
        free.clear();
        kept.clear();
        handedOutAt.clear();
        keptBytes = 0;
    }

    private static String key(DataType type, long length) {
        return type + ":" + length;
    }

    /** The next kept buffer of a queue, no longer kept. */
    private DataBuffer poll(ArrayDeque<DataBuffer> q) {
        DataBuffer b = q.poll();
        kept.remove(b);
        keptBytes -= bytes(b);
        return b;
    }

    private static void close(DataBuffer b) {
        if (!b.wasClosed() && b.closeable()) b.close();
    }

    private static long bytes(DataBuffer b) {
        return b.length() * b.getElementSize();
    }
}
