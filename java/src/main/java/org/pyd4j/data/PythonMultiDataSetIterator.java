package org.pyd4j.data;

import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.nd4j.linalg.dataset.api.MultiDataSetPreProcessor;
import org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator;

/** {@link PythonDataSetIterator} for MultiDataSets (ComputationGraph). */
public class PythonMultiDataSetIterator implements MultiDataSetIterator {
    private static final long serialVersionUID = 1L;

    private final transient MultiBatchSource source;
    private final transient SourceState<MultiDataSet> state = new SourceState<>();
    private final transient SourceState.Pull<MultiDataSet> pull;
    private MultiDataSetPreProcessor preProcessor;
    private boolean copyBeforePreProcess = true;

    public PythonMultiDataSetIterator(MultiBatchSource source) {
        this.source = source;
        this.pull = source::next;
    }

    @Override
    public boolean hasNext() {
        return state.hasNext(pull);
    }

    @Override
    public MultiDataSet next() {
        MultiDataSet ds = state.next(pull);
        if (preProcessor != null) {
            if (copyBeforePreProcess) {
                ds = ds.copy();
            }
            preProcessor.preProcess(ds);
        }
        return ds;
    }

    @Override
    public MultiDataSet next(int num) {
        throw new UnsupportedOperationException("batches come from the Python source at its own size; call next()");
    }

    @Override
    public void setPreProcessor(MultiDataSetPreProcessor preProcessor) {
        this.preProcessor = preProcessor;
    }

    @Override
    public MultiDataSetPreProcessor getPreProcessor() {
        return preProcessor;
    }

    public void setCopyBeforePreProcess(boolean copy) {
        this.copyBeforePreProcess = copy;
    }

    @Override
    public boolean resetSupported() {
        return source.resetSupported();
    }

    @Override
    public boolean asyncSupported() {
        return true;
    }

    @Override
    public void reset() {
        if (!source.resetSupported()) {
            throw new UnsupportedOperationException(
                    "this Python batch source can be read once (a generator); pass a function that returns "
                    + "a new iterable for every epoch");
        }
        state.reset();
        source.reset();
    }

    public long batchesServed() {
        return state.batches.get();
    }

    public Throwable failure() {
        return state.failure();
    }

    void deferFailures(boolean defer) {
        state.deferFailures = defer;
    }

    void rethrowFailure() {
        state.rethrowFailure();
    }
}
