package org.pyd4j.train;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.nd4j.linalg.api.buffer.DataBuffer;
import org.nd4j.linalg.api.concurrency.AffinityManager;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * Offload tier for device memory: the native side-agent's pinned host pool, with the copies on
 * the agent's offload and prefetch streams.
 *
 * <p>An offloaded array is registered with the agent as external memory and copied into a
 * slot of the pinned pool (allocated once, {@code hostPoolBytes}; first fit, so a fragmented
 * pool can refuse an array that the free bytes would hold: the error names the largest free
 * block). On the way back the agent copies the slot into a fresh array that ND4J allocates
 * outside any workspace ({@code pyd4j_agent_rebind_external}).
 *
 * <p>Which memory is "device" memory follows ND4J's backend. CPU backend with the agent's host
 * build (what CI runs): the arrays' host buffers, copies on the agent's worker threads. CUDA
 * backend with the agent's CUDA build: the arrays' device pointers from ND4J's
 * {@code AtomicAllocator} (found by reflection, since the CUDA backend is not on the helper
 * jar's classpath), copied with {@code cudaMemcpyAsync}; before an offload ND4J's stream is
 * synchronized so the array is complete, and a taken array is tagged as current on the device.
 * <b>The CUDA path has not run on a GPU yet.</b> A build that does not match the backend is
 * refused when the tier is created.
 *
 * <p>Thread safety: every method may be called from any thread; one key should be driven by
 * one thread at a time. Only {@link #awaitOffloaded}, {@link #take}, {@link #release} and
 * {@link #stats} block. {@link #close} waits for calls in progress and every copy.
 */
public final class PinnedHostTier implements OffloadTier {
    private final NativeAgent agent;
    private final boolean cudaBackend;
    private final Map<Integer, Entry> entries = new HashMap<>();
    private final AtomicLong waitNanos = new AtomicLong();
    private boolean closed;
    private TierStats finalStats;

    /** One key: its agent buffer and the arrays the tier owns for it. */
    private static final class Entry {
        final ArraySpec spec;
        final long id;       // the agent's buffer; 0 for an empty array (nothing to copy)
        INDArray owned;      // the tier's contiguous copy of a strided view, until written
        INDArray fresh;      // a read-back not yet taken: the tier's until take hands it out

        Entry(ArraySpec spec, long id, INDArray owned) {
            this.spec = spec;
            this.id = id;
            this.owned = owned;
        }
    }

    /** A tier with a pinned host pool of {@code hostPoolBytes} (GPU 0 for the CUDA build). */
    public PinnedHostTier(long hostPoolBytes) {
        this(hostPoolBytes, 0);
    }

    /** A tier with a pinned host pool of {@code hostPoolBytes} for GPU {@code deviceOrdinal}. */
    public PinnedHostTier(long hostPoolBytes, int deviceOrdinal) {
        if (hostPoolBytes < NativeAgent.ALIGNMENT) {
            throw new IllegalArgumentException("hostPoolBytes=" + hostPoolBytes + ": give the "
                    + "pinned host pool's size in bytes, at least the plan's peak of offloaded "
                    + "bytes (minimum " + NativeAgent.ALIGNMENT + ")");
        }
        boolean nd4jOnCpu = Nd4j.getEnvironment().isCPU();
        checkBackends(NativeAgent.buildIsCuda(), nd4jOnCpu, NativeAgent.findLibrary());
        this.agent = new NativeAgent(hostPoolBytes, deviceOrdinal);
        this.cudaBackend = !nd4jOnCpu;
    }

    /**
     * Refuses an agent build that cannot address the memory ND4J's arrays live in: the CUDA
     * build copies device memory, the host build host memory.
     */
    public static void checkBackends(boolean agentIsCuda, boolean nd4jOnCpu, Path library) {
        if (agentIsCuda && nd4jOnCpu) {
            throw new IllegalStateException("the side-agent library " + library + " is the CUDA "
                    + "build, but ND4J runs on its CPU backend, whose arrays live in host memory; "
                    + "use DiskTier with the CPU backend, or point -D" + NativeAgent.LIBRARY_PROPERTY
                    + " at a host build (cmake -DPYD4J_AGENT_CUDA=OFF)");
        }
        if (!agentIsCuda && !nd4jOnCpu) {
            throw new IllegalStateException("the side-agent library " + library + " is the host "
                    + "build, but ND4J runs on its CUDA backend, whose arrays live in device "
                    + "memory; build the agent with CUDA (`make setup` where nvcc is found) or "
                    + "point -D" + NativeAgent.LIBRARY_PROPERTY + " at a CUDA build");
        }
    }

    @Override
    public synchronized void offload(int key, INDArray array) {
        ensureOpen();
        ArraySpec spec = ArraySpec.of(key, array);
        if (entries.containsKey(key)) {
            throw new IllegalStateException("key " + key + " already holds an offloaded array in "
                    + "the pinned host tier; release(" + key + ") it before offloading under that "
                    + "key again");
        }
        if (spec.bytes == 0) {
            entries.put(key, new Entry(spec, 0, null));
            return;
        }
        INDArray owned = copyFirst(array) ? ArraySpec.contiguousCopy(array) : null;
        INDArray source = owned != null ? owned : array;
        long id = 0;
        try {
            id = agent.registerExternal(address(source, true), spec.bytes);
            agent.offload(id, true);
        } catch (RuntimeException e) {
            if (id != 0) {
                agent.free(id);
            }
            if (owned != null) {
                owned.close();
            }
            if (e instanceof NativeAgent.AgentException
                    && ((NativeAgent.AgentException) e).status == NativeAgent.ERR_OUT_OF_HOST_POOL) {
                throw new IllegalStateException("the pinned host pool is full: key " + key
                        + " needs " + spec.bytes + " bytes (" + spec + "), " + entries.size()
                        + " keys held; create the tier with a larger hostPoolBytes (new "
                        + "PinnedHostTier(hostPoolBytes)) or release keys before offloading more. "
                        + e.getMessage(), e);
            }
            throw e;
        }
        entries.put(key, new Entry(spec, id, owned));
    }

    @Override
    public void awaitOffloaded(int key) {
        long id;
        synchronized (this) {
            id = entry(key).id;
        }
        timedWait(id);
        synchronized (this) {
            Entry e = entries.get(key);
            if (e != null && e.owned != null) {
                e.owned.close();
                e.owned = null;
            }
        }
    }

    @Override
    public synchronized void prefetch(int key) {
        Entry entry = entry(key);
        if (entry.fresh == null) {
            startPrefetch(entry);
        }
    }

    @Override
    public INDArray take(int key) {
        INDArray fresh;
        long id;
        synchronized (this) {
            Entry entry = entry(key);
            if (entry.fresh == null) {
                startPrefetch(entry);
            }
            fresh = entry.fresh;
            entry.fresh = null;
            id = entry.id;
        }
        try {
            timedWait(id);
        } catch (RuntimeException e) {
            fresh.close();
            throw e;
        }
        if (cudaBackend && id != 0) {
            Nd4j.getAffinityManager().tagLocation(fresh, AffinityManager.Location.DEVICE);
        }
        return fresh;
    }

    @Override
    public void release(int key) {
        Entry entry;
        synchronized (this) {
            ensureOpen();
            entry = entries.remove(key);
            if (entry == null) {
                throw unknownKey(key);
            }
        }
        timedWait(entry.id);
        if (entry.fresh != null) {
            entry.fresh.close();
        }
        if (entry.owned != null) {
            entry.owned.close();
        }
        synchronized (this) {
            if (!closed && entry.id != 0) {
                agent.free(entry.id);
            }
        }
    }

    /** Counters; waits for the copies in flight so that their timings are known (call it
     *  between iterations, not inside one). */
    @Override
    public synchronized TierStats stats() {
        if (closed) {
            return finalStats;
        }
        NativeAgent.Stats s = agent.stats();
        return new TierStats("pinned-host", s.hostInUse, s.hostPeak, s.bytesOffloaded,
                s.bytesPrefetched, Math.round((s.offloadSeconds + s.prefetchSeconds) * 1e9),
                waitNanos.get());
    }

    @Override
    public void close() {
        List<Entry> left;
        synchronized (this) {
            if (closed) {
                return;
            }
            left = new ArrayList<>(entries.values());
            entries.clear();
            agent.synchronize();
            for (Entry e : left) {
                if (e.id != 0) {
                    agent.free(e.id);
                }
            }
            finalStats = stats();
            closed = true;
        }
        for (Entry e : left) {
            if (e.fresh != null) {
                e.fresh.close();
            }
            if (e.owned != null) {
                e.owned.close();
            }
        }
        agent.close();  // waits for calls still blocked in a wait
    }

    /** The side-agent library this tier runs on. */
    public Path library() {
        return agent.library();
    }

    // -- memory -----------------------------------------------------------------------------

    private void startPrefetch(Entry entry) {  // holds this
        INDArray fresh = entry.spec.allocateDetached();
        if (entry.id != 0) {
            try {
                agent.rebindExternal(entry.id, address(fresh, false));
                agent.prefetch(entry.id);
                // Back to HOST at once (external memory stays with ND4J): the next take can
                // read the slot again into another array; waits still see this copy.
                agent.releaseDevice(entry.id);
            } catch (RuntimeException e) {
                fresh.close();
                throw e;
            }
        }
        entry.fresh = fresh;
    }

    /** Arrays whose bytes cannot be copied where they lie are copied to a contiguous one first;
     *  on CUDA also views at an offset, whose device address is not checked yet. */
    private boolean copyFirst(INDArray array) {
        return !ArraySpec.isContiguous(array) || (cudaBackend && array.data().offset() != 0);
    }

    /** Where the agent copies from or to: the host buffer (CPU backend) or the device buffer. */
    private long address(INDArray array, boolean source) {
        if (!cudaBackend) {
            return ArraySpec.hostAddress(array);
        }
        if (source) {
            Nd4j.getAffinityManager().ensureLocation(array, AffinityManager.Location.DEVICE);
            Nd4j.getExecutioner().commit();  // the kernels writing it are done before the copy
        }
        return CudaPointers.device(array.data());
    }

    /** ND4J's CUDA allocator, by reflection (the CUDA backend is not on this jar's classpath). */
    private static final class CudaPointers {
        static long device(DataBuffer buffer) {
            try {
                Class<?> c = Class.forName("org.nd4j.jita.allocator.impl.AtomicAllocator");
                Object allocator = c.getMethod("getInstance").invoke(null);
                Object pointer = c.getMethod("getPointer", DataBuffer.class).invoke(allocator, buffer);
                return ((org.bytedeco.javacpp.Pointer) pointer).address();
            } catch (ReflectiveOperationException | ClassCastException e) {
                throw new IllegalStateException("cannot get the device pointer of an ND4J CUDA "
                        + "buffer through org.nd4j.jita.allocator.impl.AtomicAllocator.getPointer ("
                        + e + "); this ND4J version's CUDA backend is not supported by the "
                        + "pinned host tier", e);
            }
        }
    }

    // -- waiting and errors -----------------------------------------------------------------

    private void timedWait(long id) {
        if (id == 0) {
            return;
        }
        long t0 = System.nanoTime();
        try {
            agent.await(id);
        } finally {
            waitNanos.addAndGet(System.nanoTime() - t0);
        }
    }

    private Entry entry(int key) {  // holds this
        ensureOpen();
        Entry e = entries.get(key);
        if (e == null) {
            throw unknownKey(key);
        }
        return e;
    }

    private static IllegalArgumentException unknownKey(int key) {
        return new IllegalArgumentException("key " + key + " is not in the pinned host tier "
                + "(never offloaded, or already released); offload(" + key + ", array) first");
    }

    private void ensureOpen() {  // holds this
        if (closed) {
            throw new IllegalStateException("the pinned host tier is closed; open a new "
                    + "PinnedHostTier");
        }
    }
}
