package org.pyd4j.agent;

import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Off-heap allocations the job makes, by allocator, and where they were made.
 *
 * <p>Two allocators, told apart because different limits bind them (checked on ND4J 1.0.0-M2.1):
 * <ul>
 *   <li>{@code nd4j}: array buffers libnd4j allocates itself ({@code OpaqueDataBuffer.allocateDataBuffer});
 *       JavaCPP does not count them, so {@code maxbytes} never binds them, only process RSS limits do;</li>
 *   <li>{@code javacpp}: JavaCPP Pointers with a deallocator (an array built from a Java array,
 *       {@code new FloatPointer(n)}, ...); they count against {@code maxbytes}.</li>
 * </ul>
 * Counters are exact (every allocation and free is hooked). Call sites are sampled by bytes, as heap
 * profilers do: each allocated byte is picked with probability 1/mean, so an allocation of {@code b}
 * bytes is sampled with probability {@code 1 - exp(-b/mean)} and stands for {@code b / p} bytes (an
 * unbiased estimate). Samples stay "live" until their buffer is freed, which is how a site's kept
 * bytes are known. The mean adapts once a second so that at most about {@link #TARGET_SAMPLES_PER_S}
 * stacks are walked per second, whatever the allocation rate. Which frame of a stack is the job's own
 * line is {@link UserCode}'s to tell.
 */
final class Allocations {
    static final int ND4J = 0;
    static final int JAVACPP = 1;
    static final String[] KIND_NAMES = {"nd4j", "javacpp"};
    static final long DEFAULT_MEAN_BYTES = 256 * 1024;
    static final long TARGET_SAMPLES_PER_S = 100;
    private static final int MAX_SITES = 4096;
    private static final int STACK_FRAMES = 6;
    private static final String OTHER = "(other sites)";

    // -- exact counters ------------------------------------------------------------------------
    static final AtomicLong nd4jLive = new AtomicLong();
    static final AtomicLong nd4jLiveCount = new AtomicLong();
    static final AtomicLong nd4jPeak = new AtomicLong();
    static final AtomicLong nd4jAllocated = new AtomicLong();
    static final AtomicLong nd4jFreed = new AtomicLong();
    static final AtomicLong javacppAllocated = new AtomicLong();
    static final AtomicLong javacppFreed = new AtomicLong();
    static final AtomicLong javacppPeak = new AtomicLong();
    static final AtomicLong javacppLargest = new AtomicLong();
    /** Set once the first ND4J buffer hook ran: the nd4j counters mean something. */
    static volatile boolean nd4jHooked;
    /** libnd4j buffer sizes by the address of their OpaqueDataBuffer, to subtract the right size on free. */
    private static final ConcurrentHashMap<Long, Long> nd4jSizes = new ConcurrentHashMap<>();

    /**
     * While the agent measures what a full collection left (from just before the collection until the
     * reading, which waits for ND4J's deallocators): the libnd4j buffers allocated meanwhile, by address,
     * and their bytes still live. The job goes on allocating during that wait (a Spark executor 40 MiB/s),
     * and what it allocated after the collection is not what the collection left. Null between readings.
     */
    private static volatile ConcurrentHashMap<Long, Long> sinceCollection;
    private static final AtomicLong nd4jSinceCollection = new AtomicLong();

    /** Just before the collection a live point measures: buffers allocated from now on are told apart. */
    static void collectionStarts() {
        nd4jSinceCollection.set(0);
        sinceCollection = new ConcurrentHashMap<>();
    }

    /** At the reading: {bytes, count} of the buffers allocated since collectionStarts() and still live; stops telling them apart. */
    static long[] collectionEnds() {
        ConcurrentHashMap<Long, Long> m = sinceCollection;
        sinceCollection = null;
        return m == null ? new long[]{0, 0} : new long[]{Math.max(0, nd4jSinceCollection.get()), m.size()};
    }

    /** ND4J's DeallocatorService and its map of registered (not yet deallocated) objects. */
    static volatile Object deallocatorService;
    private static volatile Map<?, ?> registered;

    static synchronized void watchDeallocatorService(Object service) throws ReflectiveOperationException {
        if (deallocatorService != null) return;
        java.lang.reflect.Field f = service.getClass().getDeclaredField("referenceMap");
        f.setAccessible(true);
        registered = (Map<?, ?>) f.get(service);
        deallocatorService = service;
    }

    /**
     * ND4J objects (buffers, op contexts) whose owner the collector found dead but whose deallocator
     * has not run yet: entries of ND4J's registry whose weak reference is cleared. Until their
     * deallocator runs, their bookkeeping (the reference, its id, the native handle) is still
     * reachable, so a heap histogram would count it as live. -1 when ND4J's registry is not known.
     */
    static long nd4jAwaitingDeallocator() {
        Map<?, ?> m = registered;
        if (m == null) return -1;
        long dead = 0;
        for (Object ref : m.values()) {
            if (ref instanceof java.lang.ref.Reference && ((java.lang.ref.Reference<?>) ref).get() == null) dead++;
        }
        return dead;
    }

    static long nd4jRegistered() {
        Map<?, ?> m = registered;
        return m == null ? -1 : m.size();
    }

    // -- sampled call sites --------------------------------------------------------------------
    /** Mean bytes between samples; 0 turns site sampling off. */
    static volatile long meanBytes;
    private static volatile long minMeanBytes;
    private static final AtomicLong countdown = new AtomicLong(Long.MAX_VALUE);
    private static final AtomicLong bytesThisSecond = new AtomicLong();
    private static final ConcurrentHashMap<String, Site> sites = new ConcurrentHashMap<>();
    private static final ConcurrentHashMap<Long, Sample> sampledNd4j = new ConcurrentHashMap<>();
    private static final Map<Object, Sample> sampledJavacpp = Collections.synchronizedMap(new IdentityHashMap<>());

    private Allocations() {
    }

    /** Turn site sampling on with this mean (bytes), or off with 0. */
    static void sampleEvery(long mean) {
        minMeanBytes = Math.max(0, mean);
        meanBytes = minMeanBytes;
        countdown.set(mean > 0 ? nextInterval(mean) : Long.MAX_VALUE);
    }

    /** Once a second (sampler thread): raise the mean when allocations are fast, so stack walks stay bounded. */
    static void adapt(double seconds) {
        long min = minMeanBytes;
        if (min <= 0 || seconds <= 0) return;
        long rate = (long) (bytesThisSecond.getAndSet(0) / seconds);
        meanBytes = Math.max(min, rate / TARGET_SAMPLES_PER_S);
    }

    // -- libnd4j buffers -----------------------------------------------------------------------

    /** A libnd4j buffer of {@code bytes} was allocated (OpaqueDataBuffer at {@code address}). */
    static void nd4jAllocated(long address, long bytes) {
        nd4jHooked = true;
        if (address == 0 || bytes <= 0) return;
        Long old = nd4jSizes.put(address, bytes);
        if (old != null) forgetNd4j(address, old);  // freed by a path we do not hook: address reused
        long live = nd4jLive.addAndGet(bytes);
        nd4jLiveCount.incrementAndGet();
        nd4jAllocated.addAndGet(bytes);
        ConcurrentHashMap<Long, Long> fresh = sinceCollection;
        if (fresh != null) {
            fresh.put(address, bytes);
            nd4jSinceCollection.addAndGet(bytes);
        }
        raise(nd4jPeak, live);
        Sample s = maybeSample(ND4J, bytes);
        if (s != null) {
            Sample previous = sampledNd4j.put(address, s);
            if (previous != null) previous.free();
        }
    }

    /** The libnd4j buffer at {@code address} was freed (closed, deallocated, or its memory replaced). */
    static void nd4jFreed(long address) {
        Long bytes = nd4jSizes.remove(address);
        if (bytes != null) forgetNd4j(address, bytes);
    }

    private static void forgetNd4j(long address, long bytes) {
        nd4jLive.addAndGet(-bytes);
        nd4jLiveCount.decrementAndGet();
        nd4jFreed.addAndGet(bytes);
        ConcurrentHashMap<Long, Long> fresh = sinceCollection;
        if (fresh != null && fresh.remove(address) != null) nd4jSinceCollection.addAndGet(-bytes);
        if (!sampledNd4j.isEmpty()) {
            Sample s = sampledNd4j.remove(address);
            if (s != null) s.free();
        }
    }

    // -- JavaCPP pointers ----------------------------------------------------------------------

    /** A JavaCPP Pointer of {@code bytes} registered its deallocator; JavaCPP's totalBytes is now {@code total}. */
    static void javacppAdded(Object reference, long bytes, long total) {
        if (bytes <= 0) return;
        javacppAllocated.addAndGet(bytes);
        raise(javacppPeak, total);
        raise(javacppLargest, bytes);
        Sample s = maybeSample(JAVACPP, bytes);
        if (s != null) sampledJavacpp.put(reference, s);
    }

    /** A JavaCPP Pointer's memory was released. */
    static void javacppRemoved(Object reference, long bytes) {
        javacppFreed.addAndGet(Math.max(0, bytes));
        if (!sampledJavacpp.isEmpty()) {
            Sample s = sampledJavacpp.remove(reference);
            if (s != null) s.free();
        }
    }

    private static void raise(AtomicLong max, long value) {
        long current;
        while (value > (current = max.get())) {
            if (max.compareAndSet(current, value)) return;
        }
    }

    // -- sampling ------------------------------------------------------------------------------

    private static long nextInterval(long mean) {
        double u = ThreadLocalRandom.current().nextDouble();
        return Math.max(1, (long) (-Math.log(1 - u) * mean));
    }

    private static Sample maybeSample(int kind, long bytes) {
        long mean = meanBytes;
        if (mean <= 0) return null;
        bytesThisSecond.addAndGet(bytes);
        if (countdown.addAndGet(-bytes) > 0) return null;
        countdown.set(nextInterval(mean));
        double p = -Math.expm1(-(double) bytes / mean);
        double weight = p > 0 ? bytes / p : bytes;
        try {
            Site site = siteHere(kind);
            site.sampled(weight, bytes);
            return new Sample(site, weight);
        } catch (Throwable e) {
            return null;  // never disturb the job
        }
    }

    /** The first frame outside the libraries (the user's line), the library call it made, and a few callers. */
    private static Site siteHere(int kind) {
        List<StackWalker.StackFrame> frames = UserCode.callerFrames();
        int user = -1;
        for (int i = 0; i < frames.size(); i++) {
            if (UserCode.isUser(frames.get(i))) {
                user = i;
                break;
            }
        }
        String where;
        String via = "";
        List<String> stack = new ArrayList<>();
        if (user >= 0) {
            where = UserCode.describe(frames.get(user));
            if (user > 0) via = frames.get(user - 1).getClassName() + "." + frames.get(user - 1).getMethodName();
            for (int i = user; i < frames.size() && stack.size() < STACK_FRAMES; i++) stack.add(UserCode.describe(frames.get(i)));
        } else {
            // No user frame within reach (a library thread, e.g. an async prefetch thread): name the
            // deepest frame walked, so such allocations still group by where they come from.
            StackWalker.StackFrame outer = frames.isEmpty() ? null : frames.get(frames.size() - 1);
            where = outer == null ? "(unknown)" : UserCode.describe(outer);
            for (int i = 0; i < frames.size() && stack.size() < STACK_FRAMES; i++) {
                if (!frames.get(i).getClassName().startsWith("org.pyd4j.agent.")) stack.add(UserCode.describe(frames.get(i)));
            }
        }
        String key = kind + "|" + where + "|" + via;
        Site site = sites.get(key);
        if (site != null) return site;
        if (sites.size() >= MAX_SITES) return sites.computeIfAbsent(kind + "|" + OTHER, k -> new Site(kind, OTHER, "", false, List.of()));
        boolean isUser = user >= 0;
        String viaFinal = via;
        return sites.computeIfAbsent(key, k -> new Site(kind, where, viaFinal, isUser, stack));
    }

    // -- output --------------------------------------------------------------------------------

    /** The counters, as sample fields. */
    static void counters(Json j) {
        if (nd4jHooked) {
            j.put("nd4j_live", nd4jLive.get()).put("nd4j_live_count", nd4jLiveCount.get())
                    .put("nd4j_peak", nd4jPeak.get()).put("nd4j_allocated", nd4jAllocated.get());
        }
        long allocated = javacppAllocated.get();
        if (allocated > 0) {
            j.put("javacpp_allocated", allocated).put("javacpp_peak", javacppPeak.get())
                    .put("javacpp_largest", javacppLargest.get());
        }
    }

    /** Bytes freed so far by either allocator: rises while deallocators catch up after a GC. */
    static long freedSoFar() {
        return nd4jFreed.get() + javacppFreed.get();
    }

    /** A "sites" line: the sites holding the most live (kept) bytes, then the ones allocating the most. */
    static String sitesLine(String reason, long t, long iterations, int top) {
        List<Site> all = new ArrayList<>(sites.values());
        List<Site> chosen = new ArrayList<>();
        all.sort((a, b) -> Double.compare(b.liveBytes, a.liveBytes));
        for (Site s : all) {
            if (chosen.size() >= top || s.liveBytes <= 0) break;
            chosen.add(s);
        }
        all.sort((a, b) -> Double.compare(b.allocBytes, a.allocBytes));
        for (Site s : all) {
            if (chosen.size() >= 2 * top) break;
            if (!chosen.contains(s)) chosen.add(s);
        }
        List<String> items = new ArrayList<>();
        for (Site s : chosen) items.add(s.json());
        return new Json().put("type", "sites").put("t", t).put("reason", reason).put("iterations", iterations)
                .put("mean_bytes", meanBytes).put("site_count", sites.size()).raw("sites", Json.array(items)).close();
    }

    static boolean sampling() {
        return minMeanBytes > 0;
    }

    /** One call site: what its sampled allocations stand for, and how much of it is still held. */
    static final class Site {
        final int kind;
        final String where;
        final String via;
        final boolean user;
        final List<String> stack;
        long samples;
        long liveSamples;
        double allocBytes;
        double liveBytes;
        long largest;

        Site(int kind, String where, String via, boolean user, List<String> stack) {
            this.kind = kind;
            this.where = where;
            this.via = via;
            this.user = user;
            this.stack = stack;
        }

        synchronized void sampled(double weight, long bytes) {
            samples++;
            liveSamples++;
            allocBytes += weight;
            liveBytes += weight;
            largest = Math.max(largest, bytes);
        }

        synchronized void freed(double weight) {
            liveSamples--;
            liveBytes = Math.max(0, liveBytes - weight);
        }

        synchronized String json() {
            return new Json().put("kind", KIND_NAMES[kind]).put("site", where).put("via", via).put("user", user)
                    .raw("stack", Json.strings(stack))
                    .put("live_bytes", Math.round(liveBytes)).put("live_samples", liveSamples)
                    .put("alloc_bytes", Math.round(allocBytes)).put("samples", samples).put("largest", largest).close();
        }
    }

    /** One sampled allocation, until its memory is freed. */
    static final class Sample {
        final Site site;
        final double weight;

        Sample(Site site, double weight) {
            this.site = site;
            this.weight = weight;
        }

        void free() {
            site.freed(weight);
        }
    }
}
