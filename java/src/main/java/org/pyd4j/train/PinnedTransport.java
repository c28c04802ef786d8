package org.pyd4j.train;

import java.util.List;

import org.nd4j.linalg.api.buffer.DataBuffer;
import org.nd4j.linalg.api.concurrency.AffinityManager;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * The pinned host tier's transport: the native side-agent's pinned host pool, copies on its offload
 * and prefetch streams (see {@link PinnedHostTier} for what it guarantees).
 */
final class PinnedTransport implements TierTransport<PinnedTransport.Slot> {
    final NativeAgent agent;
    private final boolean cudaBackend;

    /** One key's agent buffer, and the tier's contiguous copy of a strided view until it is written. */
    static final class Slot {
        final long id;       // the agent's buffer; 0 for an empty array (nothing to copy)
        INDArray owned;

        Slot(long id, INDArray owned) {
            this.id = id;
            this.owned = owned;
        }
    }

    PinnedTransport(long hostPoolBytes, int deviceOrdinal) {
        if (hostPoolBytes < NativeAgent.ALIGNMENT) {
            throw new IllegalArgumentException("hostPoolBytes=" + hostPoolBytes + ": give the "
                    + "pinned host pool's size in bytes, at least the plan's peak of offloaded "
                    + "bytes (minimum " + NativeAgent.ALIGNMENT + ")");
        }
        boolean nd4jOnCpu = Nd4j.getEnvironment().isCPU();
        PinnedHostTier.checkBackends(NativeAgent.buildIsCuda(), nd4jOnCpu, NativeAgent.findLibrary());
        this.agent = new NativeAgent(hostPoolBytes, deviceOrdinal);
        this.cudaBackend = !nd4jOnCpu;
    }

    @Override
    public Slot write(int key, ArraySpec spec, INDArray array, int keysHeld) {
        if (spec.bytes == 0) {
            return new Slot(0, null);
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
                        + " needs " + spec.bytes + " bytes (" + spec + "), " + keysHeld
                        + " keys held; create the tier with a larger hostPoolBytes (new "
                        + "PinnedHostTier(hostPoolBytes)) or release keys before offloading more. "
                        + e.getMessage(), e);
            }
            throw e;
        }
        return new Slot(id, owned);
    }

    @Override
    public void awaitWritten(int key, Slot slot) {
        await(slot.id);
    }

    @Override
    public void written(Slot slot) {
        if (slot.owned != null) {
            slot.owned.close();
            slot.owned = null;
        }
    }

    @Override
    public Copy read(int key, Slot slot, INDArray fresh) {
        if (slot.id == 0) {
            return DONE;
        }
        agent.rebindExternal(slot.id, address(fresh, false));
        agent.prefetch(slot.id);
        // Back to HOST at once (external memory stays with ND4J): the next take can read the
        // slot again into another array; waits still see this copy.
        agent.releaseDevice(slot.id);
        return () -> await(slot.id);
    }

    @Override
    public INDArray taken(Slot slot, INDArray fresh) {
        if (cudaBackend && slot.id != 0) {
            Nd4j.getAffinityManager().tagLocation(fresh, AffinityManager.Location.DEVICE);
        }
        return fresh;
    }

    @Override
    public void settle(int key, Slot slot, Copy reading) {
        await(slot.id);
    }

    @Override
    public void drop(Slot slot, boolean open) {
        if (slot.owned != null) {
            slot.owned.close();
            slot.owned = null;
        }
        if (open && slot.id != 0) {
            agent.free(slot.id);
        }
    }

    /** Waits for the copies in flight so that their timings are known. */
    @Override
    public TierStats stats(long waitNanos) {
        NativeAgent.Stats s = agent.stats();
        return new TierStats("pinned-host", s.hostInUse, s.hostPeak, s.bytesOffloaded,
                s.bytesPrefetched, Math.round((s.offloadSeconds + s.prefetchSeconds) * 1e9), waitNanos);
    }

    @Override
    public void closing(List<Slot> left) {
        agent.synchronize();
        for (Slot s : left) {
            if (s.id != 0) {
                agent.free(s.id);
            }
        }
    }

    @Override
    public boolean stop() {
        return true;  // closing() waited for every copy
    }

    @Override
    public void close() {
        agent.close();  // waits for calls still blocked in a wait
    }

    private void await(long id) {
        if (id != 0) {
            agent.await(id);
        }
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

}
