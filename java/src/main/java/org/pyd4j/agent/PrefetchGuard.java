package org.pyd4j.agent;

import java.io.PrintStream;

/**
 * Turns a hang DL4J leaves behind into an error. ND4J's AsyncDataSetIterator and
 * AsyncMultiDataSetIterator (what fit() wraps an iterator in when its asyncSupported() is true)
 * load batches on a thread of their own; when the job's next() throws there, the thread records
 * the exception and dies without putting anything in the queue, so a training thread already
 * waiting in hasNext() for the next batch waits forever (1.0.0-M2.1 and beta7 alike). The job hangs
 * with only a stack trace on stderr.
 *
 * <p>The guard chains the JVM's default uncaught-exception handler (the default behaviour, a
 * stack trace on stderr, is kept). When one of those prefetch threads dies it writes a
 * {@code note} line with a {@code prefetch_died} object (thread, exception, its root cause, the
 * first frames), then watches the thread that called fit(iterator) for a few seconds: if it is
 * waiting inside one of those iterators, it interrupts it, and fit() ends with DL4J's own
 * "Premature end of loop" exception instead of waiting forever.
 */
final class PrefetchGuard {
    /** The names ND4J gives its prefetch threads (AsyncDataSetIterator, AsyncMultiDataSetIterator). */
    static final String[] THREADS = {"ADSI prefetch thread", "AMDSI prefetch thread"};
    static final long WATCH_MS = 5000;
    private static volatile Thread training;
    private static volatile boolean installed;

    private PrefetchGuard() {
    }

    /** Once per JVM, at agent start. */
    static synchronized void install() {
        if (installed) return;
        installed = true;
        Thread.UncaughtExceptionHandler previous = Thread.getDefaultUncaughtExceptionHandler();
        Thread.setDefaultUncaughtExceptionHandler((t, e) -> {
            try {
                if (isPrefetchThread(t.getName())) died(t, e);
            } catch (Throwable ignored) {
                // the guard never adds a failure of its own
            }
            if (previous != null) {
                previous.uncaughtException(t, e);
            } else {   // what the JVM does without a default handler (ThreadGroup.uncaughtException)
                PrintStream err = System.err;
                err.print("Exception in thread \"" + t.getName() + "\" ");
                e.printStackTrace(err);
            }
        });
    }

    /** fit(iterator) was entered on the current thread. */
    static void fitting() {
        training = Thread.currentThread();
    }

    static boolean isPrefetchThread(String name) {
        for (String n : THREADS) if (n.equals(name)) return true;
        return false;
    }

    private static void died(Thread t, Throwable e) {
        Throwable root = e;
        while (root.getCause() != null && root.getCause() != root) root = root.getCause();
        StackTraceElement[] trace = root.getStackTrace();
        StringBuilder where = new StringBuilder();
        for (int i = 0; i < Math.min(5, trace.length); i++) where.append(i > 0 ? " | " : "").append(trace[i]);
        Sink s = Hooks.sink;
        if (s != null) {
            s.line(new Json().put("type", "note").put("t", System.currentTimeMillis())
                    .put("text", "ND4J's prefetch thread '" + t.getName() + "' died: " + root)
                    .raw("prefetch_died", new Json().put("thread", t.getName()).put("exception", String.valueOf(e))
                            .put("cause", String.valueOf(root)).put("frames", where.toString()).close()).close());
            s.flush();
        }
        Thread fit = training;
        if (fit == null) return;
        Thread watcher = new Thread(() -> watch(fit), "pyd4j-prefetch-guard");
        watcher.setDaemon(true);
        watcher.start();
    }

    /** Interrupts the training thread if it waits in a prefetcher's hasNext() (nothing else will wake it). */
    private static void watch(Thread fit) {
        long end = System.currentTimeMillis() + WATCH_MS;
        while (System.currentTimeMillis() < end && fit.isAlive()) {
            if (waitsInPrefetcher(fit)) {
                Agent.warn("ND4J's prefetch thread died and the training thread '" + fit.getName() + "' was waiting for it, "
                        + "which ND4J never ends: interrupted, so that fit() fails instead of hanging (the cause is above)");
                fit.interrupt();
                Sink s = Hooks.sink;
                if (s != null) {
                    s.line(new Json().put("type", "note").put("t", System.currentTimeMillis())
                            .put("text", "the training thread '" + fit.getName() + "' waited for the dead prefetch thread "
                                    + "(ND4J does not wake it): the agent interrupted it so that fit() fails instead of hanging")
                            .raw("prefetch_interrupted", new Json().put("thread", fit.getName()).close()).close());
                    s.flush();
                }
                return;
            }
            try {
                Thread.sleep(100);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    static boolean waitsInPrefetcher(Thread t) {
        Thread.State state = t.getState();
        if (state != Thread.State.WAITING && state != Thread.State.TIMED_WAITING) return false;
        for (StackTraceElement f : t.getStackTrace()) {
            String c = f.getClassName();
            if ((c.endsWith(".AsyncDataSetIterator") || c.endsWith(".AsyncMultiDataSetIterator")) && f.getMethodName().equals("hasNext")) {
                return true;
            }
        }
        return false;
    }
}
