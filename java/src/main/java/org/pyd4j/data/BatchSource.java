package org.pyd4j.data;

import org.nd4j.linalg.dataset.DataSet;

/** A {@link Source} of DataSets, pulled by {@link PythonDataSetIterator}. */
public interface BatchSource extends Source<DataSet> {
    @Override
    DataSet next();
}
