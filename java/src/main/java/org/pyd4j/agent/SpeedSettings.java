package org.pyd4j.agent;

import java.lang.reflect.Method;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * ND4J settings that the job's code does not see: pyd4j tune --speed tries them as changes. At the
 * entry of every fit() (so the job's own calls before it are overridden) this sets ND4J's memory
 * manager periodic GC ({@code nd4j_periodic_gc=true|false}) and its window
 * ({@code nd4j_gc_window=ms}), and the network's training workspace mode ({@code workspace_mode=ENABLED|NONE},
 * on its configuration, which DL4J reads at each fit); once, before applying anything, it reports what
 * the job had set (periodic GC, window, ND4J threads, cores, the first network's training workspace
 * mode) as a {@code note} line with an {@code nd4j} object. On the CPU backend of 1.0.0-M2.1 periodic
 * GC is off whatever the job asks ({@code CpuMemoryManager.isPeriodicGcActive()} returns false).
 * ND4J is reached by reflection on the model's class loader: the agent itself needs no ND4J.
 */
final class SpeedSettings {
    static volatile Boolean periodicGc;
    static volatile Integer gcWindowMs;
    static volatile String workspaceMode;
    private static final AtomicBoolean reported = new AtomicBoolean();

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
        String text = "ND4J at the first fit(): periodic GC " + (periodic ? "on, window " + window + " ms" : "off")
                + ", " + (threads > 0 ? threads + " ND4J threads" : "ND4J threads unknown") + ", " + cores + " cores, training workspace mode " + mode;
        s.line(new Json().put("type", "note").put("t", System.currentTimeMillis()).put("text", text)
                .raw("nd4j", new Json().put("periodic_gc", periodic).put("gc_window_ms", window)
                        .put("max_threads", threads).put("cores", cores).put("training_workspace_mode", mode).close()).close());
    }
}
