package org.pyd4j.train;

/** What an {@link OffloadTier} did: bytes held and moved, and how much copy time the trainer
 *  waited for (the rest of the copy time was hidden behind compute). */
public final class TierStats {
    public final String tier;          // "disk" or "pinned-host"
    public final long bytesHeld;       // bytes in the tier now
    public final long peakBytesHeld;
    public final long bytesOffloaded;  // total copied out
    public final long bytesPrefetched; // total copied back
    public final long copyNanos;       // time the background copies ran
    public final long waitNanos;       // time callers blocked in awaitOffloaded/take/release

    public TierStats(String tier, long bytesHeld, long peakBytesHeld, long bytesOffloaded,
                     long bytesPrefetched, long copyNanos, long waitNanos) {
        this.tier = tier;
        this.bytesHeld = bytesHeld;
        this.peakBytesHeld = peakBytesHeld;
        this.bytesOffloaded = bytesOffloaded;
        this.bytesPrefetched = bytesPrefetched;
        this.copyNanos = copyNanos;
        this.waitNanos = waitNanos;
    }

    /** Share of copy time the trainer did not wait for (1.0: fully hidden behind compute). */
    public double hiddenShare() {
        return copyNanos == 0 ? 1.0 : Math.max(0.0, 1.0 - (double) waitNanos / copyNanos);
    }

    @Override
    public String toString() {
        return String.format("%s: held %d (peak %d), out %d, in %d, copy %.3f s, waited %.3f s",
                tier, bytesHeld, peakBytesHeld, bytesOffloaded, bytesPrefetched,
                copyNanos / 1e9, waitNanos / 1e9);
    }
}
