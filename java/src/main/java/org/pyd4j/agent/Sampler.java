package org.pyd4j.agent;

import java.lang.management.BufferPoolMXBean;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.lang.management.MemoryMXBean;
import java.lang.management.MemoryPoolMXBean;
import java.lang.management.MemoryType;
import java.lang.management.MemoryUsage;
import java.lang.management.RuntimeMXBean;
import java.lang.management.ThreadMXBean;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;

import javax.management.Notification;
import javax.management.NotificationEmitter;
import javax.management.NotificationListener;
import javax.management.openmbean.CompositeData;
import javax.management.openmbean.TabularData;

/** The daemon thread that writes one "sample" line per interval, plus GC pause and error lines. */
final class Sampler implements Runnable {
    private final Sink sink;
    private final long intervalMs;
    private final boolean hooks;
    private final MemoryMXBean memory = ManagementFactory.getMemoryMXBean();
    private final ThreadMXBean threads = ManagementFactory.getThreadMXBean();
    private final List<GarbageCollectorMXBean> collectors = ManagementFactory.getGarbageCollectorMXBeans();
    private final List<BufferPoolMXBean> pools = ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class);
    private final long jvmStartMs = ManagementFactory.getRuntimeMXBean().getStartTime();
    private volatile boolean running = true;
    private volatile boolean ended;
    private Thread thread;
    private boolean javacppAnnounced;
    private final MemoryPoolMXBean oldPool = oldPool();
    /** Set by the agent: live-set points after full collections (null when off). */
    volatile LiveSet liveSet;
    private long lastAdaptNanos = System.nanoTime();
    private long peakSitesNanos;
    private long peakSitesBytes;
    private Method wsId, wsThread, wsSize, wsSpilled, wsPinned, wsMaxCycle, wsLastCycle, wsConfig, cfgInitial;
    private Class<?> wsClass;
    private long samples;
    /** The sampler thread's own CPU time, updated by it after every sample (it may be gone at exit). */
    private volatile long samplerCpuNanos = -1;
    /** Read /proc/self/smaps about every 5 s: a full parse costs several ms of CPU, and RSS alone cannot tell heap from native. */
    private final long smapsEvery;
    private final ProcessMemory process = new ProcessMemory();

    Sampler(Sink sink, long intervalMs, boolean hooks) {
        this.sink = sink;
        this.intervalMs = intervalMs;
        this.hooks = hooks;
        this.smapsEvery = Math.max(1, 5000 / Math.max(1, intervalMs));
    }

    /** The timeline's schema version (pyd4j.schemas.TIMELINE_SCHEMA), in the start line. */
    static final int TIMELINE_SCHEMA = 1;

    void begin() {
        RuntimeMXBean rt = ManagementFactory.getRuntimeMXBean();
        sink.line(new Json().put("type", "start").put("t", System.currentTimeMillis())
                .put("schema", TIMELINE_SCHEMA)
                .put("pid", ProcessHandle.current().pid())
                .raw("ancestors", Agent.ancestors())
                .put("jvm_start", jvmStartMs)
                .put("interval_ms", intervalMs)
                .put("hooks", hooks)
                .put("java_version", System.getProperty("java.version"))
                .put("command", System.getProperty("sun.java.command"))
                .raw("jvm_args", Json.strings(rt.getInputArguments()))
                .put("heap_max", Runtime.getRuntime().maxMemory())
                .put("max_direct", ProcessMemory.maxDirect())
                .put("cpus", Runtime.getRuntime().availableProcessors())
                .put("memory_limit", ProcessMemory.memoryLimit())
                .put("javacpp_maxbytes_prop", System.getProperty("org.bytedeco.javacpp.maxbytes"))
                .put("javacpp_maxphysicalbytes_prop", System.getProperty("org.bytedeco.javacpp.maxphysicalbytes"))
                .close());
        sink.flush();
        listenToGc();
        wrapUncaughtHandler();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> stop(Window.reason != null ? "window" : "exit"), "pyd4j-agent-exit"));
        thread = new Thread(this, "pyd4j-agent-sampler");
        thread.setDaemon(true);
        thread.setPriority(Thread.MAX_PRIORITY);
        thread.start();
    }

    @Override
    public void run() {
        long next = System.nanoTime();
        while (running) {
            try {
                Window.poll();
                sample(false);
                sink.flush();
                samplerCpuNanos = threads.getCurrentThreadCpuTime();
            } catch (Throwable e) {
                // a failed sample is skipped, never thrown into the job
            }
            next += intervalMs * 1_000_000L;
            long sleep = next - System.nanoTime();
            if (sleep < 0) {
                next = System.nanoTime();  // fell behind (GC pause, suspended): do not burst
                sleep = intervalMs * 1_000_000L;
            }
            try {
                Thread.sleep(sleep / 1_000_000L, (int) (sleep % 1_000_000L));
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    synchronized void stop(String reason) {
        if (ended) return;
        ended = true;
        running = false;
        LiveSet liveSetNow = liveSet;
        if (liveSetNow != null) liveSetNow.stop();
        try {
            sample(true);
        } catch (Throwable ignored) {
            // exiting
        }
        long samplerCpu = -1, processCpu = -1;
        try {
            // -1 once the sampler thread has ended: fall back to what it recorded itself.
            long live = thread != null ? threads.getThreadCpuTime(thread.getId()) : -1;
            samplerCpu = Math.max(live, samplerCpuNanos);
            java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
            if (os instanceof com.sun.management.OperatingSystemMXBean) processCpu = ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
        } catch (Throwable ignored) {
            // CPU accounting not supported here
        }
        if (Allocations.sampling()) {
            try {
                sink.line(Allocations.sitesLine("end", System.currentTimeMillis(), Hooks.iterations.get(), 30));
            } catch (Throwable ignored) {
                // exiting
            }
        }
        // The agent's own cost, independent of machine load: sampler CPU over the process's CPU.
        sink.line(new Json().put("type", "end").put("t", System.currentTimeMillis()).put("reason", reason)
                .put("samples", samples).put("iterations", Hooks.iterations.get())
                .put("sampler_cpu_ns", samplerCpu).put("process_cpu_ns", processCpu).close());
        sink.close();
    }

    private synchronized void sample(boolean last) {
        long now = System.currentTimeMillis();
        MemoryUsage heap = memory.getHeapMemoryUsage();
        MemoryUsage nonHeap = memory.getNonHeapMemoryUsage();
        Json j = new Json().put("type", "sample").put("t", now)
                .put("heap_used", heap.getUsed()).put("heap_committed", heap.getCommitted()).put("heap_max", heap.getMax())
                .put("nonheap_used", nonHeap.getUsed()).put("nonheap_committed", nonHeap.getCommitted());
        StringBuilder gc = new StringBuilder("{");
        for (int i = 0; i < collectors.size(); i++) {
            GarbageCollectorMXBean c = collectors.get(i);
            if (i > 0) gc.append(',');
            Json.str(gc, c.getName());
            gc.append(":[").append(c.getCollectionCount()).append(',').append(c.getCollectionTime()).append(']');
        }
        j.raw("gc", gc.append('}').toString());
        for (BufferPoolMXBean pool : pools) {
            String name = pool.getName();
            if (name.equals("direct") || name.equals("mapped")) {
                j.put(name + "_used", pool.getMemoryUsed()).put(name + "_capacity", pool.getTotalCapacity()).put(name + "_count", pool.getCount());
            }
        }
        if (oldPool != null) j.put("old_used", oldPool.getUsage().getUsed());
        long rss = rss();
        j.put("rss", rss).put("threads", threads.getThreadCount());
        if (last || samples % smapsEvery == 0) {
            long heapRss = process.heapResident();
            if (heapRss >= 0) j.put("heap_rss", heapRss);
        }
        JavaCpp.Counters cpp = javacpp(j, rss);
        Allocations.counters(j);
        j.put("iterations", Hooks.iterations.get());
        double score = Hooks.lastScore;
        if (!Double.isNaN(score)) j.put("score", score);
        if (hooks) workspaces(j);
        LiveSet live = liveSet;
        if (live != null) {
            j.put("live_points", live.points);
            if (Allocations.nd4jHooked || cpp != null) live.observeHeld(LiveSet.held(cpp, workspaceBytes));
        }
        samples++;
        sink.line(j.close());
        if (Allocations.sampling()) sitesAtPeak(now, cpp);
    }

    /**
     * Once a second, adapt the sampling mean to the allocation rate; when off-heap memory in use
     * (libnd4j buffers + JavaCPP bytes) reaches a new high (5% over the last one, at most every 2 s),
     * write the sites holding it: the breakdown of the peak by call site.
     */
    private void sitesAtPeak(long now, JavaCpp.Counters cpp) {
        long nanos = System.nanoTime();
        if (nanos - lastAdaptNanos >= 1_000_000_000L) {
            Allocations.adapt((nanos - lastAdaptNanos) / 1e9);
            lastAdaptNanos = nanos;
        }
        long inUse = Allocations.nd4jLive.get() + (cpp != null ? cpp.total : 0);
        if (inUse > peakSitesBytes * 1.05 && nanos - peakSitesNanos >= 2_000_000_000L && inUse >= (16L << 20)) {
            peakSitesBytes = inUse;
            peakSitesNanos = nanos;
            sink.line(Allocations.sitesLine("peak", now, Hooks.iterations.get(), 20));
        }
    }

    /** JavaCPP's counters, all of them or none (see {@link JavaCpp}). */
    private JavaCpp.Counters javacpp(Json j, long rss) {
        JavaCpp.Counters c = JavaCpp.read(rss);
        if (c == null) return null;
        c.into(j);
        if (!javacppAnnounced) {
            javacppAnnounced = true;
            sink.line(new Json().put("type", "javacpp").put("t", System.currentTimeMillis())
                    .put("max_bytes", c.max).put("max_physical_bytes", c.maxPhysical).close());
        }
        return c;
    }

    private static final int MAX_WORKSPACES_WRITTEN = 32;

    /** Bytes ND4J's workspaces hold (their current sizes) at the last sample; workspace memory is neither a libnd4j buffer nor a JavaCPP Pointer. */
    volatile long workspaceBytes;

    private void workspaces(Json j) {
        List<Object> live = Hooks.liveWorkspaces();
        if (live.isEmpty()) {
            workspaceBytes = 0;
            return;
        }
        long total = 0;
        List<long[]> order = new ArrayList<>();  // (size, index in items): only the largest are written
        List<String> items = new ArrayList<>();
        for (Object ws : live) {
            try {
                if (wsClass == null) {
                    Class<?> base = ws.getClass();
                    while (base != null && !base.getName().equals("org.nd4j.linalg.api.memory.abstracts.Nd4jWorkspace")) base = base.getSuperclass();
                    if (base == null) continue;
                    wsClass = base;
                    wsId = base.getMethod("getId");
                    wsThread = base.getMethod("getThreadId");
                    wsSize = base.getMethod("getCurrentSize");
                    wsSpilled = base.getMethod("getSpilledSize");
                    wsPinned = base.getMethod("getPinnedSize");
                    wsMaxCycle = base.getMethod("getMaxCycleAllocations");
                    wsLastCycle = base.getMethod("getLastCycleAllocations");
                    wsConfig = base.getMethod("getWorkspaceConfiguration");
                }
                Object cfg = wsConfig.invoke(ws);
                long size = (Long) wsSize.invoke(ws);
                if (cfgInitial == null && cfg != null) cfgInitial = cfg.getClass().getMethod("getInitialSize");
                Json w = new Json().put("id", String.valueOf(wsId.invoke(ws)))
                        .put("thread", String.valueOf(wsThread.invoke(ws)))
                        .put("size", size)
                        .put("spilled", (Long) wsSpilled.invoke(ws))
                        .put("pinned", (Long) wsPinned.invoke(ws))
                        .put("max_cycle", (Long) wsMaxCycle.invoke(ws))
                        .put("last_cycle", (Long) wsLastCycle.invoke(ws));
                if (cfg != null && cfgInitial != null) w.put("initial", ((Number) cfgInitial.invoke(cfg)).longValue());
                String site = Hooks.workspaceSite(ws);
                if (site != null) w.put("site", site);
                order.add(new long[]{size, items.size()});
                items.add(w.close());
                total += size;
            } catch (Throwable ignored) {
                // a workspace being destroyed right now: skip it this tick
            }
        }
        if (items.size() > MAX_WORKSPACES_WRITTEN) {
            // a job opening workspaces without end: the largest ones in detail, all of them in the totals
            order.sort((a, b) -> Long.compare(b[0], a[0]));
            List<String> largest = new ArrayList<>();
            for (int i = 0; i < MAX_WORKSPACES_WRITTEN; i++) largest.add(items.get((int) order.get(i)[1]));
            items = largest;
        }
        j.raw("ws", Json.array(items)).put("ws_bytes", total).put("ws_count", order.size());
        workspaceBytes = total;
    }

    /**
     * One "gc" line per collection, with its kind: {@code young}; {@code mixed} (G1 collected old regions
     * too: the old generation shrank); {@code full} (the whole heap: what is left is the live set);
     * {@code cycle} (a ZGC/Shenandoah cycle marks the whole heap). Full collections and cycles become
     * live-set points ({@link LiveSet}).
     */
    private void listenToGc() {
        NotificationListener listener = (Notification n, Object handback) -> {
            if (!"com.sun.management.gc.notification".equals(n.getType())) return;
            try {
                CompositeData data = (CompositeData) n.getUserData();
                CompositeData info = (CompositeData) data.get("gcInfo");
                long start = (Long) info.get("startTime");
                long duration = (Long) info.get("duration");
                String name = (String) data.get("gcName");
                String action = (String) data.get("gcAction");
                String cause = (String) data.get("gcCause");
                TabularData before = (TabularData) info.get("memoryUsageBeforeGc");
                TabularData after = (TabularData) info.get("memoryUsageAfterGc");
                long heapAfter = used(after);
                long oldBefore = oldUsed(before);
                long oldAfter = oldUsed(after);
                String kind = gcKind(name, action, oldBefore, oldAfter);
                long t = jvmStartMs + start;
                Json j = new Json().put("type", "gc").put("t", t).put("name", name).put("action", action)
                        .put("cause", cause).put("kind", kind).put("duration_ms", duration)
                        .put("heap_before", used(before)).put("heap_after", heapAfter);
                if (oldBefore >= 0) j.put("old_before", oldBefore).put("old_after", oldAfter);
                sink.line(j.close());
                LiveSet live = liveSet;
                if (live != null && (kind.equals("full") || kind.equals("cycle"))) {
                    live.onFullCollection(new LiveSet.Collection(kind.equals("full") ? "full-gc" : "gc-cycle", String.valueOf(cause),
                            name, (Long) info.get("id"), t + duration, heapAfter));
                } else if (live != null) {
                    live.observeYoung(heapAfter);
                }
            } catch (Throwable ignored) {
                // unknown notification layout: pauses stay in the per-collector counters
            }
        };
        for (GarbageCollectorMXBean c : collectors) {
            if (c instanceof NotificationEmitter) ((NotificationEmitter) c).addNotificationListener(listener, null, null);
        }
    }

    static String gcKind(String name, String action, long oldBefore, long oldAfter) {
        if (action != null && action.contains("major")) return "full";
        if (name != null && name.endsWith("Cycles")) return "cycle";
        if (oldBefore >= 0 && oldAfter < oldBefore) return "mixed";
        return "young";
    }

    /** Old-generation pool of the heap ("G1 Old Gen", "PS Old Gen", "Tenured Gen"...), if the collector has one. */
    private static MemoryPoolMXBean oldPool() {
        for (MemoryPoolMXBean p : ManagementFactory.getMemoryPoolMXBeans()) {
            if (p.getType() == MemoryType.HEAP && isOld(p.getName())) return p;
        }
        return null;
    }

    private static boolean isOld(String pool) {
        return pool.contains("Old") || pool.contains("Tenured");
    }

    private static long oldUsed(TabularData usage) {
        for (Object row : usage.values()) {
            CompositeData entry = (CompositeData) row;
            if (isOld(String.valueOf(entry.get("key")))) return (Long) ((CompositeData) entry.get("value")).get("used");
        }
        return -1;
    }

    private static long used(TabularData usage) {
        long sum = 0;
        for (Object row : usage.values()) {
            CompositeData entry = (CompositeData) row;
            String pool = String.valueOf(entry.get("key"));
            if (pool.contains("Metaspace") || pool.contains("Code") || pool.contains("Compressed Class")) continue;
            sum += (Long) ((CompositeData) entry.get("value")).get("used");
        }
        return sum;
    }

    /** Record uncaught errors (an OutOfMemoryError ending main, say) before the JVM prints them. */
    private void wrapUncaughtHandler() {
        Thread.UncaughtExceptionHandler previous = Thread.getDefaultUncaughtExceptionHandler();
        Thread.setDefaultUncaughtExceptionHandler((t, e) -> {
            try {
                sink.line(new Json().put("type", "error").put("t", System.currentTimeMillis())
                        .put("thread", t.getName()).put("class", e.getClass().getName())
                        .put("message", String.valueOf(e.getMessage()))
                        .put("cause", rootCause(e)).close());
                sink.flush();
            } catch (Throwable ignored) {
                // keep the job's own error reporting intact
            }
            if (previous != null) {
                previous.uncaughtException(t, e);
            } else {
                System.err.print("Exception in thread \"" + t.getName() + "\" ");
                e.printStackTrace(System.err);
            }
        });
    }

    private static String rootCause(Throwable e) {
        Throwable c = e;
        while (c.getCause() != null && c.getCause() != c) c = c.getCause();
        return c == e ? null : c.getClass().getName() + ": " + c.getMessage();
    }

    /** Resident bytes of the process, or -1 (the live-set points read it too). */
    long rss() {
        return process.rss();
    }
}
