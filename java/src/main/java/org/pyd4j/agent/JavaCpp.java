package org.pyd4j.agent;

import java.lang.reflect.Method;

/**
 * JavaCPP's own counters, read by reflection (the agent has no JavaCPP on its classpath), all or none.
 *
 * <p>Read only once JavaCPP's Pointer class has finished its static initializer (the agent never runs
 * it for the job). A failure while reading skips that tick only: a sampler that gave up after one
 * failure lost the JavaCPP counters for the rest of the run, and one that wrote each value as it read
 * it wrote {@code javacpp_total} without {@code javacpp_physical} when the second call failed.
 * {@code physicalBytes()} is native: while JavaCPP's native library is not loaded (yet, or in this
 * class loader) it throws, and the process RSS from /proc/self/statm, which is what JavaCPP reads
 * on Linux, stands in for it ({@code javacpp_physical_source} says which).
 */
final class JavaCpp {
    /** One reading of every counter. */
    static final class Counters {
        long total;
        long count;
        long physical;
        boolean physicalFromJavacpp;
        long max;
        long maxPhysical;

        void into(Json j) {
            j.put("javacpp_total", total);
            if (count >= 0) j.put("javacpp_count", count);
            j.put("javacpp_physical", physical).put("javacpp_max", max).put("javacpp_max_physical", maxPhysical);
            if (!physicalFromJavacpp) j.put("javacpp_physical_source", "statm");
        }
    }

    /** Pointer loaded before the agent (late attach): used once its static initializer has run. */
    static volatile Class<?> candidate;
    private static Class<?> bound;
    private static Method total, count, physical, max, maxPhysical;

    private JavaCpp() {
    }

    /** The counters now, or null when JavaCPP is not initialized (or not readable this time). */
    static synchronized Counters read(long rss) {
        Class<?> pointer = Hooks.pointerClass;
        if (pointer == null && candidate != null && initialized(candidate)) {
            pointer = candidate;
            Hooks.pointerClass = pointer;
        }
        if (pointer == null) return null;
        try {
            if (bound != pointer) {
                total = pointer.getMethod("totalBytes");
                count = optional(pointer, "totalCount");  // JavaCPP 1.5.4+
                physical = pointer.getMethod("physicalBytes");
                max = pointer.getMethod("maxBytes");
                maxPhysical = pointer.getMethod("maxPhysicalBytes");
                bound = pointer;
            }
            Counters c = new Counters();
            c.total = (Long) total.invoke(null);
            c.count = count != null ? (Long) count.invoke(null) : -1;
            c.max = (Long) max.invoke(null);
            c.maxPhysical = (Long) maxPhysical.invoke(null);
            try {
                c.physical = (Long) physical.invoke(null);
                c.physicalFromJavacpp = true;
            } catch (Throwable nativeNotLoaded) {
                c.physical = rss;
            }
            return c;
        } catch (Throwable e) {
            return null;  // this tick only; the next one reads again
        }
    }

    private static Method optional(Class<?> c, String name) {
        try {
            return c.getMethod(name);
        } catch (NoSuchMethodException e) {
            return null;
        }
    }

    /** Whether a class's static initializer has run, without running it. */
    private static boolean initialized(Class<?> c) {
        try {
            Class<?> unsafeClass = Class.forName("sun.misc.Unsafe");
            java.lang.reflect.Field f = unsafeClass.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            Object unsafe = f.get(null);
            return !(Boolean) unsafeClass.getMethod("shouldBeInitialized", Class.class).invoke(unsafe, c);
        } catch (Throwable e) {
            return false;
        }
    }
}
