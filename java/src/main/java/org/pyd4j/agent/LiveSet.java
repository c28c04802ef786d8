package org.pyd4j.agent;

import java.lang.management.ManagementFactory;
import java.lang.management.MemoryMXBean;
import java.util.ArrayList;
import java.util.List;

import javax.management.MBeanServer;
import javax.management.ObjectName;

/**
 * What the job really keeps: the heap and off-heap memory left after a collection of the whole heap,
 * one "live" line each time.
 *
 * <p>Heap after a young collection is not the live set: old-generation garbage stays until an old or
 * full collection, and a G1 job with a large heap may run for minutes without one. Array buffers are
 * freed only when the Java objects owning them are collected, so off-heap memory carries the same
 * garbage. A live point is taken
 * <ul>
 *   <li>after each full collection the job has anyway (System.gc(), a G1 full GC, a ZGC/Shenandoah cycle,
 *       JavaCPP's own System.gc() near its limits), or</li>
 *   <li>by the agent itself (an inspection): a full collection ({@code jcmd <pid> GC.run}), then, once
 *       the deallocators are done, a class histogram of the live heap, the same as
 *       {@code jcmd <pid> GC.class_histogram} (both work under -XX:+DisableExplicitGC); while more
 *       than {@code live_max_heap} MiB of heap (1 GiB by default) is in use, a second full collection
 *       instead of the histogram (whose pause grows with the heap), its usage corrected by FreeSpace.</li>
 * </ul>
 * Inspections are scheduled by what a leak verdict still needs ({@link InspectionSchedule}).
 * After the collection it waits until ND4J's and JavaCPP's deallocator threads have freed what the
 * collection released, then records the heap, ND4J's buffers (less those allocated since the collection
 * began, which the job made meanwhile: {@code nd4j_new}), JavaCPP's bytes, RSS and the largest
 * classes, followed by the allocation sites still holding memory.
 */
final class LiveSet implements Runnable {
    static final double DEFAULT_PAUSE_SHARE = 0.005;
    private static final long WAIT_SLICE_MS = 200;
    /** Heap in use above which the agent takes no histogram of its own (the pause grows with the heap), MiB. */
    static final long DEFAULT_MAX_HEAP_MIB = 1024;
    private static final long MIN_GAP_NANOS = 1_000_000_000L;  // at most one live point per second
    private static final int TOP_CLASSES = 12;
    private static final int TOP_SITES = 20;

    private final Sink sink;
    private final long intervalNanos;
    /** Live points written so far (each sample carries it, so a watcher can wait for enough of them). */
    volatile long points;
    private final Sampler sampler;
    private final MemoryMXBean memory = ManagementFactory.getMemoryMXBean();
    private final Object lock = new Object();
    private volatile boolean running = true;
    private Thread thread;
    // a full collection seen by the GC listener, waiting to be measured
    private String pendingTrigger;
    private long pendingT;
    private long pendingHeap;
    /**
     * The agent's own collections are told from the job's and from jcmd's (which have the same causes)
     * by collection id: when its GC.run or GC.class_histogram call returns, the collection it caused is
     * the last one of that collector. A full collection with such a cause whose notification comes
     * while the call runs is held until the call returns and is then filed; one that comes after is
     * compared with the ids the call left.
     */
    private static final String RUN_CAUSE = "Diagnostic Command";
    private static final String HISTOGRAM_CAUSE = "Heap Inspection Initiated GC";
    private String runningCause;
    private final List<Collection> held = new ArrayList<>();
    private final java.util.Map<String, Long> ownRun = new java.util.HashMap<>();
    private final java.util.Map<String, Long> ownHistogram = new java.util.HashMap<>();

    /** A collection of the whole heap, as the GC listener saw it. */
    static final class Collection {
        final String trigger, cause, collector;
        final long id, t, heapAfter;

        Collection(String trigger, String cause, String collector, long id, long t, long heapAfter) {
            this.trigger = trigger;
            this.cause = cause;
            this.collector = collector;
            this.id = id;
            this.t = t;
            this.heapAfter = heapAfter;
        }
    }

