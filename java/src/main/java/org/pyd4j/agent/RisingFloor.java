package org.pyd4j.agent;

/**
 * The last few readings of memory that garbage only adds to: their lowest value bounds from above what
 * the job keeps, so it rising over the last point's value means the job may be keeping more
 * ({@link InspectionSchedule} then brings the next inspection forward).
 */
final class RisingFloor {
    private final long[] ring;
    private final long shareOfLast;
    private int count;
    private int next;

    /** A rise counts when it is at least SUSPECT_MIN_MIB MiB and {@code 1/shareOfLast} of the last point's value. */
    RisingFloor(int readings, long shareOfLast) {
        this.ring = new long[readings];
        this.shareOfLast = shareOfLast;
    }

    /** Records a reading; true when the last readings fill the ring and their lowest rose that much over {@code last} (-1: no point yet). */
    boolean add(long value, long last) {
        ring[next] = value;
        next = (next + 1) % ring.length;
        count = Math.min(count + 1, ring.length);
        if (count < ring.length || last < 0) return false;
        long low = Long.MAX_VALUE;
        for (long v : ring) low = Math.min(low, v);
        return low - last >= Math.max((long) InspectionSchedule.SUSPECT_MIN_MIB << 20, last / shareOfLast);
    }

    /** Forgets the readings: after a new point only readings taken since then count. */
    void clear() {
        count = 0;
    }
}
