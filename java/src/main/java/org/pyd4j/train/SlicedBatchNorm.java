package org.pyd4j.train;

import java.util.Map;

import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.CNN2DFormat;
import org.deeplearning4j.nn.gradient.DefaultGradient;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.layers.BaseLayer;
import org.deeplearning4j.nn.params.BatchNormalizationParamInitializer;
import org.deeplearning4j.nn.workspace.ArrayType;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.api.ops.impl.broadcast.BroadcastAddOp;
import org.nd4j.linalg.api.ops.impl.broadcast.BroadcastMulOp;
import org.nd4j.linalg.api.ops.impl.broadcast.BroadcastSubOp;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.indexing.INDArrayIndex;
import org.nd4j.linalg.indexing.NDArrayIndex;

/**
 * DL4J's BatchNormalization training step in slices of the batch, exactly: no step holds more than
 * one slice's temporaries beside the whole input, output and their gradients.
 *
 * <p>The statistics span the batch, so each direction makes two passes over the slices:
 * <ul>
 *   <li>forward: the per-channel mean and biased variance of each slice, combined over the slices
 *       in double (Chan et al.'s pairwise rule); then each slice normalized with the whole batch's mean
 *       and standard deviation in DL4J's order of operations, {@code y = ((x - mean) / std) gamma + beta},
 *       the standard deviation rounded as DL4J rounds it (in a deep network another order's rounding
 *       grows layer by layer: with gamma / std taken first, ResNet50's last gradients came out 8x further
 *       from the exact ones than DL4J's);</li>
 *   <li>backward: the batch statistics again from the layer's input (nothing is kept from the
 *       forward step), the per-channel sums of {@code dy} and {@code dy * xHat} over every slice, then
 *       each slice's {@code dx = gamma / std * (dy - sum(dy) / m - xHat * sum(dy xHat) / m)} (m: the
 *       values per channel in the batch); the parameter gradients and DL4J's running-statistics
 *       "gradients" ({@code (1 - decay) (global - batch)}, or the log10 standard deviation's) written
 *       into the layer's gradient views, as DL4J's own backprop writes them.</li>
 * </ul>
 * The result equals DL4J's whole-batch step up to the order of floating-point additions
 * (tests/train/test_sliced_batch_norm.py holds both to a float64 reference). Supported: inputs of
 * rank 2 and rank 4 (NCHW or NHWC), learned gamma and beta; {@link #problem} names the rest.
 */
final class SlicedBatchNorm {
    static final String CLASS = "org.deeplearning4j.nn.layers.normalization.BatchNormalization";

    private SlicedBatchNorm() {
    }

    static boolean handles(Layer layer) {
        return layer != null && CLASS.equals(layer.getClass().getName());
    }

    private static org.deeplearning4j.nn.conf.layers.BatchNormalization conf(Layer layer) {
        return (org.deeplearning4j.nn.conf.layers.BatchNormalization) layer.conf().getLayer();
    }

    /** Why the layer cannot run as a sliced batch normalization (null: it can). */
    static String problem(Layer layer, String name) {
        if (!handles(layer)) {
            return "the plan runs " + name + " as a sliced batch normalization, but it is a "
                    + (layer == null ? "vertex" : layer.getClass().getSimpleName());
        }
        if (conf(layer).isLockGammaBeta()) {
            return "the plan runs " + name + " as a sliced batch normalization, which learns gamma and beta; "
                    + "this one locks them (lockGammaBeta)";
        }
        if (LayerState.inputDropout(layer) != null) {
            return "the plan runs " + name + " as a sliced batch normalization, but it has input dropout "
                    + "(one mask drawn for the whole batch)";
        }
        return null;
    }

    /** The per-channel statistics of a batch: mean, biased variance and the values per channel. */
    private static final class Stats {
        final INDArray mean;   // [C], the layer's data type
        final INDArray var;
        final INDArray std;    // sqrt(var + eps)
        final long m;

        Stats(INDArray mean, INDArray var, INDArray std, long m) {
            this.mean = mean;
            this.var = var;
            this.std = std;
            this.m = m;
        }
    }

