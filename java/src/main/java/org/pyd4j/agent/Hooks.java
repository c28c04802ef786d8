package org.pyd4j.agent;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.ref.WeakReference;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Entry points the agent's bytecode hooks call from inside ND4J/DL4J/JavaCPP classes. Everything
 * here works by reflection on the job's own classes, so the agent needs no ND4J on its classpath,
 * and nothing here initializes a class the job has not initialized itself.
 *
 * Hooks never throw into the job: every entry point swallows its own failures.
 */
public final class Hooks {
    /** JavaCPP's Pointer class once its static initializer has finished (set from Pointer.<clinit>). */
    static volatile Class<?> pointerClass;
    /** Every ND4J workspace seen being initialized (Nd4jWorkspace.init), weakly held. */
    static final List<WeakReference<Object>> workspaces = new ArrayList<>();
    static final AtomicLong iterations = new AtomicLong();
    static volatile long lastIterationNanos;
    static volatile double lastScore = Double.NaN;
    static volatile int lastEpoch = -1;
    static volatile Sink sink;
    /** plan=FILE: route every network's fit() through pyd4j's planned trainer (org.pyd4j.train.AgentRoute). */
    static volatile String planFile;
    /** plan_fallback=fit: a network the plan cannot be applied to trains with DL4J's own fit() (else the job ends). */
    static volatile boolean planFallback;
    /** describe=true (or plan=FILE): report each network's configuration and first batch shape. */
    static volatile boolean describeNetworks;
    /** Networks already described (their configuration) and already routed, by identity; weakly
     *  held, so the agent never keeps a network the job dropped alive. */
    static final WeakIdentitySet described = new WeakIdentitySet();
    static final WeakIdentitySet routed = new WeakIdentitySet();

    private static final Map<Class<?>, Object> listenerFor = new ConcurrentHashMap<>();
    private static final Map<Class<?>, Method[]> modelMethods = new ConcurrentHashMap<>();
    private static volatile long lastIterEventNanos;
    private static final long MIN_ITER_EVENT_GAP_NANOS = 2_000_000L;  // at most 500 iteration lines/s

    private Hooks() {
    }

    /** Called at the end of org.bytedeco.javacpp.Pointer.<clinit>. */
    public static void javacppReady(Class<?> pointer) {
        pointerClass = pointer;
    }

    /** Return of OpaqueDataBuffer.allocateDataBuffer: a libnd4j buffer of {@code bytes}. */
    public static void nd4jAllocated(Object opaqueDataBuffer, long bytes) {
        try {
            if (opaqueDataBuffer != null) Allocations.nd4jAllocated(address(opaqueDataBuffer), bytes);
        } catch (Throwable ignored) {
            // never disturb the job
        }
    }

    /** Entry of OpaqueDataBuffer.closeBuffer/setPrimaryBuffer and CpuDeallocator.deallocate: libnd4j's memory goes. */
    public static void nd4jReleased(Object opaqueDataBuffer) {
        try {
            if (opaqueDataBuffer != null) Allocations.nd4jFreed(address(opaqueDataBuffer));
        } catch (Throwable ignored) {
            // never disturb the job
        }
    }

    /** JavaCPP's DeallocatorReference.add(): a Pointer of {@code bytes} counts now; totalBytes is {@code total}. */
    public static void javacppAdded(Object reference, long bytes, long total) {
        try {
            Allocations.javacppAdded(reference, bytes, total);
        } catch (Throwable ignored) {
            // never disturb the job
        }
    }

    /** JavaCPP's DeallocatorReference.remove(), once the Pointer's bytes left totalBytes. */
    public static void javacppRemoved(Object reference, long bytes) {
        try {
            Allocations.javacppRemoved(reference, bytes);
        } catch (Throwable ignored) {
            // never disturb the job
        }
    }

    /** ND4J's DeallocatorService (entry of pickObject): its registered objects, to see its threads catch up. */
    public static void deallocatorService(Object service) {
        try {
            if (Allocations.deallocatorService == null) Allocations.watchDeallocatorService(service);
        } catch (Throwable ignored) {
            // never disturb the job
        }
    }

    private static volatile MethodHandle addressOf;

    /** JavaCPP's Pointer.address() of a Pointer the agent cannot name at compile time. */
    private static long address(Object pointer) throws Throwable {
        MethodHandle h = addressOf;
        if (h == null) {
            Class<?> c = pointer.getClass();
            while (c.getSuperclass() != null && !c.getName().equals("org.bytedeco.javacpp.Pointer")) c = c.getSuperclass();
            h = MethodHandles.publicLookup().findVirtual(c, "address", MethodType.methodType(long.class))
                    .asType(MethodType.methodType(long.class, Object.class));
            addressOf = h;
        }
        return (long) h.invokeExact(pointer);
    }

