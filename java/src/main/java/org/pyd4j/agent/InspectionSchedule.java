package org.pyd4j.agent;

/**
 * When the agent takes its next live point of its own (an inspection, {@link LiveSet}), and why early.
 * Inspections pause the job, so they are scheduled by what a leak verdict still needs, not by a fixed
 * share of the run:
 * <ul>
 *   <li>until {@value #NEEDED_POINTS} points were taken during training (a verdict needs about that many
 *       after warm-up), one as soon as the pauses allow: at most {@value #NEED_PAUSE_SHARE} of the wall
 *       time, at least a second apart;</li>
 *   <li>then, while the points after the warm-up one span fewer than {@value #NEEDED_SPAN_ITERATIONS}
 *       iterations (a slow job gives its first points within a few iterations, and the verdict wants
 *       them spread), one every {@value #SPAN_GAP_ITERATIONS} iterations at the same pace: the verdict
 *       must not wait for a regular point that may come after the job ends;</li>
 *   <li>at the same pace whenever memory the job may be keeping rose since the last point: the lowest
 *       libnd4j + JavaCPP bytes held over the last {@value #RECENT_SAMPLES} samples (an upper bound of
 *       what is kept: garbage only adds to it), or the lowest heap after the last young collections,
 *       is {@value #SUSPECT_MIN_MIB} MiB (and a tenth) over the last point's value;</li>
 *   <li>in a JVM that has not trained (a Spark driver, a job that only predicts, one still loading its
 *       data), whose verdict is judged on seconds: one every {@value #IDLE_GAP_MS} ms and at most
 *       {@value #IDLE_PAUSE_SHARE} of the wall time until {@value #NEEDED_POINTS} points were taken and
 *       the ones after the first span {@value #NEEDED_SPAN_SECONDS} s
 *       (pyd4j.profile.diagnose.LEAK_MIN_SECONDS): at the regular pace a short job ends before it has
 *       them;</li>
 *   <li>otherwise every {@code intervalMs} and at most {@code live_share} (0.5%) of the wall time.</li>
 * </ul>
 * Not thread-safe: the observations, {@link #nextDue}, {@link #suspicion} and {@link #pointTaken} run
 * under the live set's lock; the pacing of the points ({@link #inspected}, {@link #naturalPointTaken},
 * {@link #failed}, {@link #sinceLastPoint}) only on its thread.
 */
final class InspectionSchedule {
    /** Pause share allowed while a verdict still needs points (see the class comment). */
    static final double NEED_PAUSE_SHARE = 0.2;
    static final int NEEDED_POINTS = 6;
    /** Iterations the points after the warm-up one must span (pyd4j.profile.diagnose.LEAK_MIN_ITERATIONS). */
    static final int NEEDED_SPAN_ITERATIONS = 20;
    static final int SPAN_GAP_ITERATIONS = 5;
    /** Seconds the points after the first must span in a JVM that has not trained (LEAK_MIN_SECONDS). */
    static final int NEEDED_SPAN_SECONDS = 20;
    static final long IDLE_GAP_MS = 2000;
    /** Pause share allowed for the points a JVM that has not trained still needs (it waits on nothing it computes). */
    static final double IDLE_PAUSE_SHARE = 0.05;
    static final int RECENT_SAMPLES = 20;
    static final int SUSPECT_MIN_MIB = 8;
    private static final long NEED_MIN_GAP_NANOS = 1_000_000_000L;

    private final long intervalNanos;
    private final double pauseShare;
    /** Wall times of the last point of any kind (points of the job's own collections at most one a second)
     *  and of the last inspection (what the needed pace counts from). */
    private long lastPointNanos = System.nanoTime();
    private long lastInspectionNanos = lastPointNanos;
    private long nextInspectionNanos;
    /** Pause of the last inspection, ns (0 before the first). */
    private long lastPauseNanos;
    /** Points taken once training had begun (iterations >= 1), and the iteration count at the last point. */
    private int trainingPoints;
    private long lastPointIterations = -1;
    /** Iteration count at the second training point: the first one the verdict keeps after warm-up (-1 before). */
    private long spanStartIterations = -1;
    /** Points taken before any iteration, and the wall times (ms) of the second of them and of the last. */
    private int idlePoints;
    private long idleSpanStartMs = -1;
    private long idleLastMs = -1;
    /** Off-heap bytes held (libnd4j + JavaCPP) and collector heap usage at the last point; -1 before it. */
    private long lastKept = -1;
    private long lastHeapAfter = -1;
    /** Off-heap bytes held at the most recent samples, and heap after the latest young collections. */
    private final RisingFloor recentHeld = new RisingFloor(RECENT_SAMPLES, 10);
    private final RisingFloor recentYoung = new RisingFloor(3, 4);
    /** Why the next inspection is due early ("needed", "offheap-rise", "heap-rise"), or null. */
    private String suspicion;

