package org.pyd4j.agent;

import java.lang.ref.WeakReference;
import java.lang.reflect.Method;
import java.util.Collections;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * ND4J settings that the job's code does not see: pyd4j tune --speed tries them as changes. At the
 * entry of every fit() (so the job's own calls before it are overridden) this sets ND4J's memory
 * manager periodic GC ({@code nd4j_periodic_gc=true|false}) and its window
 * ({@code nd4j_gc_window=ms}), and the network's training workspace mode ({@code workspace_mode=ENABLED|NONE},
 * on its configuration, which DL4J reads at each fit); once, before applying anything, it reports what
 * the job had set (periodic GC, window, ND4J threads, cores, the first network's training workspace
 * mode) as a {@code note} line with an {@code nd4j} object. {@code prefetch=N} wraps the iterator fit()
 * receives in ND4J's async prefetcher ({@link #iterator}). On the CPU backend of 1.0.0-M2.1 periodic
 * GC is off whatever the job asks ({@code CpuMemoryManager.isPeriodicGcActive()} returns false).
 * ND4J is reached by reflection on the model's class loader: the agent itself needs no ND4J.
 */
final class SpeedSettings {
    static volatile Boolean periodicGc;
    static volatile Integer gcWindowMs;
    static volatile String workspaceMode;
    /** prefetch=N: wrap the iterator fit() receives in ND4J's async prefetcher with a queue of N batches. */
    static volatile Integer prefetchDepth;
    static final int MAX_PREFETCH = 64;
    private static final AtomicBoolean reported = new AtomicBoolean();
    private static final Set<String> iteratorsReported = ConcurrentHashMap.newKeySet();
    /** The prefetcher made for each of the job's iterators, reused at its next fit() (the next epoch), as
     *  a user who wraps it once would: one prefetch thread at a time, reset by fit() between epochs.
     *  Weak both ways: the prefetcher holds the iterator, so it must not be held strongly here. */
    private static final Map<Object, WeakReference<Object>> wrappers = Collections.synchronizedMap(new WeakHashMap<>());

    private SpeedSettings() {
    }

    static void configure(Map<String, String> opts) {
        String periodic = opts.get("nd4j_periodic_gc");
        if (periodic != null) {
            if (!periodic.equals("true") && !periodic.equals("false"))
                throw new IllegalArgumentException("nd4j_periodic_gc=" + periodic + "; use true or false");
            periodicGc = Boolean.valueOf(periodic);
        }
        String window = opts.get("nd4j_gc_window");
        if (window != null) {
            int ms = Integer.parseInt(window);
            if (ms < 1) throw new IllegalArgumentException("nd4j_gc_window=" + ms + " ms; use 1 ms or more");
            gcWindowMs = ms;
        }
        String mode = opts.get("workspace_mode");
        if (mode != null) {
            if (!mode.equals("ENABLED") && !mode.equals("NONE"))
                throw new IllegalArgumentException("workspace_mode=" + mode + "; use ENABLED or NONE");
            workspaceMode = mode;
        }
        String prefetch = opts.get("prefetch");
        if (prefetch != null) {
            int depth;
            try {
                depth = Integer.parseInt(prefetch);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("prefetch=" + prefetch + " is not a number of batches; use 1 to " + MAX_PREFETCH);
            }
            if (depth < 1 || depth > MAX_PREFETCH)
                throw new IllegalArgumentException("prefetch=" + depth + " batches; use 1 to " + MAX_PREFETCH);
            prefetchDepth = depth;
        }
    }

    /**
     * native_jar=PATH: a jar of an nd4j-native build (the avx2 or avx512 classifier) added to the class
     * path the job's classes are looked up on, before any is loaded. JavaCPP loads the most specific
     * build it finds for this platform, so the job runs that build with its own class path unchanged,
     * whatever launched it (java -cp, a fat jar, Maven, Spark's driver). The build ND4J really loaded
     * is reported at the first fit() ({@code native_library}): tune --speed checks it.
     */
    static void addNativeJar(String paths, java.lang.instrument.Instrumentation inst) {
        if (inst == null) {
            throw new IllegalArgumentException("native_jar= needs the agent started with -javaagent (the build is "
                    + "chosen before ND4J loads)");
        }
        for (String path : paths.split(java.io.File.pathSeparator)) {
            java.io.File file = new java.io.File(path);
            if (!file.isFile()) throw new IllegalArgumentException("native_jar=" + path + " is not a file");
            try {
                inst.appendToSystemClassLoaderSearch(new java.util.jar.JarFile(file));
            } catch (java.io.IOException e) {
                throw new IllegalArgumentException("native_jar=" + path + " is not a readable jar (" + e.getMessage() + ")");
            }
        }
    }

