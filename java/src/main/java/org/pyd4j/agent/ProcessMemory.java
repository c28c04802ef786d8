package org.pyd4j.agent;

import java.io.RandomAccessFile;
import java.lang.management.ManagementFactory;

/**
 * The process's memory as the kernel and the JVM report it: resident bytes (/proc/self/statm), the
 * Java heap's resident part (/proc/self/smaps), and the limits the JVM runs under. Reading and
 * parsing these files is apart from what the sampler writes with the figures.
 */
final class ProcessMemory {
    private final long pageSize = pageSize();
    private final long heapReserved = heapReserved();

    /** The memory the JVM may use as it sees it: its container's limit, else the machine's RAM (-1 unknown). */
    @SuppressWarnings("deprecation")
    static long memoryLimit() {
        try {
            java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
            return os instanceof com.sun.management.OperatingSystemMXBean
                    ? ((com.sun.management.OperatingSystemMXBean) os).getTotalPhysicalMemorySize() : -1;
        } catch (Throwable e) {
            return -1;
        }
    }

    static long maxDirect() {
        try {
            com.sun.management.HotSpotDiagnosticMXBean bean = ManagementFactory.getPlatformMXBean(com.sun.management.HotSpotDiagnosticMXBean.class);
            long v = Long.parseLong(bean.getVMOption("MaxDirectMemorySize").getValue());
            return v == 0 ? Runtime.getRuntime().maxMemory() : v;  // 0 means "as large as the heap"
        } catch (Throwable e) {
            return -1;
        }
    }

    private final byte[] statm = new byte[128];

    long rss() {
        synchronized (statm) {
            return readRss();
        }
    }

    private long readRss() {
        try (RandomAccessFile f = new RandomAccessFile("/proc/self/statm", "r")) {
            int n = f.read(statm);
            int i = 0;
            while (i < n && statm[i] != ' ') i++;
            long pages = 0;
            for (i++; i < n && statm[i] >= '0' && statm[i] <= '9'; i++) pages = pages * 10 + (statm[i] - '0');
            return pages * pageSize;
        } catch (Throwable e) {
            return -1;
        }
    }

    /**
     * Resident bytes of the Java heap: the run of adjacent anonymous mappings whose size is the
     * reserved heap (MaxHeapSize); of several such runs (a malloc arena can have the same size),
     * the most resident one, since the heap always holds live objects. The heap's committed size is not resident until touched, so
     * RSS minus committed heap would hide native growth behind heap pages being touched.
     */
    long heapResident() {
        if (heapReserved <= 0) return -1;
        try (java.io.BufferedReader in = new java.io.BufferedReader(new java.io.FileReader("/proc/self/smaps"), 1 << 16)) {
            long runStart = -1, runEnd = -1, runRss = 0, best = -1;
            boolean anon = false;
            long tolerance = Math.max(16L << 20, heapReserved / 50);
            String line;
            while ((line = in.readLine()) != null) {
                int dash = line.indexOf('-');
                int space = line.indexOf(' ');
                if (dash > 0 && space > dash && isHex(line, 0, dash)) {
                    long start = Long.parseUnsignedLong(line.substring(0, dash), 16);
                    long end = Long.parseUnsignedLong(line.substring(dash + 1, space), 16);
                    String[] parts = line.trim().split("\\s+");
                    anon = parts.length < 6;
                    if (anon && start == runEnd) {
                        runEnd = end;
                    } else {
                        long diff = Math.abs((runEnd - runStart) - heapReserved);
                        if (runStart >= 0 && diff <= tolerance && runRss > best) best = runRss;
                        runStart = anon ? start : -1;
                        runEnd = anon ? end : -1;
                        runRss = 0;
                    }
                } else if (anon && line.startsWith("Rss:")) {
                    runRss += Long.parseLong(line.substring(4, line.length() - 2).trim()) * 1024;
                }
            }
            long diff = Math.abs((runEnd - runStart) - heapReserved);
            if (runStart >= 0 && diff <= tolerance && runRss > best) best = runRss;
            return best;
        } catch (Throwable e) {
            return -1;
        }
    }

    private static boolean isHex(String s, int from, int to) {
        for (int i = from; i < to; i++) {
            char c = s.charAt(i);
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
        }
        return to > from;
    }

    private static long heapReserved() {
        try {
            com.sun.management.HotSpotDiagnosticMXBean bean = ManagementFactory.getPlatformMXBean(com.sun.management.HotSpotDiagnosticMXBean.class);
            return Long.parseLong(bean.getVMOption("MaxHeapSize").getValue());
        } catch (Throwable e) {
            return -1;
        }
    }

    private static long pageSize() {
        try {
            Class<?> unsafeClass = Class.forName("sun.misc.Unsafe");
            java.lang.reflect.Field f = unsafeClass.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            return ((Number) unsafeClass.getMethod("pageSize").invoke(f.get(null))).longValue();
        } catch (Throwable e) {
            return 4096;
        }
    }
}
