package org.pyd4j.data;

import java.util.NoSuchElementException;
import java.util.concurrent.atomic.AtomicLong;

import org.nd4j.linalg.dataset.AsyncMultiDataSetIterator;
import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.nd4j.linalg.dataset.api.MultiDataSetPreProcessor;
import org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator;

/** {@link PrefetchDataSetIterator} for MultiDataSets (ComputationGraph). */
public class PrefetchMultiDataSetIterator implements MultiDataSetIterator {
    private static final long serialVersionUID = 1L;

    private final transient PythonMultiDataSetIterator source;
    private final transient AsyncMultiDataSetIterator async;
    private final int depth;
    private final AtomicLong samples = new AtomicLong();
    private final AtomicLong batches = new AtomicLong();
    private final AtomicLong waitNanos = new AtomicLong();

    public PrefetchMultiDataSetIterator(PythonMultiDataSetIterator source, int depth, boolean useWorkspace) {
        if (depth < 1) {
            throw new IllegalArgumentException("prefetch depth " + depth + " must be >= 1");
        }
        this.source = source;
        this.depth = depth;
        source.deferFailures(true);
        this.async = new AsyncMultiDataSetIterator(source, depth, useWorkspace);
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
    public MultiDataSet next() {
        if (!hasNext()) {
            throw new NoSuchElementException("no more batches in this pass; call reset()");
        }
        MultiDataSet ds = async.next();
        batches.incrementAndGet();
        if (ds.getFeatures() != null && ds.getFeatures().length > 0) {
            samples.addAndGet(ds.getFeatures(0).size(0));
        }
        return ds;
    }

    @Override
    public MultiDataSet next(int num) {
        throw new UnsupportedOperationException("batches come from the Python source at its own size; call next()");
    }

    @Override
    public void setPreProcessor(MultiDataSetPreProcessor preProcessor) {
        source.setPreProcessor(preProcessor);
    }

    @Override
    public MultiDataSetPreProcessor getPreProcessor() {
        return source.getPreProcessor();
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

    public void shutdown() {
        async.shutdown();
    }

    public int depth() {
        return depth;
    }

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

    public PythonMultiDataSetIterator source() {
        return source;
    }
}