    /**
     * The native libraries JavaCPP loaded that say which build and BLAS run: ND4J's CPU backend
     * ({@code nd4jcpu}) and the BLAS it calls ({@code openblas_nolapack}: OpenBLAS's own file, or, under
     * {@code -Dorg.bytedeco.openblas.load=mkl_rt}, the link JavaCPP makes to MKL's), by name ("" where none).
     */
    private static Map<String, String> nativeLibraries(ClassLoader loader) {
        Map<String, String> out = new java.util.HashMap<>();
        out.put("nd4jcpu", "");
        out.put("openblas_nolapack", "");
        out.put("mkl_rt", "");
        try {
            Class<?> javacppLoader = Class.forName("org.bytedeco.javacpp.Loader", false, loader);
            Object loaded = javacppLoader.getMethod("getLoadedLibraries").invoke(null);
            for (Map.Entry<?, ?> e : ((Map<?, ?>) loaded).entrySet()) {
                String name = String.valueOf(e.getKey());
                int at = name.indexOf('@');
                if (at >= 0) name = name.substring(0, at);
                if (out.containsKey(name) && e.getValue() != null) out.put(name, String.valueOf(e.getValue()));
            }
        } catch (Throwable e) {
            // no JavaCPP on this class loader: nothing loaded that we can tell
        }
        return out;
    }

    /**
     * Called on entry of MultiLayerNetwork.fit(DataSetIterator) and ComputationGraph.fit(MultiDataSetIterator)
     * (the calls every other iterator fit() ends in) with the iterator it received; returns the iterator
     * fit() goes on with. DL4J's fit() prefetches (a queue of 2, on a thread of its own) only iterators whose
     * {@code asyncSupported()} is true; many users' iterators answer false (their own classes, or loaders
     * that are not thread-safe), and then fit() calls their next() on the training thread. With prefetch=N
     * the iterator is wrapped in ND4J's AsyncDataSetIterator / AsyncMultiDataSetIterator (queue N, with a
     * workspace, as fit() itself does), whatever it answers: fit() then sees an iterator that is already
     * async (its asyncSupported() is false) and does not wrap it again; the prefetch thread ends when the
     * iterator runs out, and at the next fit() with the same iterator the same prefetcher is handed over
     * and fit() resets it (which resets the iterator) for the next epoch. An iterator that is already one of these
     * prefetchers is left as it is. Once per iterator class, a note says what the iterator is, whether fit()
     * prefetches it itself, and what the agent did.
     */
    static Object iterator(Object model, Object it) {
        PrefetchGuard.fitting();
        if (it == null) return null;
        Object out = it;
        String done;
        Integer depth = prefetchDepth;
        boolean async = false;
        try {
            ClassLoader loader = model.getClass().getClassLoader();
            boolean multi = Class.forName("org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator", false, loader).isInstance(it);
            String api = multi ? "org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator" : "org.nd4j.linalg.dataset.api.iterator.DataSetIterator";
            // through the interface: the job's iterator class is often not public (a nested class)
            async = (Boolean) Class.forName(api, false, loader).getMethod("asyncSupported").invoke(it);
            Class<?> prefetcher = Class.forName(multi ? "org.nd4j.linalg.dataset.AsyncMultiDataSetIterator"
                    : "org.nd4j.linalg.dataset.AsyncDataSetIterator", true, loader);
            if (prefetcher.isInstance(it)) {
                done = "already an async prefetcher: left as it is";
            } else if (depth == null) {
                done = async ? "fit() prefetches it (queue of 2)" : "fit() calls its next() on the training thread (no prefetch)";
            } else {
                WeakReference<Object> earlier = wrappers.get(it);
                out = earlier != null ? earlier.get() : null;
                if (out == null) {
                    out = prefetcher.getConstructor(Class.forName(api, false, loader), int.class, boolean.class).newInstance(it, depth, true);
                    wrappers.put(it, new WeakReference<>(out));
                }
                done = "wrapped by the agent in " + prefetcher.getSimpleName() + " (queue of " + depth + ")";
            }
        } catch (Throwable e) {
            done = "could not " + (depth == null ? "read" : "wrap") + " it (" + (e.getCause() != null ? e.getCause() : e)
                    + "): fit() goes on with it as it is";
            out = it;
        }
        String name = it.getClass().getName();
        Sink s = Hooks.sink;
        if (s != null && iteratorsReported.add(name)) {
            s.line(new Json().put("type", "note").put("t", System.currentTimeMillis())
                    .put("text", "fit() iterator " + name + ": asyncSupported() " + async + "; " + done)
                    .raw("iterator", new Json().put("class", name).put("async_supported", async)
                            .put("prefetch", out != it ? depth : -1).put("action", done).close()).close());
        }
        return out;
    }