    private static int channelDim(Layer layer, INDArray x) {
        if (x.rank() == 2) return 1;
        if (x.rank() != 4) {
            throw new UnsupportedOperationException("a sliced batch normalization takes inputs of rank 2 or 4; "
                    + "layer " + layer.conf().getLayer().getLayerName() + " has one of shape "
                    + java.util.Arrays.toString(x.shape()));
        }
        return conf(layer).getCnn2DFormat() == CNN2DFormat.NCHW ? 1 : 3;
    }

    private static int[] otherDims(int rank, int ch) {
        int[] out = new int[rank - 1];
        for (int d = 0, k = 0; d < rank; d++) if (d != ch) out[k++] = d;
        return out;
    }

    /**
     * The batch's per-channel mean and biased variance from each slice's own (ND4J's mean and var, as
     * DL4J's step takes them over the whole batch), combined in double by Chan et al.'s pairwise rule:
     * no temporary of a slice's size, and with one slice exactly DL4J's figures.
     */
    private static Stats stats(Layer layer, INDArray x, int ch, int chunks, StepWorkspaceMgr mgr, ArrayType scope) {
        long n = x.size(0);
        long step = ChunkedStep.rows(n, chunks);
        int[] dims = otherDims(x.rank(), ch);
        long c = x.size(ch);
        long perSample = x.length() / c / n;
        INDArray mean = null;   // double, [C]
        INDArray m2 = null;     // sum of squared deviations, double
        long seen = 0;
        for (long a = 0; a < n; a += step) {
            long b = Math.min(n, a + step);
            long count = (b - a) * perSample;
            INDArray sliceMean;
            INDArray sliceM2;
            try (MemoryWorkspace ws = mgr.notifyScopeEntered(scope)) {
                INDArray xs = ordered(slice(x, a, b));
                try (MemoryWorkspace out = Nd4j.getMemoryManager().scopeOutOfWorkspaces()) {
                    sliceMean = xs.mean(dims).castTo(DataType.DOUBLE).reshape(c);
                    sliceM2 = xs.var(false, dims).castTo(DataType.DOUBLE).reshape(c).muli(count);
                }
            }
            if (mean == null) {
                mean = sliceMean;
                m2 = sliceM2;
            } else {   // (mean, m2) of seen values and of count more: delta = their means' difference
                INDArray delta = sliceMean.sub(mean);
                double total = seen + count;
                mean.addi(delta.mul(count / total));
                m2.addi(sliceM2).addi(delta.muli(delta).muli((double) seen * count / total));
                close(delta, sliceMean, sliceM2);
            }
            seen += count;
        }
        INDArray var64 = m2.div(seen);
        INDArray out = outside(x.dataType(), c).assign(mean);
        INDArray var = outside(x.dataType(), c).assign(var64);
        INDArray std = org.nd4j.linalg.ops.transforms.Transforms.sqrt(var.dup().addi(conf(layer).getEps()), false);
        close(mean, m2, var64);
        return new Stats(out, var, std, seen);
    }

    /** The forward (training) step on {@code x}, its whole input, in slices; returns the whole output. */
    static INDArray forward(Layer layer, INDArray x, int chunks, StepWorkspaceMgr mgr) {
        layer.setInput(x, mgr);   // the layer holds its whole input, as after DL4J's own forward step
        int ch = channelDim(layer, x);
        Stats s = stats(layer, x, ch, chunks, mgr, ArrayType.FF_WORKING_MEM);
        INDArray gamma = layer.getParam(BatchNormalizationParamInitializer.GAMMA).reshape(s.mean.shape());
        INDArray beta = layer.getParam(BatchNormalizationParamInitializer.BETA).reshape(s.mean.shape());
        long n = x.size(0);
        long step = ChunkedStep.rows(n, chunks);
        INDArray out = mgr.outside(x.dataType(), x.shape(), 'c');
        try {
            for (long a = 0; a < n; a += step) {
                try (MemoryWorkspace ws = mgr.notifyScopeEntered(ArrayType.FF_WORKING_MEM)) {
                    long b = Math.min(n, a + step);
                    INDArray ys = slice(out, a, b);   // ((x - mean) / std) gamma + beta, in DL4J's order
                    Nd4j.getExecutioner().exec(new BroadcastSubOp(slice(x, a, b), s.mean, ys, ch));
                    Nd4j.getExecutioner().exec(new org.nd4j.linalg.api.ops.impl.broadcast.BroadcastDivOp(ys, s.std, ys, ch));
                    Nd4j.getExecutioner().exec(new BroadcastMulOp(ys, gamma, ys, ch));
                    Nd4j.getExecutioner().exec(new BroadcastAddOp(ys, beta, ys, ch));
                }
            }
        } finally {
            close(s.mean, s.var, s.std);
        }
        return out;
    }

