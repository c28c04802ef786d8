package org.pyd4j.agent;

import java.lang.instrument.Instrumentation;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * pyd4j's profiling agent. Samples heap, GC, NIO buffer pools, JavaCPP off-heap counters, RSS,
 * threads and ND4J workspaces on a daemon thread and streams JSON lines.
 *
 * <pre>
 *   java -javaagent:pyd4j-java.jar=out=run.jsonl,interval=100 -cp job.jar Main
 *   java -javaagent:pyd4j-java.jar=port=40123,interval=100 ...   (token in env PYD4J_AGENT_TOKEN)
 * </pre>
 *
 * Arguments (comma separated key=value): {@code out} file to append to ({@code %p} in it becomes
 * the pid, so every JVM of a multi-JVM job has its own file), or {@code port} of a
 * loopback listener plus {@code token} (or env PYD4J_AGENT_TOKEN); {@code interval} in ms
 * (default 100); {@code plan=FILE} trains every network of the job under a pyd4j plan
 * (org.pyd4j.train.AgentRoute) -- a plan that cannot be applied ends the job with the reason (exit
 * {@link #EXIT_PLAN_NOT_APPLIED}) unless {@code plan_fallback=fit} asks for DL4J's own fit() instead;
 * {@code describe=true} reports each network's configuration and first
 * batch shape (pyd4j plans from it); {@code hooks=false} turns off the bytecode hooks (no workspaces, no iterations, no
 * allocation counters or sites); {@code live} seconds between the agent's regular live-set measurements
 * when the job had no full collection (default 5, 0 = only the job's own full collections; the ones a
 * leak verdict needs come sooner, see {@link LiveSet}) and {@code live_share} the largest share of wall
 * time the regular ones' pauses may take (default 0.005); {@code sites} mean bytes between sampled allocation stacks (default 262144,
 * 0 = no call sites, see {@link Allocations}); {@code nd4j_periodic_gc} (true/false) and {@code nd4j_gc_window} (ms)
 * set ND4J's memory manager at every fit() (see {@link SpeedSettings}); {@code window_iterations}, {@code window_ms}
 * and {@code stop_file} end the job at an iteration once its measurement window is over (see {@link Window}).
 * The system property {@code pyd4j.agent} may carry
 * more arguments in the same form; they win over the -javaagent ones (for launchers whose agent
 * option cannot be changed).
 */
public final class Agent {
    /** Exit status of a job whose plan= cannot be applied (sysexits' EX_CONFIG), unless plan_fallback=fit. */
    public static final int EXIT_PLAN_NOT_APPLIED = 78;

    private static volatile Sampler sampler;

    private Agent() {
    }

    public static void premain(String args, Instrumentation inst) {
        start(args, inst, false);
    }

    public static void agentmain(String args, Instrumentation inst) {
        start(args, inst, true);
    }

    /**
     * Start sampling inside a JVM that was started without the agent (pyd4j's in-process JPype
     * session). There is no Instrumentation: no workspace or iteration hooks.
     */
    public static synchronized String startInProcess(String args) {
        if (sampler != null) return "already running";
        start(args, null, true);
        return sampler == null ? "failed" : "started";
    }

    /** Stop the sampler started by {@link #startInProcess}: final sample, end line, close. */
    public static synchronized void stopInProcess() {
        Sampler s = sampler;
        if (s != null) {
            s.stop("stopped");
            sampler = null;
        }
    }

    private static synchronized void start(String args, Instrumentation inst, boolean late) {
        if (sampler != null) return;
        Map<String, String> opts = parse(args);
        opts.putAll(parse(System.getProperty("pyd4j.agent")));
        if (inst == null && opts.remove("plan") != null) {   // in-process: no job fit() to route
            warn("plan= is for jobs started with -javaagent; in-process training takes its plan from "
                    + "pyd4j.train.fit(memory='superneurons')");
        }
        try {
            long interval = number(opts, "interval", "100");
            if (interval < 1) throw new IllegalArgumentException("interval=" + interval + " ms; use 1 ms or more (100 is the default)");
            Sink sink;
            if (opts.containsKey("port")) {
                String token = opts.getOrDefault("token", System.getenv("PYD4J_AGENT_TOKEN"));
                sink = Sink.loopback((int) number(opts, "port", "0"), token);
            } else if (opts.containsKey("out")) {
                sink = Sink.file(opts.get("out"));
            } else {
                throw new IllegalArgumentException("no output: give out=FILE or port=PORT (with a token)");
            }
            Hooks.sink = sink;
            PrefetchGuard.install();
            Hooks.planFile = opts.get("plan");
            Hooks.planFallback = planFallback(opts.get("plan_fallback"));
            Hooks.describeNetworks = Hooks.planFile != null || "true".equals(opts.get("describe"));
            SpeedSettings.configure(opts);
            Window.configure(opts);
            if (opts.containsKey("native_jar")) SpeedSettings.addNativeJar(opts.get("native_jar"), inst);
            long liveSeconds = number(opts, "live", "5");
            long siteBytes = number(opts, "sites", String.valueOf(Allocations.DEFAULT_MEAN_BYTES));
            long liveMaxHeap = number(opts, "live_max_heap", String.valueOf(LiveSet.DEFAULT_MAX_HEAP_MIB));
            if (liveMaxHeap < 1) throw new IllegalArgumentException("live_max_heap=" + liveMaxHeap + " MiB; use 1 or more (1024 is the default)");
            double liveShare;
            try {
                liveShare = Double.parseDouble(opts.getOrDefault("live_share", String.valueOf(LiveSet.DEFAULT_PAUSE_SHARE)));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("live_share=" + opts.get("live_share") + " is not a number; use a fraction in (0, 1] (0.005 is the default)");
            }
            if (!(liveShare > 0 && liveShare <= 1)) throw new IllegalArgumentException("live_share=" + liveShare + "; use a fraction in (0, 1] (0.005 is the default)");
            if (liveSeconds < 0) throw new IllegalArgumentException("live=" + liveSeconds + " s; use 0 (off) or more (5 is the default)");
            if (siteBytes < 0) throw new IllegalArgumentException("sites=" + siteBytes + " bytes; use 0 (off) or more (262144 is the default)");
            boolean hooks = inst != null && !"false".equals(opts.get("hooks"));
            if (hooks) hooks = installHooks(inst, late);
            if (hooks && !late) Allocations.sampleEvery(siteBytes);
            if (late || inst == null) {
                // Classes already loaded before us: read what exists once it is initialized, initialize nothing new.
                JavaCpp.candidate = loadedClass("org.bytedeco.javacpp.Pointer");
            }
            Sampler s = new Sampler(sink, interval, hooks);
            LiveSet live = new LiveSet(sink, liveSeconds * 1000, liveShare, liveMaxHeap, s);
            s.liveSet = live;
            s.begin();
            live.begin();
            sampler = s;
            if (opts.containsKey("parent")) watchParent(number(opts, "parent", "0"));
            if (Hooks.planFile != null && !hooks) {
                Hooks.planRefused("plan=" + Hooks.planFile + " needs the agent's bytecode hooks (-javaagent, without hooks=false)");
            }
        } catch (Throwable e) {
            warn("profiling agent not started (" + e + "); the job runs unprofiled");
            if (opts.containsKey("plan") && sampler == null) {
                Hooks.planFallback = "fit".equals(opts.get("plan_fallback"));
                Hooks.planFile = opts.get("plan");
                Hooks.planRefused("plan=" + opts.get("plan") + " cannot be applied without the agent (" + e.getMessage() + ")");
            }
        }
    }

    /** plan_fallback=fit (train with DL4J's own fit() when the plan cannot be applied) or fail (the default). */
    static boolean planFallback(String value) {
        if (value == null || value.equals("fail")) return false;
        if (value.equals("fit")) return true;
        throw new IllegalArgumentException("plan_fallback=" + value + "; use fail (the default: a plan that cannot be "
                + "applied ends the job) or fit (the job trains with DL4J's own fit() instead)");
    }

    /**
     * A plan= the agent cannot apply: the job ends with {@code why} on stderr (exit {@link
     * #EXIT_PLAN_NOT_APPLIED}) -- never a quiet unplanned run -- unless plan_fallback=fit asked for
     * DL4J's own fit(). Returns (with fit) after saying so.
     */
    static void planNotApplied(String why) {
        if (Hooks.planFallback) {
            warn(why + ": plan not applied; the job trains with DL4J's own fit() (plan_fallback=fit)");
            return;
        }
        warn(why + ": plan not applied; ending the job (exit " + EXIT_PLAN_NOT_APPLIED + "). Fix the plan, or add "
                + "plan_fallback=fit to the agent's options to train with DL4J's own fit() instead");
        System.exit(EXIT_PLAN_NOT_APPLIED);
    }

    /**
     * End the job when the pyd4j process that started and watches it is gone (even killed with
     * SIGKILL), so a job pyd4j launched never runs on unwatched. Exit runs the shutdown hooks, so
     * the timeline still gets its end line.
     */
    private static void watchParent(long pid) {
        Runnable stop = () -> {
            warn("pyd4j (pid " + pid + "), which started this job, is gone: stopping the job");
            System.exit(143);
        };
        java.util.Optional<ProcessHandle> parent = ProcessHandle.of(pid);
        if (parent.isEmpty()) {
            stop.run();
        } else {
            parent.get().onExit().thenRun(stop);
        }
    }

    /**
     * This process's ancestors' pids, parent first (at most 32): which JVM of a run started which,
     * through shells and launchers in between.
     */
    static String ancestors() {
        StringBuilder out = new StringBuilder("[");
        java.util.Optional<ProcessHandle> p = ProcessHandle.current().parent();
        for (int i = 0; i < 32 && p.isPresent(); i++) {
            if (i > 0) out.append(',');
            out.append(p.get().pid());
            p = p.get().parent();
        }
        return out.append(']').toString();
    }

    private static boolean installHooks(Instrumentation inst, boolean late) {
        try {
            Class.forName("org.objectweb.asm.ClassVisitor");
        } catch (Throwable e) {
            warn("ASM not found next to the agent jar (lib/asm-*.jar): no workspace or iteration hooks");
            return false;
        }
        // Allocation counters must see every allocation from the start: only when the agent comes first.
        Instrumenter instrumenter = new Instrumenter(!late);
        inst.addTransformer(instrumenter, true);
        if (late) {
            List<Class<?>> loaded = new ArrayList<>();
            for (Class<?> c : inst.getAllLoadedClasses()) {
                if (instrumenter.isTarget(c.getName().replace('.', '/')) && inst.isModifiableClass(c)) loaded.add(c);
            }
            try {
                if (!loaded.isEmpty()) inst.retransformClasses(loaded.toArray(new Class<?>[0]));
            } catch (Throwable e) {
                warn("could not hook already loaded classes: " + e);
            }
        }
        return true;
    }

    private static Class<?> loadedClass(String name) {
        try {
            // initialize=false: never run a static initializer the job has not run.
            Class<?> c = Class.forName(name, false, ClassLoader.getSystemClassLoader());
            return c;
        } catch (Throwable e) {
            return null;
        }
    }

    static Map<String, String> parse(String args) {
        Map<String, String> out = new HashMap<>();
        if (args == null || args.isEmpty()) return out;
        for (String part : args.split(",")) {
            int eq = part.indexOf('=');
            if (eq > 0) out.put(part.substring(0, eq).trim(), part.substring(eq + 1).trim());
        }
        return out;
    }

    /** A whole-number option; a value that is not one is refused naming the option and the value. */
    static long number(Map<String, String> opts, String key, String fallback) {
        String value = opts.getOrDefault(key, fallback);
        try {
            return Long.parseLong(value.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(key + "=" + value + " is not a whole number; give e.g. " + key + "=" + fallback);
        }
    }

    static void warn(String message) {
        System.err.println("[pyd4j agent] " + message);
    }
}
