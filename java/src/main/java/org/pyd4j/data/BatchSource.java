package org.pyd4j.data;

import org.nd4j.linalg.dataset.DataSet;

/**
 * A source of DataSets implemented in Python (a JPype proxy), pulled by {@link PythonDataSetIterator}.
 * Calls arrive on the prefetch thread; JPype attaches it and takes the GIL for each call.
 */
public interface BatchSource {
    /** The next batch, or null when this pass over the data is over. */
    DataSet next();

    /** Start a new pass; only called when {@link #resetSupported()} is true. */
    void reset();

    /** False for one-shot sources such as a Python generator. */
    boolean resetSupported();
}