    /** Heap usage after the collection of the agent's last inspection (what the collector reports). */
    private long inspectionHeapAfter = -1;
    /** The job's own full collections so far, and their count when the running inspection began: one that
     *  comes during the inspection gives the deallocators more to free while it waits for them. */
    private long jobCollections;
    private long jobCollectionsAtInspection;
    /** Heap usage after the agent's last own GC.run collection (-1 until its notification came). */
    private long runHeapAfter = -1;
    /**
     * Collector-reported usage after a full collection minus the histogram's object bytes, measured at
     * each inspection: space no live object holds. Natural full collections' usage is corrected by it,
     * so both kinds of point agree.
     */
    private final FreeSpace freeSpace = new FreeSpace();
    private final InspectionSchedule schedule;
    private final DeallocatorDrain drain = new DeallocatorDrain();
    private boolean tooLargeNoted;
    /** The last inspection's heap bytes of ND4J/JavaCPP deallocation bookkeeping (see Histogram). */
    private long bookkeeping = -1;

    private final long maxHeapForInspection;

    LiveSet(Sink sink, long intervalMs, double pauseShare, long maxHeapMib, Sampler sampler) {
        this.sink = sink;
        this.maxHeapForInspection = maxHeapMib << 20;
        this.intervalNanos = intervalMs * 1_000_000L;
        this.schedule = new InspectionSchedule(intervalNanos, pauseShare);
        this.sampler = sampler;
    }

    void begin() {
        thread = new Thread(this, "pyd4j-agent-live");
        thread.setDaemon(true);
        thread.start();
    }

    void stop() {
        running = false;
        if (thread != null) thread.interrupt();
    }

    /** Off-heap bytes the job holds now: libnd4j buffers, JavaCPP bytes and ND4J workspaces. */
    static long held(JavaCpp.Counters c, long workspaceBytes) {
        return (Allocations.nd4jHooked ? Allocations.nd4jLive.get() : 0) + (c != null ? c.total : 0) + Math.max(0, workspaceBytes);
    }

    /** From the sampler, every sample: off-heap bytes held now (libnd4j buffers + JavaCPP bytes + workspaces). */
    void observeHeld(long held) {
        synchronized (lock) {
            schedule.observeHeld(held);
        }
    }

    /** From the GC listener: a young (or mixed) collection left {@code heapAfter} bytes of heap in use. */
    void observeYoung(long heapAfter) {
        synchronized (lock) {
            schedule.observeYoung(heapAfter);
        }
    }

    /**
     * From the GC listener: a collection of the whole heap ended, with {@code heapAfter} bytes left.
     * Returns false for the agent's own inspection (which it measures itself).
     */
    boolean onFullCollection(Collection c) {
        synchronized (lock) {
            if (c.cause.equals(runningCause)) {
                held.add(c);  // the agent's call is running: filed when it returns
                return true;
            }
            return file(c);
        }
    }

    /** Files a collection whose cause may be the agent's: its own, or the job's (or jcmd's) live point. Holds {@code lock}. */
    private boolean file(Collection c) {
        java.util.Map<String, Long> own = HISTOGRAM_CAUSE.equals(c.cause) ? ownHistogram
                : RUN_CAUSE.equals(c.cause) ? ownRun : null;
        if (own != null && Long.valueOf(c.id).equals(own.get(c.collector))) {
            if (own == ownHistogram) inspectionHeapAfter = c.heapAfter;
            else runHeapAfter = c.heapAfter;
            return false;
        }
        jobCollections++;
        pendingTrigger = c.trigger;
        pendingT = c.t;
        pendingHeap = c.heapAfter;
        lock.notifyAll();
        return true;
    }

    /** Before the agent's GC.run or GC.class_histogram call. */
    private void calling(String cause) {
        synchronized (lock) {
            runningCause = cause;
        }
    }

    /** After it: the collection it caused is each collector's last; the held ones are filed now. */
    private void called(String cause) {
        synchronized (lock) {
            java.util.Map<String, Long> own = HISTOGRAM_CAUSE.equals(cause) ? ownHistogram : ownRun;
            own.clear();
            for (java.lang.management.GarbageCollectorMXBean b : ManagementFactory.getGarbageCollectorMXBeans()) {
                own.put(b.getName(), b.getCollectionCount());
            }
            runningCause = null;
            for (Collection c : held) file(c);
            held.clear();
        }
    }

