package org.pyd4j.data;

import java.util.List;

import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.api.DataSetPreProcessor;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;

/**
 * A DataSetIterator over batches handed over by Python ({@link BatchSource}), without copying:
 * the batch arrays are whatever the source built (pyd4j wraps numpy memory).
 *
 * <p>Preprocessors change arrays in place; a zero-copy batch is the user's numpy data, so by
 * default a batch is copied before a preprocessor runs on it ({@link #setCopyBeforePreProcess}).
 */
public class PythonDataSetIterator implements DataSetIterator {
    private static final long serialVersionUID = 1L;

    private final transient BatchSource source;
    private final transient SourceState<DataSet> state = new SourceState<>();
    private final transient SourceState.Pull<DataSet> pull;
    private final int batchSize;
    private int inputColumns = -1;
    private int totalOutcomes = -1;
    private DataSetPreProcessor preProcessor;
    private boolean copyBeforePreProcess = true;

    /** @param batchSize the nominal minibatch size (DL4J only reports it) */
    public PythonDataSetIterator(BatchSource source, int batchSize) {
        this.source = source;
        this.batchSize = batchSize;
        this.pull = source::next;
    }

    @Override
    public boolean hasNext() {
        return state.hasNext(pull);
    }

    @Override
    public DataSet next() {
        DataSet ds = state.next(pull);
        if (ds.getFeatures() != null && inputColumns < 0) {
            inputColumns = (int) ds.getFeatures().length() / Math.max(1, (int) ds.getFeatures().size(0));
        }
        if (ds.getLabels() != null && totalOutcomes < 0 && ds.getLabels().rank() >= 2) {
            totalOutcomes = (int) ds.getLabels().size(1);
        }
        if (preProcessor != null) {
            if (copyBeforePreProcess) {
                ds = ds.copy();
            }
            preProcessor.preProcess(ds);
        }
        return ds;
    }

    @Override
    public DataSet next(int num) {
        throw new UnsupportedOperationException("batches come from the Python source at its own size; call next()");
    }

    @Override
    public int inputColumns() {
        return inputColumns;
    }

    @Override
    public int totalOutcomes() {
        return totalOutcomes;
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

    @Override
    public int batch() {
        return batchSize;
    }

    @Override
    public void setPreProcessor(DataSetPreProcessor preProcessor) {
        this.preProcessor = preProcessor;
    }

    @Override
    public DataSetPreProcessor getPreProcessor() {
        return preProcessor;
    }

    /** Whether a batch is copied before the preprocessor changes it in place (default true). */
    public void setCopyBeforePreProcess(boolean copy) {
        this.copyBeforePreProcess = copy;
    }

    @Override
    public List<String> getLabels() {
        return null;
    }

    /** Batches handed out so far (all passes). */
    public long batchesServed() {
        return state.batches.get();
    }

    /** The failure of the Python source, if any; null otherwise. */
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
