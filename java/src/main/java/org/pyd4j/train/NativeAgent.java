package org.pyd4j.train;

import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.CodeSource;
import java.util.concurrent.locks.ReentrantReadWriteLock;

import com.sun.jna.Memory;
import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;
import com.sun.jna.Pointer;

/**
 * The native side-agent ({@code native/}, C ABI {@code pyd4j_agent.h}) from Java, through JNA
 * direct mapping: the calls {@link PinnedHostTier} needs, each checked, with the library's own
 * message on failure.
 *
 * <p>The library is found as pyd4j's Python side finds it ({@code pyd4j/device/native_lib.py}): the
 * system property {@value #LIBRARY_PROPERTY}, else the environment variable
 * {@value #LIBRARY_ENV}, else {@code native/build/libpyd4j_agent.so} of the source tree the
 * helper jar was built in (built by {@code make setup}).
 */
final class NativeAgent implements AutoCloseable {
    static final int ABI_VERSION = 3;
    static final long ALIGNMENT = 256;
    static final String LIBRARY_PROPERTY = "pyd4j.agent.library";
    static final String LIBRARY_ENV = "PYD4J_NATIVE_LIB";

    static final int OK = 0;
    static final int ERR_OUT_OF_HOST_POOL = 3;

    private static Path loaded;

    /** Direct-mapped ABI functions (registered once, on first use). Pointers travel as long. */
    private static final class Abi {
        static native int pyd4j_agent_abi_version();
        static native int pyd4j_agent_is_cuda();
        static native String pyd4j_agent_last_error();
        static native int pyd4j_agent_create(long deviceBytes, long hostBytes, int ordinal, long[] out);
        static native int pyd4j_agent_destroy(long agent);
        static native int pyd4j_agent_register_external(long agent, long ptr, long size, long[] outId);
        static native int pyd4j_agent_offload(long agent, long id, int release);
        static native int pyd4j_agent_release_device(long agent, long id);
        static native int pyd4j_agent_rebind_external(long agent, long id, long ptr);
        static native int pyd4j_agent_prefetch(long agent, long id);
        static native int pyd4j_agent_wait(long agent, long id);
        static native int pyd4j_agent_synchronize(long agent);
        static native int pyd4j_agent_free(long agent, long id);
        static native int pyd4j_agent_get_stats(long agent, Pointer out);
    }

    /** Thrown by a failed call: the ABI status and the library's message. */
    static final class AgentException extends IllegalStateException {
        final int status;

        AgentException(int status, String message) {
            super(message);
            this.status = status;
        }
    }

    /** The fields of pyd4j_agent_stats_t the tiers use (offsets in the 8-byte-field struct). */
    static final class Stats {
        final long hostInUse;
        final long hostPeak;
        final long bytesOffloaded;
        final long bytesPrefetched;
        final double offloadSeconds;
        final double prefetchSeconds;

        Stats(Pointer p) {
            hostInUse = p.getLong(5 * 8);
            hostPeak = p.getLong(6 * 8);
            bytesOffloaded = p.getLong(7 * 8);
            bytesPrefetched = p.getLong(8 * 8);
            offloadSeconds = p.getDouble(12 * 8);
            prefetchSeconds = p.getDouble(13 * 8);
        }
    }

    private static final int STATS_BYTES = 20 * 8;

    private final Path library;
    private final boolean cuda;
    private final ReentrantReadWriteLock lifecycle = new ReentrantReadWriteLock();
    private long handle;  // guarded by lifecycle

    /** An agent with the smallest device arena (the tiers register ND4J's memory instead) and a
     *  pinned host pool of {@code hostBytes}, on GPU {@code deviceOrdinal} (CUDA build). */
    NativeAgent(long hostBytes, int deviceOrdinal) {
        this.library = load();
        this.cuda = Abi.pyd4j_agent_is_cuda() == 1;
        long[] out = new long[1];
        check(Abi.pyd4j_agent_create(ALIGNMENT, hostBytes, deviceOrdinal, out), "create");
        this.handle = out[0];
    }

    /** True when the library found is the CUDA build (loads it). */
    static boolean buildIsCuda() {
        load();
        return Abi.pyd4j_agent_is_cuda() == 1;
    }

    Path library() {
        return library;
    }

    boolean isCuda() {
        return cuda;
    }

    long registerExternal(long address, long bytes) {
        long[] out = new long[1];
        call("register_external", h -> Abi.pyd4j_agent_register_external(h, address, bytes, out));
        return out[0];
    }

    void offload(long id, boolean release) {
        call("offload", h -> Abi.pyd4j_agent_offload(h, id, release ? 1 : 0));
    }

    void releaseDevice(long id) {
        call("release_device", h -> Abi.pyd4j_agent_release_device(h, id));
    }