    @Override
    public void run() {
        while (running) {
            try {
                String trigger;
                long t, heap;
                long due;
                synchronized (lock) {
                    long now = System.nanoTime();
                    due = intervalNanos > 0 ? schedule.nextDue(Hooks.iterations.get()) : Long.MAX_VALUE;
                    long wait = intervalNanos > 0 ? due - now : Long.MAX_VALUE;
                    if (pendingTrigger == null && wait > 0) {
                        // re-read the schedule often: a rise seen by the sampler brings the next inspection forward
                        lock.wait(Math.max(1, Math.min(wait / 1_000_000L, WAIT_SLICE_MS)));
                    }
                    trigger = pendingTrigger;
                    t = pendingT;
                    heap = pendingHeap;
                    pendingTrigger = null;
                }
                long now = System.nanoTime();
                if (intervalNanos > 0 && now >= due) {
                    // first: a job collecting every iteration has a collection pending at every turn, and the heap
                    // verdict has only inspections (a pending collection's point is dropped: this one follows it)
                    inspect();
                } else if (trigger != null) {
                    Allocations.collectionStarts();  // the collection has ended: what is allocated from now on is not its
                    // a burst of collections (JavaCPP's System.gc() retries near its limit): one point a second
                    long wait = MIN_GAP_NANOS - schedule.sinceLastPoint(now);
                    if (wait > 0) Thread.sleep(wait / 1_000_000L + 1);
                    measure(trigger, t, Math.max(0, heap - freeSpace.at(heap)), null, -1, -1, heap, false, null);
                    schedule.naturalPointTaken();
                }
            } catch (InterruptedException e) {
                return;
            } catch (Throwable e) {
                Allocations.collectionEnds();
                schedule.failed();  // never disturb the job; try later
            }
        }
    }

    /**
     * Two full collections: the first lets the deallocators free the arrays whose owners died (and
     * drop their bookkeeping: reference objects, ids, native handles, which a histogram taken at once
     * would count as live), the second is the class histogram of what is left.
     */
    private void inspect() throws Exception {
        boolean histogram = memory.getHeapMemoryUsage().getUsed() <= maxHeapForInspection;
        if (!histogram && !tooLargeNoted) {
            tooLargeNoted = true;
            sink.line(new Json().put("type", "note").put("t", System.currentTimeMillis())
                    .put("text", "heap in use over " + (maxHeapForInspection >> 20) + " MiB (live_max_heap): the agent's "
                            + "inspections take no class histogram; a second full collection instead, its usage less the "
                            + "space no object holds (fitted over the histograms)").close());
        }
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        ObjectName name = new ObjectName("com.sun.management:type=DiagnosticCommand");
        synchronized (lock) {
            inspectionHeapAfter = -1;
            jobCollectionsAtInspection = jobCollections;
        }
        Allocations.collectionStarts();
        long start = System.nanoTime();
        diagnostic(server, name, "gcRun", RUN_CAUSE);
        long pause = System.nanoTime() - start;
        // the heap's wait ends early when the job collects meanwhile: its histogram measures the bookkeeping
        boolean drained = drain.await(this::jobCollectedDuringInspection);
        long t = System.currentTimeMillis();
        if (!histogram) {
            inspectWithoutHistogram(server, name, t, pause, drained);
            return;
        }
        start = System.nanoTime();
        String text = (String) diagnostic(server, name, "gcClassHistogram", HISTOGRAM_CAUSE);
        pause += System.nanoTime() - start;
        Histogram h = Histogram.parse(text, TOP_CLASSES);
        bookkeeping = h.deallocationBookkeeping();
        measure("inspection", t, h.totalBytes, h.classesJson(), pause / 1_000_000.0, h.totalInstances, -1, drained,
                currentSuspicion());
        schedule.inspected(pause);
    }

    /** One diagnostic command of the agent's own; the collection it causes is told from the job's by id. */
    private Object diagnostic(MBeanServer server, ObjectName name, String operation, String cause) throws Exception {
        calling(cause);
        try {
            return server.invoke(name, operation, new Object[]{new String[0]}, new String[]{String[].class.getName()});
        } finally {
            called(cause);
        }
    }

