package org.pyd4j.train;

/**
 * Makes memory the trainer frees go back to the operating system at once.
 *
 * <p>ND4J's CPU arrays come from glibc's malloc. glibc serves large blocks with mmap and returns
 * them on free, but after a large block is freed it raises its mmap threshold to that block's size
 * (up to 32 MiB), so later activations of a few MiB come from its heap, where freed memory stays
 * resident. Measured on deep_cnn_bn at batch 64 (README): DL4J's fit() then grows to 1.4 GiB
 * resident instead of 1.0 GiB, and planned training does not return what it closes. Fixing the
 * threshold ({@code mallopt(M_MMAP_THRESHOLD, 128 KiB)}, the same as the environment variable
 * {@code MALLOC_MMAP_THRESHOLD_=131072}) stops that. Done once per process when the planned
 * trainer is attached, on glibc only; {@code -Dpyd4j.train.mallopt=false} leaves malloc alone.
 */
final class ReturnFreedMemory {
    static final int M_MMAP_THRESHOLD = -3;
    static final int THRESHOLD = 128 * 1024;
    private static volatile Boolean applied;

    private ReturnFreedMemory() {
    }

    /** Whether the fixed threshold is in effect (applied now or before, or already set by the environment). */
    static synchronized boolean apply() {
        if (applied != null) return applied;
        if ("false".equals(System.getProperty("pyd4j.train.mallopt"))
                || !System.getProperty("os.name", "").toLowerCase().contains("linux")) {
            applied = false;
            return false;
        }
        if (System.getenv("MALLOC_MMAP_THRESHOLD_") != null) {
            applied = true;
            return true;
        }
        try {
            com.sun.jna.Function mallopt = com.sun.jna.NativeLibrary.getInstance("c").getFunction("mallopt");
            applied = mallopt.invokeInt(new Object[] {M_MMAP_THRESHOLD, THRESHOLD}) == 1;
        } catch (Throwable e) {   // not glibc, or no JNA: nothing changes
            applied = false;
        }
        return applied;
    }
}