    /** Called on entry of Nd4jWorkspace.init(): remember the workspace (once per identity). */
    public static void workspace(Object ws) {
        try {
            synchronized (workspaces) {
                for (Iterator<WeakReference<Object>> it = workspaces.iterator(); it.hasNext(); ) {
                    Object known = it.next().get();
                    if (known == null) it.remove();
                    else if (known == ws) return;
                }
                workspaces.add(new WeakReference<>(ws));
            }
            String site = UserCode.userLine();
            if (site != null) workspaceSites.put(ws, site);
        } catch (Throwable ignored) {
            // never disturb the job
        }
    }

    /** The user's line that created each workspace (the first frame of the job's own code at its init()). */
    private static final java.util.Map<Object, String> workspaceSites =
            java.util.Collections.synchronizedMap(new java.util.WeakHashMap<>());

    static String workspaceSite(Object ws) {
        return workspaceSites.get(ws);
    }

    static List<Object> liveWorkspaces() {
        List<Object> out = new ArrayList<>();
        synchronized (workspaces) {
            for (Iterator<WeakReference<Object>> it = workspaces.iterator(); it.hasNext(); ) {
                Object ws = it.next().get();
                if (ws == null) it.remove();
                else out.add(ws);
            }
        }
        return out;
    }

    /**
     * Called on entry of MultiLayerNetwork.fit* / ComputationGraph.fit*: make sure the model carries
     * our listener (the user's setListeners() may have replaced it since the last fit).
     */
    public static void model(Object model) {
        try {
            Method[] m = modelMethods.computeIfAbsent(model.getClass(), Hooks::methodsOf);
            if (m == null || m.length == 0) return;
            Object listener = listenerFor.computeIfAbsent(m[2].getParameterTypes()[0].getComponentType(), Hooks::newListener);
            Object current = m[0].invoke(model);
            if (current instanceof Collection) {
                for (Object l : (Collection<?>) current) {
                    if (l == listener) return;
                }
            }
            Object array = java.lang.reflect.Array.newInstance(m[2].getParameterTypes()[0].getComponentType(), 1);
            java.lang.reflect.Array.set(array, 0, listener);
            m[2].invoke(model, array);
        } catch (Throwable ignored) {
            // no iteration markers for this model; sampling goes on
        } finally {
            SpeedSettings.apply(model);
            if (planFile != null) route(model);
        }
    }

    /** Entry of MultiLayerNetwork.fit(DataSetIterator) / ComputationGraph.fit(MultiDataSetIterator): the
     *  iterator fit() goes on with ({@link SpeedSettings#iterator}); never throws into the job. */
    public static Object iterator(Object model, Object iterator) {
        try {
            return SpeedSettings.iterator(model, iterator);
        } catch (Throwable e) {
            return iterator;
        }
    }

    /** Call org.pyd4j.train.AgentRoute (in this jar, compiled against DL4J) by reflection: the agent
     *  itself needs no DL4J, and a job without it just stays unrouted. */
    private static String callRoute(String method, Object model, String... more) throws Exception {
        Class<?> route = Class.forName("org.pyd4j.train.AgentRoute", true, model.getClass().getClassLoader());
        Class<?>[] types = new Class<?>[1 + more.length];
        Object[] args = new Object[1 + more.length];
        types[0] = Object.class;
        args[0] = model;
        for (int i = 0; i < more.length; i++) {
            types[i + 1] = String.class;
            args[i + 1] = more[i];
        }
        return (String) route.getMethod(method, types).invoke(null, args);
    }

    /** Once per network: install the plan. A plan that cannot be applied ends the job with the
     *  reason (in the timeline and on stderr) unless plan_fallback=fit: never a quiet unplanned run. */
    private static void route(Object model) {
        if (!routed.add(model)) return;
        String result;
        try {
            result = callRoute("attach", model, planFile);
        } catch (Throwable e) {
            Throwable c = e.getCause() != null ? e.getCause() : e;
            result = new Json().put("status", "refused").put("reason", String.valueOf(c)).close();
        }
        boolean attached = result.contains("\"attached\"");
        planEvent(result, attached);
        if (!attached) Agent.planNotApplied("plan " + planFile + " cannot be applied to this " + model.getClass().getSimpleName()
                + ": " + reasonIn(result));
    }

    /** The plan cannot be applied at all (no hooks, no agent): the timeline says why, then as {@link #route}. */
    static void planRefused(String why) {
        planEvent(new Json().put("status", "refused").put("reason", why).close(), false);
        Agent.planNotApplied(why);
    }