    InspectionSchedule(long intervalNanos, double pauseShare) {
        this.intervalNanos = intervalNanos;
        this.pauseShare = pauseShare;
        this.nextInspectionNanos = System.nanoTime() + intervalNanos;
    }

    /** Off-heap bytes held now (libnd4j buffers + JavaCPP bytes + workspaces), every sample. */
    void observeHeld(long held) {
        if (recentHeld.add(held, lastKept) && suspicion == null) suspicion = "offheap-rise";
    }

    /** A young (or mixed) collection left {@code heapAfter} bytes of heap in use. */
    void observeYoung(long heapAfter) {
        if (recentYoung.add(heapAfter, lastHeapAfter) && suspicion == null) suspicion = "heap-rise";
    }

    /** Why the next inspection is due early, or null. */
    String suspicion() {
        return suspicion;
    }

    /** When the next inspection is due (System.nanoTime()), and why early (null: the regular pace). */
    long nextDue(long iterations) {
        if (iterations == 0 && (idlePoints < NEEDED_POINTS || idleLastMs - idleSpanStartMs < NEEDED_SPAN_SECONDS * 1000L)) {
            if (suspicion == null) suspicion = "needed-idle";
            return lastInspectionNanos + Math.max(IDLE_GAP_MS * 1_000_000L, (long) (lastPauseNanos / IDLE_PAUSE_SHARE));
        }
        boolean training = iterations >= 1 && iterations > lastPointIterations;
        if (training && suspicion == null && trainingPoints < NEEDED_POINTS) suspicion = "needed";
        if (training && suspicion == null && spanStartIterations >= 1
                && lastPointIterations - spanStartIterations < NEEDED_SPAN_ITERATIONS
                && iterations >= lastPointIterations + SPAN_GAP_ITERATIONS) suspicion = "needed-span";
        if (training && suspicion != null) {
            return lastInspectionNanos + Math.max(NEED_MIN_GAP_NANOS, (long) (lastPauseNanos / NEED_PAUSE_SHARE));
        }
        return nextInspectionNanos;
    }

    /**
     * A point was written at wall time {@code t}, after {@code iterations}: {@code kept} off-heap bytes
     * are the new reference for the off-heap rise check. An inspection's point ({@code inspection}) is also
     * the heap's reference ({@code heapAfterGc}, -1 unknown) and counts toward what the schedule still
     * needs; a point of the job's own collection does not: its heap still holds the bookkeeping of the
     * arrays that collection freed, so the heap verdict takes only inspections (pyd4j.profile.leak_verdicts),
     * and a job calling System.gc() every iteration must still get them.
     */
    void pointTaken(long kept, long heapAfterGc, long iterations, long t, boolean inspection) {
        lastKept = kept;
        recentHeld.clear();
        if (!inspection) {
            if ("offheap-rise".equals(suspicion)) suspicion = null;
            return;
        }
        if (heapAfterGc >= 0) lastHeapAfter = heapAfterGc;
        if (iterations >= 1 && iterations > lastPointIterations && ++trainingPoints == 2) spanStartIterations = iterations;
        lastPointIterations = iterations;
        if (iterations == 0 && ++idlePoints == 2) idleSpanStartMs = t;
        if (iterations == 0) idleLastMs = t;
        suspicion = null;
        recentYoung.clear();
    }

    /** After an inspection that paused the job for {@code pause} ns: the next one keeps the pause share. */
    void inspected(long pause) {
        lastPauseNanos = pause;
        lastPointNanos = System.nanoTime();
        lastInspectionNanos = lastPointNanos;
        nextInspectionNanos = lastPointNanos + Math.max(intervalNanos, (long) (pause / pauseShare));
    }

    /** After a point of a collection the job had anyway: the next such point a second later at the soonest;
     *  the inspections keep their pace (the heap verdict has only them). */
    void naturalPointTaken() {
        lastPointNanos = System.nanoTime();
    }

    /** After a point that failed: try again an interval later. */
    void failed() {
        lastPointNanos = System.nanoTime();
        lastInspectionNanos = lastPointNanos;
        nextInspectionNanos = lastPointNanos + intervalNanos;
    }

    /** Nanoseconds from the last point to {@code now} (System.nanoTime()). */
    long sinceLastPoint(long now) {
        return now - lastPointNanos;
    }
}