    private String currentSuspicion() {
        synchronized (lock) {
            return schedule.suspicion();
        }
    }

    /**
     * Above live_max_heap a class histogram's pause grows with the heap: after the first collection and
     * the deallocators, a second full collection (which drops their bookkeeping of the arrays they freed)
     * gives the usage, and the live heap is that usage less the space no object holds, fitted over the
     * histograms taken below the bound (FreeSpace). A heap that outgrows the bound in the first seconds
     * of training still gets the points a verdict needs.
     */
    private void inspectWithoutHistogram(MBeanServer server, ObjectName name, long t, long pause, boolean drained)
            throws Exception {
        synchronized (lock) {
            runHeapAfter = -1;
        }
        long start = System.nanoTime();
        diagnostic(server, name, "gcRun", RUN_CAUSE);
        pause += System.nanoTime() - start;
        long heapAfter = -1;
        for (int i = 0; i < 40 && heapAfter < 0; i++) {   // its notification may come just after the call returns
            synchronized (lock) {
                heapAfter = runHeapAfter;
            }
            if (heapAfter < 0) Thread.sleep(DeallocatorDrain.POLL_MS);
        }
        if (heapAfter < 0) heapAfter = memory.getHeapMemoryUsage().getUsed();
        measure("inspection", t, Math.max(0, heapAfter - freeSpace.at(heapAfter)), null, pause / 1_000_000.0, -1,
                heapAfter, drained, currentSuspicion());
        schedule.inspected(pause);
    }

    private boolean jobCollectedDuringInspection() {
        synchronized (lock) {
            return jobCollections > jobCollectionsAtInspection;
        }
    }

    /** Wait for the deallocators, then write the live line and the sites still holding memory. */
    private void measure(String trigger, long t, long heapLive, String classes, double pauseMs, long instances,
                         long heapAfterGc, boolean heapDrained, String why) throws InterruptedException {
        // off-heap points wait the whole time: the off-heap verdict has no bookkeeping to take out
        boolean offheapDrained = drain.await(() -> false);
        long drainMs = drain.lastMs();
        long deallocation = classes != null ? bookkeeping : -1;
        if (classes != null) {
            synchronized (lock) {
                heapAfterGc = inspectionHeapAfter;  // the GC notification came during the drain wait, if at all
            }
            if (heapAfterGc >= heapLive) freeSpace.add(heapAfterGc, heapAfterGc - heapLive);
        }
        boolean inspection = "inspection".equals(trigger);
        boolean jobCollected = inspection && jobCollectedDuringInspection();
        long iterations = Hooks.iterations.get();
        long[] fresh = Allocations.collectionEnds();  // allocated while the deallocators caught up: not what the collection left
        long rss = sampler.rss();
        Json j = new Json().put("type", "live").put("t", t).put("trigger", trigger).put("iterations", iterations)
                .put("heap_live", heapLive).put("drain_ms", drainMs).put("rss", rss)
                // heap_live counts no bookkeeping of dead arrays only when the deallocators were done before it
                .put("heap_drained", heapDrained).put("offheap_drained", offheapDrained);
        if (heapAfterGc >= 0) j.put("heap_after_gc", heapAfterGc);
        // an inspection during which the job collected too: its deallocators may never have been idle
        if (jobCollected) j.put("job_collected", true);
        // of heap_live, ND4J's and JavaCPP's deallocation bookkeeping: it churns with every array made
        // (how much of it a histogram catches depends on how many arrays just died, not on the job's objects)
        if (deallocation >= 0) j.put("heap_bookkeeping", Math.min(deallocation, heapLive));
        if (pauseMs >= 0) j.put("pause_ms", pauseMs);
        if (why != null) j.put("why", why);
        if (instances >= 0) j.put("instances", instances);
        if (Allocations.nd4jHooked) {
            j.put("nd4j_live", Math.max(0, Allocations.nd4jLive.get() - fresh[0]))
                    .put("nd4j_live_count", Math.max(0, Allocations.nd4jLiveCount.get() - fresh[1]))
                    .put("nd4j_new", fresh[0]);
        }
        if (sampler.workspaceBytes > 0) j.put("ws_bytes", sampler.workspaceBytes);
        JavaCpp.Counters c = JavaCpp.read(rss);
        if (c != null) {
            j.put("javacpp_total", c.total);
            if (c.count >= 0) j.put("javacpp_count", c.count);
        }
        synchronized (lock) {
            // the new reference for the rise checks, and what the schedule still needs
            schedule.pointTaken(held(c, sampler.workspaceBytes) - fresh[0], heapAfterGc, iterations, t, inspection);
        }
        if (classes != null) j.raw("classes", classes);
        sink.line(j.close());
        points++;
        if (Allocations.sampling()) sink.line(Allocations.sitesLine("live", System.currentTimeMillis(), iterations, TOP_SITES));
        sink.flush();
    }

