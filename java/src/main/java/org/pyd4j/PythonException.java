package org.pyd4j;

/**
 * An exception raised in Python code that Java called back (e.g. a batch source on a prefetch
 * thread). {@link #getId()} lets pyd4j re-raise the original Python exception object in the
 * Python code that called into Java.
 */
public class PythonException extends RuntimeException {
    private final long id;

    public PythonException(long id, String message) {
        super(message);
        this.id = id;
    }

    public PythonException(long id, String message, Throwable cause) {
        super(message, cause);
        this.id = id;
    }

    public long getId() {
        return id;
    }

    /** The PythonException in {@code t}'s cause chain, or null. */
    public static PythonException find(Throwable t) {
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (c instanceof PythonException) {
                return (PythonException) c;
            }
            if (c.getCause() == c) {
                break;
            }
        }
        return null;
    }

    /** A RuntimeException to throw on the consuming thread for a failure seen on the prefetch thread. */
    public static RuntimeException rethrowable(Throwable failure) {
        PythonException source = find(failure);
        if (source != null) {
            return new PythonException(source.getId(), source.getMessage(), failure);
        }
        return new RuntimeException("Python callback failed: " + failure, failure);
    }
}
