package org.pyd4j.data;

import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.nd4j.linalg.dataset.api.MultiDataSetPreProcessor;
import org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator;

/** A MultiDataSetIterator (ComputationGraph) over batches handed over by Python; see {@link PythonBatchIterator}. */
public class PythonMultiDataSetIterator extends PythonBatchIterator<MultiDataSet, MultiDataSetPreProcessor>
        implements MultiDataSetIterator {
    private static final long serialVersionUID = 1L;

    public PythonMultiDataSetIterator(MultiBatchSource source) {
        super(source);
    }

    @Override
    MultiDataSet copy(MultiDataSet batch) {
        return batch.copy();
    }

    @Override
    void preProcess(MultiDataSetPreProcessor preProcessor, MultiDataSet batch) {
        preProcessor.preProcess(batch);
    }
}
