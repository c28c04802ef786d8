package org.pyd4j.agent;

/**
 * Heap usage no live object holds after a full collection, as a function of the usage, from the
 * inspections (usage and histogram total at the same collection). Part of it is fixed (G1 keeps the
 * CDS archive regions pinned, about 3 MB on JDK 17), part grows with the heap (the tail of each
 * region that the next object did not fit in: 3% of a 3 GiB heap of 0.8 MB arrays in 2 MB regions,
 * 23% in 1 MB regions, where each such array is humongous and has a region to itself). Over a span
 * of inspections wide enough to tell the two apart (the largest usage at least twice the smallest
 * and {@value #MIN_FIT_SPAN_MIB} MiB above it) it is the least-squares line through them, so that
 * a usage past the last inspection (none are taken above {@code live_max_heap}) is
 * corrected in proportion; otherwise the last inspection's figure.
 */
final class FreeSpace {
    static final int KEPT = 16;
    static final long MIN_FIT_SPAN_MIB = 32;
    /**
     * A slope above this is noise, not layout: the worst layout, objects just over half a region
     * (G1 gives each its own region), leaves just under half of every region free.
     */
    static final double MAX_SHARE = 0.5;
    private final long[] usage = new long[KEPT];
    private final long[] free = new long[KEPT];
    private int count;
    private int next;
    private long last;

    void add(long usageAfter, long freeBytes) {
        usage[next] = usageAfter;
        free[next] = freeBytes;
        next = (next + 1) % KEPT;
        count = Math.min(count + 1, KEPT);
        last = freeBytes;
    }

    /** Free space at this usage after a full collection. */
    long at(long usageAfter) {
        long low = Long.MAX_VALUE, high = 0;
        double meanU = 0, meanF = 0;
        for (int i = 0; i < count; i++) {
            low = Math.min(low, usage[i]);
            high = Math.max(high, usage[i]);
            meanU += usage[i] / (double) count;
            meanF += free[i] / (double) count;
        }
        if (count < 2 || high < 2 * low || high - low < (MIN_FIT_SPAN_MIB << 20)) return last;
        double sxy = 0, sxx = 0;
        for (int i = 0; i < count; i++) {
            sxy += (usage[i] - meanU) * (free[i] - meanF);
            sxx += (usage[i] - meanU) * (usage[i] - meanU);
        }
        double share = Math.max(0, Math.min(MAX_SHARE, sxy / sxx));
        double fixed = Math.max(0, meanF - share * meanU);
        return Math.min(usageAfter, Math.round(fixed + share * usageAfter));
    }
}
