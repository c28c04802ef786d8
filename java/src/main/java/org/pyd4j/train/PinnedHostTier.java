package org.pyd4j.train;

import java.nio.file.Path;

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
public final class PinnedHostTier extends KeyedTier<PinnedTransport.Slot> {
    private final PinnedTransport transport;

    /** A tier with a pinned host pool of {@code hostPoolBytes} (GPU 0 for the CUDA build). */
    public PinnedHostTier(long hostPoolBytes) {
        this(hostPoolBytes, 0);
    }

    /** A tier with a pinned host pool of {@code hostPoolBytes} for GPU {@code deviceOrdinal}. */
    public PinnedHostTier(long hostPoolBytes, int deviceOrdinal) {
        this(new PinnedTransport(hostPoolBytes, deviceOrdinal));
    }

    private PinnedHostTier(PinnedTransport transport) {
        super(transport, "pinned host tier", "PinnedHostTier");
        this.transport = transport;
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

    /** The side-agent library this tier runs on. */
    public Path library() {
        return transport.agent.library();
    }
}
