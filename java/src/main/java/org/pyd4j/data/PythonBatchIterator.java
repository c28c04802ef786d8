package org.pyd4j.data;

/**
 * An iterator over batches of type B handed over by Python ({@link Source}), without copying:
 * the batch arrays are whatever the source built (pyd4j wraps numpy memory). P is the batch
 * type's preprocessor; a subclass says how to copy a batch and run the preprocessor on it.
 *
 * <p>Preprocessors change arrays in place; a zero-copy batch is the user's numpy data, so by
 * default a batch is copied before a preprocessor runs on it ({@link #setCopyBeforePreProcess}).
 */
public abstract class PythonBatchIterator<B, P> {
    private final transient Source<B> source;
    private final transient SourceState<B> state = new SourceState<>();
    private final transient SourceState.Pull<B> pull;
    private P preProcessor;
    private boolean copyBeforePreProcess = true;

    PythonBatchIterator(Source<B> source) {
        this.source = source;
        this.pull = source::next;
    }

    abstract B copy(B batch);

    abstract void preProcess(P preProcessor, B batch);

    /** Sees each batch as the source handed it over, before any preprocessing. */
    void observe(B batch) {
    }

    public boolean hasNext() {
        return state.hasNext(pull);
    }

    public B next() {
        B batch = state.next(pull);
        observe(batch);
        if (preProcessor != null) {
            if (copyBeforePreProcess) {
                batch = copy(batch);
            }
            preProcess(preProcessor, batch);
        }
        return batch;
    }

    public B next(int num) {
        throw new UnsupportedOperationException("batches come from the Python source at its own size; call next()");
    }

    public boolean resetSupported() {
        return source.resetSupported();
    }

    public boolean asyncSupported() {
        return true;
    }

    public void reset() {
        if (!source.resetSupported()) {
            throw new UnsupportedOperationException(
                    "this Python batch source can be read once (a generator); pass a function that returns "
                    + "a new iterable for every epoch");
        }
        state.reset();
        source.reset();
    }

    public void setPreProcessor(P preProcessor) {
        this.preProcessor = preProcessor;
    }

    public P getPreProcessor() {
        return preProcessor;
    }

    /** Whether a batch is copied before the preprocessor changes it in place (default true). */
    public void setCopyBeforePreProcess(boolean copy) {
        this.copyBeforePreProcess = copy;
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
