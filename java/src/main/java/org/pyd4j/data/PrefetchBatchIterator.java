package org.pyd4j.data;

import org.pyd4j.PythonException;

import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;

/**
 * A Python-fed iterator S behind DL4J's async iterator A with a chosen queue depth; B is the batch
 * type and P its preprocessor. A subclass says how to count a batch's samples and how to reset
 * and stop A (DL4J gives its two async iterators no common type for that).
 *
 * <p>Reports {@code asyncSupported() == false}, so fit() uses it as is instead of wrapping it
 * again with DL4J's fixed depth of 2. A failure of the Python source ends the prefetch stream and
 * is rethrown here, on the thread that runs fit(), as a {@link PythonException}.
 * Call {@link #shutdown()} when done: it stops the prefetch thread.
 */
public abstract class PrefetchBatchIterator<B, P, S extends PythonBatchIterator<B, P>, A extends Iterator<B>> {
    final transient S source;
    final transient A async;
    private final int depth;
    private final AtomicLong samples = new AtomicLong();
    private final AtomicLong batches = new AtomicLong();
    private final AtomicLong waitNanos = new AtomicLong();

    /** @param start makes the async iterator over the source (it starts pulling at once) */
    PrefetchBatchIterator(S source, int depth, Function<S, A> start) {
        if (depth < 1) {
            throw new IllegalArgumentException("prefetch depth " + depth + " must be >= 1");
        }
        this.source = source;
        this.depth = depth;
        source.deferFailures(true);
        this.async = start.apply(source);
    }

    abstract long numExamples(B batch);

    /** Reset the async iterator. */
    public abstract void reset();

    /** Stop the prefetch thread (idempotent). */
    public abstract void shutdown();

    public boolean hasNext() {
        long t = System.nanoTime();
        boolean more = async.hasNext();  // blocks while the queue is empty
        waitNanos.addAndGet(System.nanoTime() - t);
        if (more) {
            return true;
        }
        source.rethrowFailure();
        return false;
    }

    public B next() {
        if (!hasNext()) {
            throw new NoSuchElementException("no more batches in this pass; call reset()");
        }
        B batch = async.next();
        batches.incrementAndGet();
        samples.addAndGet(numExamples(batch));
        return batch;
    }

    public B next(int num) {
        throw new UnsupportedOperationException("batches come from the Python source at its own size; call next()");
    }

    public boolean resetSupported() {
        return source.resetSupported();
    }

    public boolean asyncSupported() {
        return false;
    }

    public void setPreProcessor(P preProcessor) {
        source.setPreProcessor(preProcessor);
    }

    public P getPreProcessor() {
        return source.getPreProcessor();
    }

    public int depth() {
        return depth;
    }

    /** Samples handed to the consumer (fit) so far. */
    public long samplesConsumed() {
        return samples.get();
    }

    public long batchesConsumed() {
        return batches.get();
    }

    /** Nanoseconds the consumer (fit) spent waiting for the next batch: the source or queue is too slow. */
    public long waitNanos() {
        return waitNanos.get();
    }

    public S source() {
        return source;
    }
}