    /**
     * The backward step in slices: the gradient of the whole input, with the parameter gradients and
     * the running-statistics updates in the layer's gradient views (the Gradient's entries, in DL4J's order).
     */
    static Pair<Gradient, INDArray> backward(Layer layer, INDArray epsilon, int chunks, StepWorkspaceMgr mgr) {
        return backward(layer, epsilon, chunks, mgr, false);
    }

    /**
     * As {@link #backward(Layer, INDArray, int, StepWorkspaceMgr)}; {@code inPlace}: the input gradient is
     * written over {@code epsilon} (each slice's after both passes read it), which the caller owns and
     * hands on: the step then holds no array of the input's size but those it reads.
     */
    static Pair<Gradient, INDArray> backward(Layer layer, INDArray epsilon, int chunks, StepWorkspaceMgr mgr,
                                             boolean inPlace) {
        INDArray x = layer.input();
        int ch = channelDim(layer, x);
        int[] dims = otherDims(x.rank(), ch);
        Stats s = stats(layer, x, ch, chunks, mgr, ArrayType.BP_WORKING_MEM);
        INDArray gamma = layer.getParam(BatchNormalizationParamInitializer.GAMMA).reshape(s.mean.shape());
        long n = x.size(0);
        long step = ChunkedStep.rows(n, chunks);
        INDArray dBeta = outside(DataType.DOUBLE, s.mean.length());
        INDArray dGamma = outside(DataType.DOUBLE, s.mean.length());
        INDArray dx = inPlace ? epsilon : mgr.outside(x.dataType(), x.shape(), 'c');
        INDArray scale = null;
        INDArray shift = null;
        INDArray slope = null;
        try {
            for (long a = 0; a < n; a += step) {   // pass 1: sum(dy) and sum(dy * xHat) per channel
                try (MemoryWorkspace ws = mgr.notifyScopeEntered(ArrayType.BP_WORKING_MEM)) {
                    long b = Math.min(n, a + step);
                    INDArray dy = slice(epsilon, a, b);
                    dBeta.addi(dy.sum(dims).castTo(DataType.DOUBLE));
                    dGamma.addi(normalized(ordered(slice(x, a, b)), s, ch).muli(dy).sum(dims).castTo(DataType.DOUBLE));
                }
            }
            scale = gamma.div(s.std);                                          // gamma / std
            shift = dBeta.div(s.m).castTo(x.dataType());                       // sum(dy) / m
            slope = dGamma.div(s.m).castTo(x.dataType());                      // sum(dy xHat) / m
            for (long a = 0; a < n; a += step) {   // pass 2: each slice's input gradient
                try (MemoryWorkspace ws = mgr.notifyScopeEntered(ArrayType.BP_WORKING_MEM)) {
                    long b = Math.min(n, a + step);
                    INDArray xHat = normalized(slice(x, a, b), s, ch);
                    Nd4j.getExecutioner().exec(new BroadcastMulOp(xHat, slope, xHat, ch));   // xHat * slope
                    INDArray ds = slice(dx, a, b);   // over dy's slice when in place: dy's slice is read first
                    Nd4j.getExecutioner().exec(new BroadcastSubOp(slice(epsilon, a, b), shift, ds, ch));
                    ds.subi(xHat);
                    Nd4j.getExecutioner().exec(new BroadcastMulOp(ds, scale, ds, ch));
                }
            }
            Gradient g = gradients(layer, s, dGamma, dBeta);
            return new Pair<>(g, dx);
        } finally {
            close(dBeta, dGamma, scale, shift, slope, s.mean, s.var, s.std);
        }
    }

    /** (x - mean) / std of one slice, in the current scope. */
    private static INDArray normalized(INDArray xs, Stats s, int ch) {
        INDArray h = Nd4j.getExecutioner().exec(new BroadcastSubOp(xs, s.mean, xs.ulike(), ch));
        return Nd4j.getExecutioner().exec(new org.nd4j.linalg.api.ops.impl.broadcast.BroadcastDivOp(h, s.std, h, ch));
    }

