package org.pyd4j.train;

/**
 * What planned training did, summed over its iterations. Bytes are those of the arrays the
 * trainer held (activations, their gradients, the arrays DL4J's layers keep between forward and
 * backward), counted when they are created and when they are closed.
 */
public final class TrainStats {
    public long iterations;
    public long forwards;
    public long recomputes;         // RECOMPUTE records run
    public long rebuilds;           // forward steps the plan did not ask for, run to restore a layer's state
    public long chunkedSteps;       // convolution steps run in batch slices (the plan's batch-chunk algorithm)
    public long offloads;
    public long prefetches;
    public long peakLiveBytes;      // largest bytes held at once, over all iterations
    public long plannedPeakBytes;   // what the plan predicted (-1: not given)
    public long workingMemoryBytes; // the working-memory workspace (temporaries of one step; DL4J-sized)
    public long leftToGc;           // arrays the trainer released that ND4J would not close (the GC frees them)
    public long leftToGcBytes;
    public long sweptBytes;         // step temporaries DL4J made outside workspaces, closed right after the step
    public boolean mallocReturnsMemory; // glibc's mmap threshold fixed (see ReturnFreedMemory)
    public boolean bufferPool;      // released buffers kept for later arrays (off for plans made for the least memory)
    public long pooledReuses;       // arrays made on a buffer the trainer released earlier (see BufferPool)
    public long pooledReusedBytes;
    public long staleReleases;      // releases of a buffer already handed out again, ignored (see BufferPool)
    public long iterationNanos;     // time in planned iterations (the gradient step; DL4J's updater step not included)
    public long layerNanos;         // of which inside DL4J's forward and backward steps (the rest: the trainer's own work)
    public TierStats tier;          // null without a tier

    /** One JSON object (no dependencies). */
    public String toJson() {
        StringBuilder sb = new StringBuilder("{");
        sb.append("\"iterations\": ").append(iterations)
                .append(", \"forwards\": ").append(forwards)
                .append(", \"recomputes\": ").append(recomputes)
                .append(", \"rebuilds\": ").append(rebuilds)
                .append(", \"chunked_steps\": ").append(chunkedSteps)
                .append(", \"offloads\": ").append(offloads)
                .append(", \"prefetches\": ").append(prefetches)
                .append(", \"peak_live_bytes\": ").append(peakLiveBytes)
                .append(", \"planned_peak_bytes\": ").append(plannedPeakBytes)
                .append(", \"working_memory_bytes\": ").append(workingMemoryBytes)
                .append(", \"left_to_gc\": ").append(leftToGc)
                .append(", \"left_to_gc_bytes\": ").append(leftToGcBytes)
                .append(", \"swept_bytes\": ").append(sweptBytes)
                .append(", \"malloc_returns_memory\": ").append(mallocReturnsMemory)
                .append(", \"buffer_pool\": ").append(bufferPool)
                .append(", \"pooled_reuses\": ").append(pooledReuses)
                .append(", \"pooled_reused_bytes\": ").append(pooledReusedBytes)
                .append(", \"stale_releases\": ").append(staleReleases)
                .append(", \"iteration_s\": ").append(iterationNanos / 1e9)
                .append(", \"layer_s\": ").append(layerNanos / 1e9);
        if (tier != null) {
            sb.append(", \"tier\": {\"name\": \"").append(tier.tier).append("\", \"bytes_offloaded\": ").append(tier.bytesOffloaded)
                    .append(", \"bytes_prefetched\": ").append(tier.bytesPrefetched)
                    .append(", \"peak_bytes_held\": ").append(tier.peakBytesHeld)
                    .append(", \"copy_s\": ").append(tier.copyNanos / 1e9)
                    .append(", \"wait_s\": ").append(tier.waitNanos / 1e9)
                    .append(", \"hidden_share\": ").append(tier.hiddenShare()).append('}');
        }
        return sb.append('}').toString();
    }

    @Override
    public String toString() {
        return toJson();
    }
}
