package org.pyd4j.data;

import org.pyd4j.PythonException;

import java.util.NoSuchElementException;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Look-ahead and failure bookkeeping shared by the DataSet and MultiDataSet iterators.
 *
 * <p>The look-ahead is what keeps a failing Python source from hanging fit(): the failure is
 * seen in hasNext(), which then ends the stream normally, so AsyncDataSetIterator's prefetch
 * thread puts its terminator and exits (a throw from next() on that thread would leave the
 * consumer blocked on the queue forever). The failure is then rethrown on the consuming thread
 * by the Prefetch* wrapper, or by this iterator's own hasNext() when it is used unwrapped.
 */
final class SourceState<T> {
    interface Pull<T> {
        T pull();
    }

    private T pending;
    private boolean exhausted;
    private volatile Throwable failure;
    final AtomicLong batches = new AtomicLong();
    boolean deferFailures;

    synchronized boolean hasNext(Pull<T> source) {
        if (failure != null) {
            if (deferFailures) {
                return false;
            }
            throw PythonException.rethrowable(failure);
        }
        if (pending != null) {
            return true;
        }
        if (exhausted) {
            return false;
        }
        try {
            pending = source.pull();
        } catch (Throwable t) {
            failure = t;
            return hasNext(source);
        }
        if (pending == null) {
            exhausted = true;
            return false;
        }
        return true;
    }

    synchronized T next(Pull<T> source) {
        if (!hasNext(source)) {
            throw new NoSuchElementException("the Python batch source has no more batches; call reset()");
        }
        T out = pending;
        pending = null;
        batches.incrementAndGet();
        return out;
    }

    synchronized void reset() {
        pending = null;
        exhausted = false;
        failure = null;
    }

    Throwable failure() {
        return failure;
    }

    void rethrowFailure() {
        Throwable f = failure;
        if (f != null) {
            throw PythonException.rethrowable(f);
        }
    }
}
