package org.pyd4j.data;

import java.util.List;

import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.api.DataSetPreProcessor;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;

/** A DataSetIterator over DataSets handed over by Python; see {@link PythonBatchIterator}. */
public class PythonDataSetIterator extends PythonBatchIterator<DataSet, DataSetPreProcessor>
        implements DataSetIterator {
    private static final long serialVersionUID = 1L;

    private final int batchSize;
    private int inputColumns = -1;
    private int totalOutcomes = -1;

    /** @param batchSize the nominal minibatch size (DL4J only reports it) */
    public PythonDataSetIterator(BatchSource source, int batchSize) {
        super(source);
        this.batchSize = batchSize;
    }

    @Override
    DataSet copy(DataSet batch) {
        return batch.copy();
    }

    @Override
    void preProcess(DataSetPreProcessor preProcessor, DataSet batch) {
        preProcessor.preProcess(batch);
    }

    @Override
    void observe(DataSet ds) {
        if (ds.getFeatures() != null && inputColumns < 0) {
            inputColumns = (int) ds.getFeatures().length() / Math.max(1, (int) ds.getFeatures().size(0));
        }
        if (ds.getLabels() != null && totalOutcomes < 0 && ds.getLabels().rank() >= 2) {
            totalOutcomes = (int) ds.getLabels().size(1);
        }
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
    public int batch() {
        return batchSize;
    }

    @Override
    public List<String> getLabels() {
        return null;
    }
}
