package org.pyd4j.data;

/**
 * Batches of type B implemented in Python (a JPype proxy), pulled by a {@link PythonBatchIterator}.
 * Calls arrive on the prefetch thread; JPype attaches it and takes the GIL for each call.
 */
public interface Source<B> {
    /** The next batch, or null when this pass over the data is over. */
    B next();

    /** Start a new pass; only called when {@link #resetSupported()} is true. */
    void reset();

    /** False for one-shot sources such as a Python generator. */
    boolean resetSupported();
}
