package org.pyd4j.data;

/**
 * An exception raised inside a Python batch source. {@link #getId()} lets pyd4j re-raise the
 * original Python exception object in the Python caller of fit().
 */
public class PythonSourceException extends RuntimeException {
    private final long id;

    public PythonSourceException(long id, String message) {
        super(message);
        this.id = id;
    }

    public PythonSourceException(long id, String message, Throwable cause) {
        super(message, cause);
        this.id = id;
    }

    public long getId() {
        return id;
    }

    /** The PythonSourceException in {@code t}'s cause chain, or null. */
    public static PythonSourceException find(Throwable t) {
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (c instanceof PythonSourceException) {
                return (PythonSourceException) c;
            }
            if (c.getCause() == c) {
                break;
            }
        }
        return null;
    }

    /** A RuntimeException to throw on the consuming thread for a failure seen on the prefetch thread. */
    static RuntimeException rethrowable(Throwable failure) {
        PythonSourceException source = find(failure);
        if (source != null) {
            return new PythonSourceException(source.getId(), source.getMessage(), failure);
        }
        return new RuntimeException("batch source failed: " + failure, failure);
    }
}