    /** The text of GC.class_histogram: its total line and its largest classes. */
    static final class Histogram {
        /** ND4J's per-object deallocation bookkeeping: the reference, its deallocator, the native handle. */
        private static final String[] ND4J_BOOKKEEPING = {
            "org.nd4j.linalg.api.memory.deallocation.DeallocatableReference", "org.nd4j.linalg.cpu.nativecpu.buffer.CpuDeallocator",
            "org.nd4j.nativeblas.OpaqueDataBuffer", "org.nd4j.nativeblas.OpaqueContext",
            "org.nd4j.linalg.cpu.nativecpu.ops.CpuOpContextDeallocator"};
        /** Per ND4J entry, besides those: its id twice (key and field: String + byte[] each) and its map node. */
        private static final long ND4J_ID_BYTES = 2 * (24 + 32) + 32;
        private static final String JAVACPP_BOOKKEEPING = "org.bytedeco.javacpp.Pointer$NativeDeallocator";
        private static final long JAVACPP_COUNT_BYTES = 16;  // its AtomicInteger reference count

        long totalBytes = -1;
        long totalInstances = -1;
        final List<String> classes = new ArrayList<>();
        private final java.util.Map<String, long[]> tracked = new java.util.HashMap<>();

        static Histogram parse(String text, int top) {
            Histogram h = new Histogram();
            for (String line : text.split("\n")) {
                String s = line.trim();
                if (s.startsWith("Total")) {
                    String[] p = s.split("\\s+");
                    if (p.length >= 3) {
                        h.totalInstances = Long.parseLong(p[1]);
                        h.totalBytes = Long.parseLong(p[2]);
                    }
                } else if (!s.isEmpty() && Character.isDigit(s.charAt(0)) && s.contains(":")) {
                    // "   1:        123456       12345678  [B (java.base@17)"
                    String[] p = s.split("\\s+", 4);
                    if (p.length == 4) {
                        String cls = p[3];
                        int module = cls.indexOf(" (");
                        if (module > 0) cls = cls.substring(0, module);
                        long instances = Long.parseLong(p[1]);
                        long bytes = Long.parseLong(p[2]);
                        h.tracked.put(cls, new long[]{instances, bytes});
                        if (h.classes.size() < top) {
                            h.classes.add(new Json().put("name", cls).put("instances", instances).put("bytes", bytes).close());
                        }
                    }
                }
            }
            if (h.totalBytes < 0) throw new IllegalStateException("no Total line in GC.class_histogram output");
            return h;
        }

        String classesJson() {
            return Json.array(classes);
        }

        /**
         * Heap bytes of ND4J's and JavaCPP's deallocation bookkeeping (reference objects, deallocators,
         * native handles, and per ND4J entry its two id strings and registry node): it churns with every
         * array created, alive or dead-but-not-yet-deallocated, and says nothing about the job's own objects.
         */
        long deallocationBookkeeping() {
            long bytes = 0;
            for (String cls : ND4J_BOOKKEEPING) {
                long[] c = tracked.get(cls);
                if (c != null) bytes += c[1];
            }
            long[] refs = tracked.get(ND4J_BOOKKEEPING[0]);
            if (refs != null) bytes += refs[0] * ND4J_ID_BYTES;
            long[] javacpp = tracked.get(JAVACPP_BOOKKEEPING);
            if (javacpp != null) bytes += javacpp[1] + javacpp[0] * JAVACPP_COUNT_BYTES;
            return bytes;
        }
    }
}