    void rebindExternal(long id, long address) {
        call("rebind_external", h -> Abi.pyd4j_agent_rebind_external(h, id, address));
    }

    void prefetch(long id) {
        call("prefetch", h -> Abi.pyd4j_agent_prefetch(h, id));
    }

    void await(long id) {
        call("wait", h -> Abi.pyd4j_agent_wait(h, id));
    }

    void synchronize() {
        call("synchronize", Abi::pyd4j_agent_synchronize);
    }

    void free(long id) {
        call("free", h -> Abi.pyd4j_agent_free(h, id));
    }

    /** Counters; waits for the copies issued so far, so that their timings are known. */
    Stats stats() {
        Memory m = new Memory(STATS_BYTES);
        call("get_stats", h -> Abi.pyd4j_agent_get_stats(h, m));
        return new Stats(m);
    }

    /** Waits for calls in progress (a wait among them) and every copy, then frees the pinned
     *  pool. Idempotent. */
    @Override
    public void close() {
        lifecycle.writeLock().lock();
        try {
            if (handle != 0) {
                long h = handle;
                handle = 0;
                check(Abi.pyd4j_agent_destroy(h), "destroy");
            }
        } finally {
            lifecycle.writeLock().unlock();
        }
    }

    private interface Call {
        int invoke(long handle);
    }

    /** One ABI call; calls run concurrently (the agent serializes them), never with close. */
    private void call(String name, Call c) {
        lifecycle.readLock().lock();
        try {
            if (handle == 0) {
                throw new IllegalStateException("the side-agent is closed");
            }
            check(c.invoke(handle), name);
        } finally {
            lifecycle.readLock().unlock();
        }
    }

    private static void check(int status, String call) {
        if (status != OK) {
            throw new AgentException(status, "pyd4j_agent_" + call + ": " + Abi.pyd4j_agent_last_error());
        }
    }

    // -- finding and loading the library ----------------------------------------------------

    private static synchronized Path load() {
        if (loaded != null) {
            return loaded;
        }
        Path path = findLibrary();
        try {
            Native.register(Abi.class, NativeLibrary.getInstance(path.toString()));
        } catch (UnsatisfiedLinkError e) {
            throw new IllegalStateException("cannot load the side-agent library " + path + ": "
                    + e.getMessage() + "; rebuild it with `make setup`, or point -D"
                    + LIBRARY_PROPERTY + " at a working libpyd4j_agent.so", e);
        }
        int version = Abi.pyd4j_agent_abi_version();
        if (version != ABI_VERSION) {
            throw new IllegalStateException(path + " has side-agent ABI version " + version
                    + ", this pyd4j needs " + ABI_VERSION + "; rebuild it with `make setup`");
        }
        loaded = path;
        return path;
    }

    /** The library's path by the rule in the class comment, or an error naming the fix. */
    static Path findLibrary() {
        String property = System.getProperty(LIBRARY_PROPERTY);
        if (property != null && !property.isEmpty()) {
            return existing(Paths.get(property), "-D" + LIBRARY_PROPERTY + "=" + property);
        }
        String env = System.getenv(LIBRARY_ENV);
        if (env != null && !env.isEmpty()) {
            return existing(Paths.get(env), LIBRARY_ENV + "=" + env);
        }
        Path built = sourceTreeBuild();
        if (built == null || !Files.isRegularFile(built)) {
            throw new IllegalStateException("the side-agent library is not built ("
                    + (built == null ? "the helper jar is not inside a pyd4j source tree"
                            : built + " is missing")
                    + "); run `make setup` in the pyd4j source tree, or pass -D"
                    + LIBRARY_PROPERTY + "=/path/to/libpyd4j_agent.so (or set " + LIBRARY_ENV + ")");
        }
        return built;
    }

    private static Path existing(Path p, String setting) {
        if (!Files.isRegularFile(p)) {
            throw new IllegalStateException(setting + " does not name a file; point it at "
                    + "libpyd4j_agent.so (make setup builds native/build/libpyd4j_agent.so) or "
                    + "remove it to use the source tree's build");
        }
        return p;
    }

    /** native/build/libpyd4j_agent.so next to java/target/ that this class was loaded from. */
    private static Path sourceTreeBuild() {
        try {
            CodeSource src = NativeAgent.class.getProtectionDomain().getCodeSource();
            if (src == null) {
                return null;
            }
            // java/target/pyd4j-java.jar or java/target/classes -> the source tree's root
            Path root = Paths.get(src.getLocation().toURI()).toAbsolutePath().getParent();
            for (int i = 0; i < 2 && root != null; i++) {
                root = root.getParent();
            }
            return root == null ? null : root.resolve("native").resolve("build").resolve("libpyd4j_agent.so");
        } catch (URISyntaxException | RuntimeException e) {
            return null;
        }
    }
}
