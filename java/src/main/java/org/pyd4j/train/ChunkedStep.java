package org.pyd4j.train;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.workspace.ArrayType;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.indexing.INDArrayIndex;
import org.nd4j.linalg.indexing.NDArrayIndex;

/**
 * A DL4J layer's forward or backward step run on slices of the batch (the plan's batch-chunk
 * algorithm: SuperNeurons' dynamic convolution workspace for DL4J, extended to the other layer whose
 * working memory DL4J sizes by the batch and whose samples are independent). DL4J sizes a
 * convolution's working memory by the batch (the im2col patch matrix, its gradient, the col2im
 * buffer, the recomputed pre-activation and its copies) and LRN's backward step holds eight
 * input-sized arrays (it recomputes the forward pass and its scale); the working-memory workspace
 * keeps the largest step's size all iteration, and a step in k slices needs about 1/k of it.
 *
 * <ul>
 *   <li>forward: the layer's own {@code activate} on each slice of its input, each in its own
 *       working-memory scope (so the workspace is reset between slices), each slice's output
 *       copied into one output array of the whole batch (laid out as DL4J lays out its own);
 *       afterwards the layer holds the whole input again, as after an unsliced forward step;</li>
 *   <li>backward: for each slice, the layer's input set to that slice of its input and its own
 *       {@code backpropGradient} called with the slice of the output gradient; the slice's input
 *       gradient is copied into one array of the whole batch and the parameter gradients (which
 *       DL4J writes over the layer's gradient view each time) are summed outside the workspace and
 *       written back into the view at the end -- the gradient of the batch's loss is the sum over
 *       its samples, so the result is DL4J's up to the order of the floating-point additions.</li>
 * </ul>
 *
 * Exact only where every sample's computation is independent of the others and the layer keeps
 * nothing from its forward step for its backward one: a plain ConvolutionLayer without input dropout
 * (one mask is drawn for the whole batch), and LocalResponseNormalization (across channels within a
 * sample; its backward step recomputes from the input, so the slices give DL4J's own numbers);
 * {@link #problem} names what else is refused. An input preprocessor (DL4J's reshape a flat or
 * recurrent input into images per sample) runs on the whole batch before the slices, and its
 * backward after them.
 */
final class ChunkedStep {
    static final String CONVOLUTION = "org.deeplearning4j.nn.layers.convolution.ConvolutionLayer";
    static final String LRN = "org.deeplearning4j.nn.layers.normalization.LocalResponseNormalization";
    static final String ACTIVATION = "org.deeplearning4j.nn.layers.ActivationLayer";

    private ChunkedStep() {
    }

    /** Why {@code layer} cannot run in batch chunks (null: it can). A node the plan marks {@code sliced}
     *  is a batch normalization in its two-pass form ({@link SlicedBatchNorm}, statistics over every
     *  slice) or an activation layer (DL4J's own step, slice by slice). */
    static String problem(Layer layer, String name, int chunks, boolean sliced) {
        String fix = "; write the plan without batch chunks for it (no budget, or a larger one: "
                + "`pyd4j plan ... --emit-plan FILE` without --budget)";
        String kind = layer == null ? null : layer.getClass().getName();
        if (sliced && !ACTIVATION.equals(kind)) {
            String p = SlicedBatchNorm.problem(layer, name);
            return p == null ? null : p + fix;
        }
        if (sliced && LayerState.inputDropout(layer) != null) {
            return "the plan runs " + name + " in batch slices, but it has input dropout: fit() draws one mask "
                    + "for the whole batch, which slices cannot reproduce" + fix;
        }
        if (sliced) return null;
        if (!CONVOLUTION.equals(kind) && !LRN.equals(kind)) {
            return "the plan runs " + name + " (" + (layer == null ? "not a layer" : layer.getClass().getSimpleName())
                    + ") in " + chunks + " batch chunks; only a ConvolutionLayer or LocalResponseNormalization is run in batch chunks"
                    + (SlicedBatchNorm.handles(layer) ? ", and a batch normalization only in its two-pass form (a node the "
                    + "plan marks sliced, plan schema 2)" : "") + fix;
        }
        // LocalResponseNormalization ignores an input dropout setting (it draws no mask): only a convolution applies one
        if (CONVOLUTION.equals(kind) && LayerState.inputDropout(layer) != null) {
            return "the plan runs " + name + " in " + chunks + " batch chunks, but it has input dropout: "
                    + "fit() draws one mask for the whole batch, which slices cannot reproduce" + fix;
        }
        return null;
    }

    /** Rows of the largest slice, as the planner counts them (pyd4j.sched.deps.chunk_rows). */
    static long rows(long batch, int chunks) {
        long k = Math.max(1, Math.min(chunks, batch));
        return (batch + k - 1) / k;
    }

    /** The layer's forward step on {@code x} (its whole input) in slices; returns the whole output. */
    static INDArray forward(Layer layer, INDArray x, int chunks, StepWorkspaceMgr mgr) {
        if (SlicedBatchNorm.handles(layer)) return SlicedBatchNorm.forward(layer, x, chunks, mgr);
        long n = x.size(0);
        long step = rows(n, chunks);
        INDArray out = null;
        try {
            for (long a = 0; a < n; a += step) {
                long b = Math.min(n, a + step);
                try (MemoryWorkspace ws = mgr.notifyScopeEntered(ArrayType.FF_WORKING_MEM)) {
                    INDArray part = layer.activate(slice(x, a, b), true, mgr);
                    if (out == null) out = like(part, n, mgr);
                    slice(out, a, b).assign(part);
                    free(part);
                }
            }
        } finally {
            layer.setInput(x, mgr);   // the layer holds its whole input again (its backward step reads it)
        }
        return out;
    }