    /** The layer's gradient views filled as DL4J's backprop fills them, in its order. */
    @SuppressWarnings("unchecked")
    private static Gradient gradients(Layer layer, Stats s, INDArray dGamma, INDArray dBeta) {
        org.deeplearning4j.nn.conf.layers.BatchNormalization conf = conf(layer);
        Map<String, INDArray> views = (Map<String, INDArray>) Reflect.get(layer, BaseLayer.class, "gradientViews");
        double decay = conf.getDecay();
        INDArray dGammaView = views.get(BatchNormalizationParamInitializer.GAMMA);
        INDArray dBetaView = views.get(BatchNormalizationParamInitializer.BETA);
        dGammaView.assign(dGamma.reshape(dGammaView.shape()));
        dBetaView.assign(dBeta.reshape(dBetaView.shape()));
        Gradient g = new DefaultGradient();
        g.setGradientFor(BatchNormalizationParamInitializer.GAMMA, dGammaView);
        g.setGradientFor(BatchNormalizationParamInitializer.BETA, dBetaView);
        INDArray globalMean = layer.getParam(BatchNormalizationParamInitializer.GLOBAL_MEAN);
        INDArray dMean = views.get(BatchNormalizationParamInitializer.GLOBAL_MEAN);
        dMean.assign(globalMean.sub(s.mean.reshape(globalMean.shape())).muli(1 - decay));   // (1-d)(mean - batch mean)
        g.setGradientFor(BatchNormalizationParamInitializer.GLOBAL_MEAN, dMean);
        if (conf.isUseLogStd()) {
            // log10(std[t]) - log10(std[t+1]), with var[t+1] = d var[t] + (1-d) batch var: as DL4J computes it
            INDArray log10s = layer.getParam(BatchNormalizationParamInitializer.GLOBAL_LOG_STD);
            INDArray view = views.get(BatchNormalizationParamInitializer.GLOBAL_LOG_STD);
            INDArray vari = Nd4j.valueArrayOf(log10s.shape(), 10.0, globalMean.dataType());
            org.nd4j.linalg.ops.transforms.Transforms.pow(vari, log10s, false);
            vari.muli(vari);
            INDArray next = vari.mul(decay).addi(s.var.reshape(vari.shape()).mul(1 - decay));
            view.assign(org.nd4j.linalg.ops.transforms.Transforms.log(vari.divi(next), false)
                    .muli(1.0 / (2.0 * Math.log(10.0))));
            g.setGradientFor(BatchNormalizationParamInitializer.GLOBAL_LOG_STD, view);
        } else {
            INDArray globalVar = layer.getParam(BatchNormalizationParamInitializer.GLOBAL_VAR);
            INDArray dVar = views.get(BatchNormalizationParamInitializer.GLOBAL_VAR);
            dVar.assign(globalVar.sub(s.var.reshape(globalVar.shape())).muli(1 - decay));
            g.setGradientFor(BatchNormalizationParamInitializer.GLOBAL_VAR, dVar);
        }
        return g;
    }

    /**
     * The slice as DL4J's own step reads it: DL4J copies an input whose strides are not C order (a
     * convolution's output is a permuted view) before taking its statistics, and a reduction over
     * the copy adds in another order than over the view (on zoo Darknet19 the score moved 2.4e-4).
     */
    private static INDArray ordered(INDArray xs) {
        return org.nd4j.linalg.api.shape.Shape.strideDescendingCAscendingF(xs) ? xs : xs.dup('c');
    }

    /** Rows [a, b) of the first dimension (a view). */
    private static INDArray slice(INDArray arr, long a, long b) {
        INDArrayIndex[] idx = new INDArrayIndex[arr.rank()];
        idx[0] = NDArrayIndex.interval(a, b);
        for (int d = 1; d < idx.length; d++) idx[d] = NDArrayIndex.all();
        return arr.get(idx);
    }

    private static INDArray outside(DataType type, long length) {
        try (MemoryWorkspace ws = Nd4j.getMemoryManager().scopeOutOfWorkspaces()) {
            return Nd4j.zeros(type, length);
        }
    }

    private static void close(INDArray... arrays) {
        for (INDArray a : arrays) if (a != null && !a.isView() && !a.wasClosed() && a.closeable()) a.close();
    }
}
