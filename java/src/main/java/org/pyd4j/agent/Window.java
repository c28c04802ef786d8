package org.pyd4j.agent;

import java.io.File;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The measurement window: pyd4j tune ends a job once it has measured what its verdicts need, so a
 * job that trains for hours is tuned in minutes. Options:
 * <ul>
 *   <li>{@code window_iterations=N}: end after this JVM's N-th training iteration;</li>
 *   <li>{@code window_ms=M}: end at the first iteration that completes M ms or more after this JVM's
 *       first one (start-up and loading do not count);</li>
 *   <li>{@code stop_file=PATH}: end at the next iteration once PATH exists (pyd4j creates it when its
 *       verdicts are decided; the sampler looks for it every tick).</li>
 * </ul>
 * The end is at an iteration boundary (DL4J's {@code iterationDone}, after the update): a {@code window}
 * line with the iteration count and the reason, then {@code System.exit(0)}, so the shutdown hooks run and
 * the timeline's end line says {@code "reason":"window"}. A run that ends this way is "stopped at the
 * window", never a failure.
 */
final class Window {
    private static volatile long maxIterations;
    private static volatile long maxNanos;
    private static volatile String stopFile;
    private static volatile boolean requested;
    /** Why the window ended ("iterations", "time" or "requested"); null while it has not. */
    static volatile String reason;
    private static volatile long firstIterationNanos;
    private static final AtomicBoolean ending = new AtomicBoolean();

    private Window() {
    }

    /** Reads the window options; a value that is not a positive whole number is refused naming it. */
    static void configure(Map<String, String> opts) {
        if (opts.containsKey("window_iterations")) {
            maxIterations = Agent.number(opts, "window_iterations", "1000");
            if (maxIterations < 1) throw new IllegalArgumentException("window_iterations=" + maxIterations + "; use 1 or more iterations");
        }
        if (opts.containsKey("window_ms")) {
            long ms = Agent.number(opts, "window_ms", "60000");
            if (ms < 1) throw new IllegalArgumentException("window_ms=" + ms + "; use 1 ms or more");
            maxNanos = ms * 1_000_000L;
        }
        String file = opts.get("stop_file");
        if (file != null && !file.isEmpty()) stopFile = file;
    }

    static boolean active() {
        return maxIterations > 0 || maxNanos > 0 || stopFile != null;
    }

    /** The sampler's tick: has pyd4j asked for the end? */
    static void poll() {
        String file = stopFile;
        if (file != null && !requested && new File(file).exists()) requested = true;
    }

    /** After each training iteration, on the training thread: end the job here when the window is over. */
    static void iterationDone(long n, Sink sink) {
        if (!active()) return;
        long now = System.nanoTime();
        if (firstIterationNanos == 0) firstIterationNanos = now;
        String why = null;
        if (maxIterations > 0 && n >= maxIterations) why = "iterations";
        else if (maxNanos > 0 && now - firstIterationNanos >= maxNanos) why = "time";
        else if (requested) why = "requested";
        if (why == null || !ending.compareAndSet(false, true)) return;
        reason = why;
        long trainedMs = (now - firstIterationNanos) / 1_000_000L;
        if (sink != null) {
            sink.line(new Json().put("type", "window").put("t", System.currentTimeMillis()).put("n", n)
                    .put("reason", why).put("trained_ms", trainedMs).close());
            sink.flush();
        }
        Agent.warn("measurement window over after " + n + " iterations (" + why + "): ending the job cleanly (exit 0)");
        System.exit(0);
    }
}
