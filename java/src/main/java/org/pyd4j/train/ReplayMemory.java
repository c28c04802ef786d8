package org.pyd4j.train;

import java.util.List;

import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * The memory the plan's replay holds outside workspaces (its outputs, gradients and what layers keep),
 * and the buffer pool bounded by it: released buffers are kept for the next arrays of their size only
 * while the replay holds less than its own peak, so that the pool never raises it. Apart from the
 * record loop because the accounting is the same whatever record released an array.
 */
final class ReplayMemory {
    private final BufferPool pool;
    private final TrainStats stats;
    private final NetworkNodes nodes;
    private final long parameterBytes;   // room the pool leaves between iterations for DL4J's update step
    private long live;
    // The pool's bound: the most memory out of workspaces the replay had at once (arrays held when a
    // step began plus what the step made), and what each record's step made, this iteration and the last.
    private long outPeak;
    private long stepStartLive;
    private long[] stepMade = new long[0];
    private long[] lastStepMade;   // null in the first iteration: the pool keeps nothing before it knows the steps

    ReplayMemory(BufferPool pool, TrainStats stats, NetworkNodes nodes, long parameterBytes) {
        this.pool = pool;
        this.stats = stats;
        this.nodes = nodes;
        this.parameterBytes = parameterBytes;
    }

    /** An iteration of {@code records} records begins: nothing held yet. */
    void beginIteration(int records) {
        live = 0;
        stepMade = new long[records];
    }

    /** The iteration ended and everything was released: the pool keeps what fits under the peak. */
    void endIteration() {
        pool.prune();
        // between iterations DL4J's update step makes arrays of its own, up to the parameters' size
        // (without this room the pool raised deep_cnn_bn's liveness peak 2.8%, with it 0.5%: benchmarks/buffer_pool.py)
        pool.trim(outPeak - parameterBytes);
        lastStepMade = stepMade;
    }

    /** Nothing is held any more (the end of an iteration, or a failure). */
    void clear() {
        live = 0;
    }

    /** {@code bytes} are no longer held by the replay (closed by their owner, or handed on). */
    void forget(long bytes) {
        live -= bytes;
    }

    /** Give up a held array: its bytes off what the replay holds, then {@link #release}. */
    void drop(Held h) {
        live -= h.bytes;
        release(h);
    }

    /**
     * Close what DL4J handed out during a step outside workspaces and neither returned ({@code
     * kept}) nor left in the node's layer or vertex: the step's temporaries. {@code at}: the step's record.
     */
    void sweep(StepWorkspaceMgr m, int node, int at, INDArray... kept) {
        List<INDArray> made = m.drain();
        // what the step made and still has, and the largest array it made and closed again (a sliced
        // step's slices come and go one at a time)
        long closed = 0;
        for (INDArray a : made) {
            if (a.wasClosed()) closed = Math.max(closed, Held.bytes(a));
            else stepMade[at] += Held.bytes(a);
        }
        stepMade[at] += closed;
        outPeak = Math.max(outPeak, stepStartLive + stepMade[at]);
        if (made.isEmpty() || nodes.opaque(node)) return;   // an opaque step's arrays may live on where we cannot see
        java.util.Set<Object> keep = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
        for (INDArray a : kept) if (a != null) keep.add(Held.root(a));
        for (INDArray a : nodes.referenced(node)) keep.add(Held.root(a));
        for (INDArray a : made) {
            if (a.wasClosed() || keep.contains(Held.root(a)) || !a.closeable()) continue;
            stats.sweptBytes += Held.bytes(a);
            if (!pool.release(Held.root(a), Long.MAX_VALUE, live, poolLimit())) a.close();
        }
    }

    /** Give up a held array: its buffer to the pool (which keeps it for the next array of its size
     *  while the trainer holds less than its peak) or closed. Callers take its bytes off {@code live} first
     *  ({@link #drop} does both). */
    void release(Held h) {
        if (h.base != null && pool.release(h.base, h.since, live, poolLimit())) return;
        if (!h.close()) {
            stats.leftToGc++;
            stats.leftToGcBytes += h.bytes;
        }
    }

    /** What the pool and the held arrays may have together: the replay's own peak out of workspaces
     *  (0 in the first iteration), so that the pool never raises the peak. */
    private long poolLimit() {
        return lastStepMade == null ? 0 : outPeak;
    }

    /** Before the step of record {@code at} makes arrays: the pool gives up what this step would take
     *  above the peak (what it made in the last iteration). */
    void stepStart(int at) {
        stepStartLive = live;
        if (lastStepMade != null) pool.trim(outPeak - live - lastStepMade[at]);
    }

    void hold(long bytes) {
        live += bytes;
        if (live > stats.peakLiveBytes) stats.peakLiveBytes = live;
    }

}
