package org.pyd4j.train;

import java.util.List;

import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * What the plan's replay holds for one node during an iteration: its output and output gradient while
 * live, what its layer kept for backward, and where its output stands with the offload tier. Shared by
 * the record loop ({@link PlanInterpreter}) and the layer steps ({@link ComputeSteps}), which both
 * change it.
 */
final class NodeState {
    Held y;                      // its output (activations), while live
    Held dy;                     // the gradient of the loss with respect to its output, while live
    List<INDArray> caches;       // what its layer kept for its backward step (null: nothing recorded)
    long cacheBytes;             // their bytes, counted in live
    boolean ready;               // its layer holds the state its backward step needs
    INDArray[] bound;            // the inputs its layer was last given
    long[] rng;                  // random state before its first forward: a recomputation replays it
    boolean hostCopy;            // its output has a copy in the offload tier
    boolean offloadPending;      // ... still being written
    boolean incoming;            // ... being brought back (prefetched, not yet taken)
    boolean cut;                 // a reader's backward passed no gradient back to it (a FrozenLayer)
}
