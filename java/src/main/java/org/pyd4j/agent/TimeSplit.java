package org.pyd4j.agent;

/**
 * Where each training iteration's time goes, on the training thread, with no code change:
 * <ul>
 *   <li>{@code data}: inside the iterator's {@code next()} and {@code hasNext()} as DL4J's own
 *       fit(iterator) calls them (an async prefetcher that runs dry blocks in hasNext());</li>
 *   <li>{@code outside}: from the end of one iteration to the start of the next forward pass,
 *       less {@code data}: the job's own loop between its fit(DataSet) calls (making batches) and
 *       DL4J's per-iteration setup;</li>
 *   <li>{@code forward}: {@code computeGradientAndScore()} entry to the listeners' {@code onForwardPass};</li>
 *   <li>{@code backward}: {@code onForwardPass} to {@code onGradientCalculation} (backpropagation and the score);</li>
 *   <li>{@code updater}: {@code onGradientCalculation} to {@code iterationDone} (the updater and the parameter step).</li>
 * </ul>
 * The {@code split} line also carries the distribution of the data wait per iteration over the last
 * {@value #RECENT} iterations (the first {@value #WARMUP} left out: class loading and the JIT), as
 * {@code data_p50_ms}, {@code data_p90_ms} and {@code data_p99_ms}: an uneven loader's mean hides the
 * batches that stall training, and they decide how deep a prefetch queue must be.
 * Cumulative milliseconds are written as a {@code split} line after iterations 1, 2, 4, ... 64, then
 * at most once a second. GC pauses
 * overlap these (pyd4j reads them from the GC lines). Assumes one training thread, as DL4J's fit does.
 */
public final class TimeSplit {
    private static long dataNanos, outsideNanos, forwardNanos, backwardNanos, updaterNanos, iterations;
    private static long dataStartedAt, dataInIteration, lastEnd, forwardStart, forwardDone, backwardDone, gradientDone;
    private static long lastEmit;
    static final int RECENT = 1024;
    static final int WARMUP = 2;
    private static final long[] recentData = new long[RECENT];
    private static long recentCount;

    private TimeSplit() {
    }

    /** Before DL4J calls the iterator's next(). */
    public static void dataStart() {
        dataStartedAt = System.nanoTime();
    }

    /** After the iterator's next() returned. */
    public static void dataEnd() {
        long started = dataStartedAt;
        if (started != 0) {
            long d = System.nanoTime() - started;
            dataNanos += d;
            dataInIteration += d;
            dataStartedAt = 0;
        }
    }

    /** Entry of computeGradientAndScore(). */
    public static void forwardStart() {
        forwardStart = System.nanoTime();
    }

    static void forwardDone() {
        forwardDone = System.nanoTime();
    }

    static void backwardDone() {
        backwardDone = System.nanoTime();
    }

    static void gradientDone() {
        gradientDone = System.nanoTime();
    }

    static synchronized void iterationDone(Sink sink) {
        long now = System.nanoTime();
        if (forwardStart != 0 && forwardDone >= forwardStart) {
            if (lastEnd != 0 && forwardStart > lastEnd) outsideNanos += Math.max(0, forwardStart - lastEnd - dataInIteration);
            forwardNanos += forwardDone - forwardStart;
            long gradient = Math.max(Math.max(gradientDone, backwardDone), forwardDone);
            backwardNanos += gradient - forwardDone;
            updaterNanos += now - gradient;
            iterations++;
            if (iterations > WARMUP) recentData[(int) (recentCount++ % RECENT)] = dataInIteration;
        }
        dataInIteration = 0;
        lastEnd = now;
        forwardStart = forwardDone = backwardDone = gradientDone = 0;
        boolean early = iterations <= 64 && Long.bitCount(iterations) == 1;  // 1, 2, 4, ... 64: short runs get lines too
        if (sink != null && (early || now - lastEmit >= 1_000_000_000L)) {
            lastEmit = now;
            Json line = new Json().put("type", "split").put("t", System.currentTimeMillis()).put("iterations", iterations)
                    .put("data_ms", dataNanos / 1e6).put("outside_ms", outsideNanos / 1e6).put("forward_ms", forwardNanos / 1e6)
                    .put("backward_ms", backwardNanos / 1e6).put("updater_ms", updaterNanos / 1e6);
            int n = (int) Math.min(recentCount, RECENT);
            if (n > 0) {
                long[] sorted = java.util.Arrays.copyOf(recentData, n);
                java.util.Arrays.sort(sorted);
                line.put("data_p50_ms", quantile(sorted, 0.50) / 1e6).put("data_p90_ms", quantile(sorted, 0.90) / 1e6)
                        .put("data_p99_ms", quantile(sorted, 0.99) / 1e6);
            }
            sink.line(line.close());
        }
    }

    /** The nearest-rank quantile of sorted values. */
    static long quantile(long[] sorted, double q) {
        int rank = (int) Math.ceil(q * sorted.length);
        return sorted[Math.max(0, Math.min(sorted.length - 1, rank - 1))];
    }
}