    /** One "plan" line in the timeline: the route's answer and, when refused, what happens next. */
    private static void planEvent(String result, boolean attached) {
        Sink s = sink;
        if (s == null) return;
        Json event = new Json().put("type", "plan").put("t", System.currentTimeMillis()).put("file", planFile)
                .raw("result", result);
        if (!attached) event.put("then", planFallback ? "fit" : "exit");
        s.line(event.close());
        if (!attached) s.flush();
    }

    /** The "reason" string of a route answer, unescaped (the whole answer when it has none). */
    static String reasonIn(String json) {
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("\"reason\":\\s*\"").matcher(json);
        if (!m.find()) return json;
        StringBuilder out = new StringBuilder();
        for (int i = m.end(); i < json.length(); i++) {
            char c = json.charAt(i);
            if (c == '"') break;
            if (c == '\\' && i + 1 < json.length()) {
                char n = json.charAt(++i);
                if (n == 'u' && i + 4 < json.length()) {
                    out.append((char) Integer.parseInt(json.substring(i + 1, i + 5), 16));
                    i += 4;
                } else {
                    out.append(n == 'n' ? '\n' : n == 't' ? '\t' : n);
                }
            } else {
                out.append(c);
            }
        }
        return out.toString();
    }

    /** Once per network, at its first iteration: its configuration and input shape (so that pyd4j
     *  can plan it); at each epoch end, what planned training did when the network is routed. */
    private static void describe(Object model, boolean end) {
        Sink s = sink;
        if (s == null) return;
        try {
            if (!end && described.add(model)) {
                s.line(new Json().put("type", "network").put("t", System.currentTimeMillis())
                        .raw("network", callRoute("network", model)).close());
            }
            if (end && planFile != null) {
                s.line(new Json().put("type", "plan_stats").put("t", System.currentTimeMillis())
                        .raw("stats", callRoute("stats", model)).close());
            }
        } catch (Throwable ignored) {
            // no network description for this model
        }
    }

    private static Method[] methodsOf(Class<?> cls) {
        try {
            Method getListeners = cls.getMethod("getListeners");
            Method score = cls.getMethod("score");
            Method add = null;
            for (Method method : cls.getMethods()) {
                if (method.getName().equals("addListeners") && method.getParameterCount() == 1
                        && method.getParameterTypes()[0].isArray()
                        && method.getParameterTypes()[0].getComponentType().getName().equals("org.deeplearning4j.optimize.api.TrainingListener")) {
                    add = method;
                }
            }
            return add == null ? new Method[0] : new Method[]{getListeners, score, add};
        } catch (Throwable e) {
            return new Method[0];
        }
    }

    private static Object newListener(Class<?> listenerInterface) {
        InvocationHandler handler = (proxy, method, args) -> {
            switch (method.getName()) {
                case "iterationDone":
                    onIteration(args[0], ((Number) args[1]).intValue(), ((Number) args[2]).intValue());
                    return null;
                case "onEpochEnd":
                    onEpochEnd(args[0]);
                    return null;
                case "onForwardPass":
                    TimeSplit.forwardDone();
                    return null;
                case "onBackwardPass":
                    TimeSplit.backwardDone();
                    return null;
                case "onGradientCalculation":
                    TimeSplit.gradientDone();
                    return null;
                case "equals":
                    return proxy == args[0];
                case "hashCode":
                    return System.identityHashCode(proxy);
                case "toString":
                    return "pyd4j profiling listener";
                default:
                    return null;
            }
        };
        return Proxy.newProxyInstance(listenerInterface.getClassLoader(), new Class<?>[]{listenerInterface}, handler);
    }

    private static void onIteration(Object model, int iteration, int epoch) {
        long n = iterations.incrementAndGet();
        TimeSplit.iterationDone(sink);
        if (describeNetworks && !described.contains(model)) describe(model, false);
        long now = System.nanoTime();
        lastIterationNanos = now;
        lastEpoch = epoch;
        double score = Double.NaN;
        try {
            Method[] m = modelMethods.get(model.getClass());
            if (m != null && m.length > 0) score = ((Number) m[1].invoke(model)).doubleValue();
        } catch (Throwable ignored) {
            // score not available
        }
        lastScore = score;
        Sink s = sink;
        if (s != null && now - lastIterEventNanos >= MIN_ITER_EVENT_GAP_NANOS) {
            lastIterEventNanos = now;
            s.line(new Json().put("type", "iter").put("t", System.currentTimeMillis()).put("n", n)
                    .put("iteration", iteration).put("epoch", epoch).put("score", score).close());
        }
        Window.iterationDone(n, s);
    }

    private static void onEpochEnd(Object model) {
        describe(model, true);
        Sink s = sink;
        if (s != null) {
            s.line(new Json().put("type", "epoch").put("t", System.currentTimeMillis())
                    .put("epoch", lastEpoch).put("n", iterations.get()).close());
        }
    }
}