    /**
     * The layer's backward step in slices: the gradient of its whole input, with the parameter
     * gradients of the whole batch in the layer's gradient view (the Gradient's entries).
     */
    static Pair<Gradient, INDArray> backward(Layer layer, INDArray epsilon, int chunks, StepWorkspaceMgr mgr) {
        return backward(layer, epsilon, chunks, mgr, false);
    }

    /** As above; {@code inPlace}: the input gradient is written over {@code epsilon}, slice by slice, each
     *  slice's after its own step read it (a layer whose input and output are alike; the caller hands
     *  {@code epsilon} on as the input's gradient). */
    static Pair<Gradient, INDArray> backward(Layer layer, INDArray epsilon, int chunks, StepWorkspaceMgr mgr,
                                             boolean inPlace) {
        if (SlicedBatchNorm.handles(layer)) return SlicedBatchNorm.backward(layer, epsilon, chunks, mgr, inPlace);
        INDArray x = layer.input();
        long n = x.size(0);
        long step = rows(n, chunks);
        INDArray epsOut = null;
        Gradient gradient = null;
        Map<String, INDArray> sums = new LinkedHashMap<>();
        try {
            for (long a = 0; a < n; a += step) {
                long b = Math.min(n, a + step);
                try (MemoryWorkspace ws = mgr.notifyScopeEntered(ArrayType.BP_WORKING_MEM)) {
                    layer.setInput(slice(x, a, b), mgr);
                    Pair<Gradient, INDArray> p = layer.backpropGradient(slice(epsilon, a, b), mgr);
                    INDArray part = p.getSecond();
                    if (epsOut == null) epsOut = inPlace ? epsilon : like(part, n, mgr);   // in place: over dy's slice, read
                    slice(epsOut, a, b).assign(part);
                    free(part);
                    gradient = p.getFirst();
                    if (gradient == null) continue;   // a layer without parameters may return none
                    for (Map.Entry<String, INDArray> e : gradient.gradientForVariable().entrySet()) {
                        INDArray sum = sums.get(e.getKey());
                        if (sum == null) {
                            try (MemoryWorkspace out = Nd4j.getMemoryManager().scopeOutOfWorkspaces()) {
                                sums.put(e.getKey(), e.getValue().dup(e.getValue().ordering()));
                            }
                        } else {
                            sum.addi(e.getValue());
                        }
                    }
                }
            }
            // DL4J's entries are the layer's gradient views: they now get the whole batch's sums
            if (gradient != null) {
                for (Map.Entry<String, INDArray> e : gradient.gradientForVariable().entrySet()) {
                    e.getValue().assign(sums.get(e.getKey()));
                }
            }
        } finally {
            layer.setInput(x, mgr);
            for (INDArray s : sums.values()) s.close();
        }
        return new Pair<>(gradient, epsOut);
    }

    /** Rows [a, b) of {@code a}'s first dimension (a view). */
    private static INDArray slice(INDArray arr, long a, long b) {
        INDArrayIndex[] idx = new INDArrayIndex[arr.rank()];
        idx[0] = NDArrayIndex.interval(a, b);
        for (int d = 1; d < idx.length; d++) idx[d] = NDArrayIndex.all();
        return arr.get(idx);
    }

    /**
     * A new array outside workspaces for {@code n} samples laid out as {@code part} is (DL4J's
     * convolution outputs and input gradients are permuted views: the same layout keeps the steps
     * after it working on what they get from an unsliced step).
     */
    private static INDArray like(INDArray part, long n, StepWorkspaceMgr mgr) {
        int rank = part.rank();
        long[] shape = part.shape().clone();
        shape[0] = n;
        long[] strides = part.stride();
        List<Integer> dims = new ArrayList<>();
        for (int d = 0; d < rank; d++) dims.add(d);
        // outer dimensions first; a dimension of size 1 has no stride of its own (it equals the next
        // inner one's extent), so among equal strides it is the inner one
        dims.sort((p, q) -> strides[p] != strides[q] ? Long.compare(strides[q], strides[p])
                : (part.size(p) == 1) != (part.size(q) == 1) ? (part.size(p) == 1 ? 1 : -1) : Integer.compare(p, q));
        int[] order = new int[rank];
        long[] physical = new long[rank];
        for (int d = 0; d < rank; d++) {
            order[d] = dims.get(d);
            physical[d] = shape[order[d]];
        }
        int[] inverse = new int[rank];
        for (int d = 0; d < rank; d++) inverse[order[d]] = d;
        INDArray base = mgr.outside(part.dataType(), physical, 'c');
        boolean identity = true;
        for (int d = 0; d < rank; d++) identity &= order[d] == d;
        return identity ? base : base.permute(inverse);
    }

    /** Close a slice's result now (its memory is copied): it is not the trainer's to keep. */
    private static void free(INDArray a) {
        if (a == null || a.isAttached()) return;
        Held.own(a).close();
    }
}