    /** Called on entry of every fit(): report once, then apply what was asked. */
    static void apply(Object model) {
        boolean first = reported.compareAndSet(false, true);
        if (!first && periodicGc == null && gcWindowMs == null && workspaceMode == null) return;
        try {
            ClassLoader loader = model.getClass().getClassLoader();
            Class<?> nd4j = Class.forName("org.nd4j.linalg.factory.Nd4j", false, loader);
            Class<?> managerType = Class.forName("org.nd4j.linalg.api.memory.MemoryManager", false, loader);
            Object manager = nd4j.getMethod("getMemoryManager").invoke(null);
            if (first) report(nd4j, managerType, manager, loader, model);
            if (gcWindowMs != null) managerType.getMethod("setAutoGcWindow", int.class).invoke(manager, gcWindowMs);
            if (periodicGc != null) managerType.getMethod("togglePeriodicGc", boolean.class).invoke(manager, periodicGc);
            if (workspaceMode != null) {
                Object conf = configuration(model);
                Class<?> modeType = Class.forName("org.deeplearning4j.nn.conf.WorkspaceMode", false, loader);
                @SuppressWarnings({"unchecked", "rawtypes"})
                Object value = Enum.valueOf((Class<Enum>) modeType, workspaceMode);
                conf.getClass().getMethod("setTrainingWorkspaceMode", modeType).invoke(conf, value);
            }
        } catch (Throwable e) {
            if (first) Agent.warn("could not read or set ND4J's memory manager settings: " + e);
        }
    }

    /** The network's configuration: MultiLayerNetwork's or ComputationGraph's. */
    private static Object configuration(Object model) throws Exception {
        for (String getter : new String[]{"getLayerWiseConfigurations", "getConfiguration"}) {
            try {
                return model.getClass().getMethod(getter).invoke(model);
            } catch (NoSuchMethodException ignored) {
                // the other kind of network
            }
        }
        throw new NoSuchMethodException("no configuration getter on " + model.getClass().getName());
    }

    private static void report(Class<?> nd4j, Class<?> managerType, Object manager, ClassLoader loader, Object model) throws Exception {
        Sink s = Hooks.sink;
        if (s == null) return;
        boolean periodic = (Boolean) managerType.getMethod("isPeriodicGcActive").invoke(manager);
        int window = ((Number) managerType.getMethod("getAutoGcWindow").invoke(manager)).intValue();
        int threads = -1;
        try {
            Object env = nd4j.getMethod("getEnvironment").invoke(null);
            Method max = Class.forName("org.nd4j.linalg.factory.Environment", false, loader).getMethod("maxThreads");
            threads = ((Number) max.invoke(env)).intValue();
        } catch (Throwable ignored) {
            // older ND4J: no Environment
        }
        int cores = Runtime.getRuntime().availableProcessors();
        String mode = "unknown";
        try {
            Object conf = configuration(model);
            mode = String.valueOf(conf.getClass().getMethod("getTrainingWorkspaceMode").invoke(conf));
        } catch (Throwable ignored) {
            // not a DL4J network we know
        }
        Map<String, String> libraries = nativeLibraries(loader);
        String text = "ND4J at the first fit(): periodic GC " + (periodic ? "on, window " + window + " ms" : "off")
                + ", " + (threads > 0 ? threads + " ND4J threads" : "ND4J threads unknown") + ", " + cores + " cores, training workspace mode " + mode;
        s.line(new Json().put("type", "note").put("t", System.currentTimeMillis()).put("text", text)
                .raw("nd4j", new Json().put("periodic_gc", periodic).put("gc_window_ms", window)
                        .put("max_threads", threads).put("cores", cores).put("training_workspace_mode", mode)
                        .put("native_library", libraries.get("nd4jcpu")).put("blas_library", libraries.get("openblas_nolapack"))
                        .put("blas", !libraries.get("mkl_rt").isEmpty() ? "mkl" : !libraries.get("openblas_nolapack").isEmpty() ? "openblas" : "")
                        // glibc's mmap threshold as the job's environment sets it ("" = glibc's moving default)
                        .put("malloc_mmap_threshold", System.getenv().getOrDefault("MALLOC_MMAP_THRESHOLD_", ""))
                        .close()).close());
    }
}
