package org.pyd4j.data;

import java.util.List;

import org.nd4j.linalg.dataset.AsyncDataSetIterator;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.api.DataSetPreProcessor;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;

/** A {@link PythonDataSetIterator} behind DL4J's AsyncDataSetIterator; see {@link PrefetchBatchIterator}. */
public class PrefetchDataSetIterator
        extends PrefetchBatchIterator<DataSet, DataSetPreProcessor, PythonDataSetIterator, AsyncDataSetIterator>
        implements DataSetIterator {
    private static final long serialVersionUID = 1L;

    public PrefetchDataSetIterator(PythonDataSetIterator source, int depth, boolean useWorkspace) {
        super(source, depth, s -> new AsyncDataSetIterator(s, depth, useWorkspace));
    }

    @Override
    long numExamples(DataSet batch) {
        return batch.numExamples();
    }

    @Override
    public void reset() {
        async.reset();
    }

    @Override
    public void shutdown() {
        async.shutdown();
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
    public int batch() {
        return source.batch();
    }

    @Override
    public List<String> getLabels() {
        return null;
    }
}
