package org.pyd4j.data;

import org.pyd4j.PythonException;

import java.util.List;
import java.util.NoSuchElementException;
import java.util.concurrent.atomic.AtomicLong;

import org.nd4j.linalg.dataset.AsyncDataSetIterator;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.api.DataSetPreProcessor;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;

/**
 * A Python-fed iterator behind DL4J's AsyncDataSetIterator with a chosen queue depth.
 *
 * <p>Reports {@code asyncSupported() == false}, so fit() uses it as is instead of wrapping it
 * again with DL4J's fixed depth of 2. A failure of the Python source ends the prefetch stream and
 * is rethrown here, on the thread that runs fit(), as a {@link PythonException}.
 * Call {@link #shutdown()} when done: it stops the prefetch thread.
 */
public class PrefetchDataSetIterator implements DataSetIterator {
    private static final long serialVersionUID = 1L;

    private final transient PythonDataSetIterator source;
    private final transient AsyncDataSetIterator async;
    private final int depth;
    private final AtomicLong samples = new AtomicLong();
    private final AtomicLong batches = new AtomicLong();
    private final AtomicLong waitNanos = new AtomicLong();

    public PrefetchDataSetIterator(PythonDataSetIterator source, int depth, boolean useWorkspace) {
        if (depth < 1) {
            throw new IllegalArgumentException("prefetch depth " + depth + " must be >= 1");
        }
        this.source = source;
        this.depth = depth;
        source.deferFailures(true);
        this.async = new AsyncDataSetIterator(source, depth, useWorkspace);
    }

    @Override
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

    @Override
    public DataSet next() {
        if (!hasNext()) {
            throw new NoSuchElementException("no more batches in this pass; call reset()");
        }
        DataSet ds = async.next();
        batches.incrementAndGet();
        samples.addAndGet(ds.numExamples());
        return ds;
    }

    @Override
    public DataSet next(int num) {
        throw new UnsupportedOperationException("batches come from the Python source at its own size; call next()");
    }

    @Override
    public int inputColumns() {
        return source.inputColumns();
    }

    @Override
    public int totalOutcomes() {
        return source.totalOutcomes();
    }

    @Override
    public boolean resetSupported() {
        return source.resetSupported();
    }

    @Override
    public boolean asyncSupported() {
        return false;
    }

    @Override
    public void reset() {
        async.reset();
    }

    @Override
    public int batch() {
        return source.batch();
    }

    @Override
    public void setPreProcessor(DataSetPreProcessor preProcessor) {
        source.setPreProcessor(preProcessor);
    }

    @Override
    public DataSetPreProcessor getPreProcessor() {
        return source.getPreProcessor();
    }

    @Override
    public List<String> getLabels() {
        return null;
    }

    /** Stop the prefetch thread (idempotent). */
    public void shutdown() {
        async.shutdown();
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

    public PythonDataSetIterator source() {
        return source;
    }
}
