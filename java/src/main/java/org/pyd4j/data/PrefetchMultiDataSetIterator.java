package org.pyd4j.data;

import org.nd4j.linalg.dataset.AsyncMultiDataSetIterator;
import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.nd4j.linalg.dataset.api.MultiDataSetPreProcessor;
import org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator;

/** A {@link PythonMultiDataSetIterator} behind DL4J's AsyncMultiDataSetIterator; see {@link PrefetchBatchIterator}. */
public class PrefetchMultiDataSetIterator extends PrefetchBatchIterator<MultiDataSet, MultiDataSetPreProcessor,
        PythonMultiDataSetIterator, AsyncMultiDataSetIterator> implements MultiDataSetIterator {
    private static final long serialVersionUID = 1L;

    public PrefetchMultiDataSetIterator(PythonMultiDataSetIterator source, int depth, boolean useWorkspace) {
        super(source, depth, s -> new AsyncMultiDataSetIterator(s, depth, useWorkspace));
    }

    @Override
    long numExamples(MultiDataSet batch) {
        return batch.getFeatures() != null && batch.getFeatures().length > 0 ? batch.getFeatures(0).size(0) : 0;
    }

    @Override
    public void reset() {
        async.reset();
    }

    @Override
    public void shutdown() {
        async.shutdown();
    }
}
