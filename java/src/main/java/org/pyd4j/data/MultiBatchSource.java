package org.pyd4j.data;

import org.nd4j.linalg.dataset.api.MultiDataSet;

/** A source of MultiDataSets (ComputationGraph training) implemented in Python. See {@link BatchSource}. */
public interface MultiBatchSource {
    /** The next batch, or null when this pass over the data is over. */
    MultiDataSet next();

    /** Start a new pass; only called when {@link #resetSupported()} is true. */
    void reset();

    /** False for one-shot sources such as a Python generator. */
    boolean resetSupported();
}
