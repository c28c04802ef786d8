package org.pyd4j.data;

import org.nd4j.linalg.dataset.api.MultiDataSet;

/** A {@link Source} of MultiDataSets (ComputationGraph training), pulled by {@link PythonMultiDataSetIterator}. */
public interface MultiBatchSource extends Source<MultiDataSet> {
    @Override
    MultiDataSet next();
}
