package org.pyd4j.train;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.dropout.Dropout;
import org.deeplearning4j.nn.conf.dropout.IDropout;
import org.deeplearning4j.nn.conf.layers.BaseLayer;
import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * What a DL4J 1.0.0-M2.1 layer keeps between its forward and its backward step, measured with
 * ND4J on the CPU backend (tests/train/test_layer_facts.py asserts every entry against ND4J, so a
 * DL4J upgrade that changes one fails a test):
 *
 * <ul>
 *   <li>every layer keeps a reference to its input ({@code AbstractLayer.input});</li>
 *   <li>BatchNormalization keeps {@code xMu} and {@code xHat} (each the size of its input) and
 *       {@code std} (one value per channel); backprop nulls xMu and xHat, std stays;</li>
 *   <li>a layer with input dropout ({@code Dropout}) keeps the mask (the input's size) in its
 *       Dropout object until backprop nulls it; the dropped input replaces its input, in place
 *       when the network allows input modification (DL4J allows it for every layer but the
 *       first), else as a new array. The planned trainer forbids input modification, so a
 *       recomputed producer never sees a dropped tensor and the dropped input is the layer's own;</li>
 *   <li>no supported layer reads its own output in backprop (Dense and Convolution recompute their
 *       pre-activation from the stored input).</li>
 * </ul>
 *
 * This class finds those arrays, so that the trainer can release them the moment the plan says the
 * node's output is gone or its backward step is done, instead of leaving them to the garbage
 * collector.
 */
public final class LayerState {
    private LayerState() {
    }

    /**
     * DL4J layer classes whose steps are modelled (measured; exact classes, not subclasses). Every
     * other layer runs as an opaque step: its own activate/backpropGradient, its inputs kept until
     * its backward step ({@link #backwardReadsInput} is true), nothing it made closed by the trainer.
     */
    static final List<String> MODELLED_LAYERS = Arrays.asList(
            "org.deeplearning4j.nn.layers.feedforward.dense.DenseLayer",
            "org.deeplearning4j.nn.layers.OutputLayer",
            "org.deeplearning4j.nn.layers.convolution.ConvolutionLayer",
            "org.deeplearning4j.nn.layers.convolution.subsampling.SubsamplingLayer",
            "org.deeplearning4j.nn.layers.normalization.BatchNormalization",
            "org.deeplearning4j.nn.layers.normalization.LocalResponseNormalization",
            "org.deeplearning4j.nn.layers.ActivationLayer",
            "org.deeplearning4j.nn.layers.DropoutLayer",
            "org.deeplearning4j.nn.layers.pooling.GlobalPoolingLayer");

    /**
     * Whether the layer's backprop needs its input array alive (measured by releasing it before
     * backprop; see the class comment). Average pooling reads no input value, but DL4J hands the
     * input to {@code avgpool2d_bp}, which fails on a released buffer: it needs its input.
     */
    public static boolean backwardReadsInput(Layer layer) {
        String name = layer.getClass().getSimpleName();
        if (opaque(layer)) return true;                          // an opaque step keeps its inputs
        if (name.equals("DropoutLayer")) return false;           // reads only its mask
        if (name.equals("GlobalPoolingLayer")) {                 // average: the input's shape only
            return ((org.deeplearning4j.nn.conf.layers.GlobalPoolingLayer) layer.conf().getLayer())
                    .getPoolingType() != org.deeplearning4j.nn.conf.layers.PoolingType.AVG;
        }
        return true;
    }

    /** Whether the layer runs as an opaque step (see {@link #MODELLED_LAYERS}). */
    static boolean opaque(Layer layer) {
        return !MODELLED_LAYERS.contains(layer.getClass().getName());
    }

    /** The layer's input-modification flag (wrappers that are not AbstractLayers: assumed allowed). */
    static boolean inputModificationAllowed(Layer layer) {
        return !(layer instanceof org.deeplearning4j.nn.layers.AbstractLayer)
                || ((org.deeplearning4j.nn.layers.AbstractLayer<?>) layer).isInputModificationAllowed();
    }

    /** Whether the layer's input dropout ran on its current input (it then owns the dropped copy); a wrapper
     *  (LastTimeStep, MaskZeroLayer, TimeDistributed, FrozenLayer) answers for the layer it wraps, which drops. */
    static boolean dropoutApplied(Layer layer) {
        while (layer instanceof org.deeplearning4j.nn.layers.wrapper.BaseWrapperLayer) {
            layer = ((org.deeplearning4j.nn.layers.wrapper.BaseWrapperLayer) layer).getUnderlying();
        }
        return layer instanceof org.deeplearning4j.nn.layers.AbstractLayer
                && ((org.deeplearning4j.nn.layers.AbstractLayer<?>) layer).isDropoutApplied();
    }

    /** Whether the layer applies its input dropout at all: DL4J's SameDiff layers ignore the setting (their
     *  activate() draws no mask), so they must get their input as fit() gives it -- the producer's own array, its
     *  layout included (a contiguous copy of a strided view takes another BLAS path, 1 ulp off). */
    static boolean appliesInputDropout(Layer layer) {
        return !(layer instanceof org.deeplearning4j.nn.layers.samediff.SameDiffLayer);
    }

    static IDropout inputDropout(Layer layer) {
        return layer.conf().getLayer().getIDropout();
    }

    static boolean hasWeightNoise(Layer layer) {
        org.deeplearning4j.nn.conf.layers.Layer conf = layer.conf().getLayer();
        return conf instanceof BaseLayer && ((BaseLayer) conf).getWeightNoise() != null;
    }

    /**
     * The arrays the layer's last step left behind for its backward step, other than its output
     * {@code output} and the input it was given (which belong to the nodes that own them).
     */
    public static List<INDArray> caches(Layer layer, INDArray output) {
        List<INDArray> out = new ArrayList<>();
        if (layer instanceof org.deeplearning4j.nn.layers.normalization.BatchNormalization) {
            for (String f : new String[] {"xMu", "xHat", "std"}) {
                add(out, (INDArray) Reflect.get(layer, org.deeplearning4j.nn.layers.normalization.BatchNormalization.class, f), output);
            }
        }
        IDropout d = inputDropout(layer);
        if (d instanceof Dropout) {
            add(out, ((Dropout) d).getMask(), output);
            // with input modification forbidden, the dropped input is a new array the layer owns
            if (dropoutApplied(layer)) add(out, layer.input(), output);
        }
        return out;
    }

    /** Close {@code known} and the arrays {@link #caches} finds now, and forget them in the layer. */
    static void release(Layer layer, List<INDArray> known, INDArray output) {
        List<INDArray> all = new ArrayList<>(known);
        all.addAll(caches(layer, output));
        for (INDArray a : all) {
            if (a != null && a != output && !a.wasClosed()) a.close();
        }
        if (layer instanceof org.deeplearning4j.nn.layers.normalization.BatchNormalization) {
            for (String f : new String[] {"xMu", "xHat", "std"}) {
                Reflect.set(layer, org.deeplearning4j.nn.layers.normalization.BatchNormalization.class, f, null);
            }
        }
        IDropout d = inputDropout(layer);
        if (d instanceof Dropout) ((Dropout) d).setMask(null);
    }

    private static final java.util.Map<Class<?>, java.util.List<java.lang.reflect.Field>> ARRAY_FIELDS =
            new java.util.concurrent.ConcurrentHashMap<>();

    /** Every array a layer or vertex (and its dropout) holds in a field, INDArray[] fields included. */
    public static List<INDArray> referenced(Object owner) {
        List<INDArray> out = new ArrayList<>();
        collect(owner, out);
        if (owner instanceof Layer) {
            IDropout d = inputDropout((Layer) owner);
            if (d != null) collect(d, out);
        }
        return out;
    }

    private static void collect(Object o, List<INDArray> out) {
        for (java.lang.reflect.Field f : ARRAY_FIELDS.computeIfAbsent(o.getClass(), LayerState::arrayFields)) {
            Object v;
            try {
                v = f.get(o);
            } catch (IllegalAccessException e) {
                continue;
            }
            if (v instanceof INDArray) out.add((INDArray) v);
            else if (v instanceof INDArray[]) for (INDArray a : (INDArray[]) v) if (a != null) out.add(a);
        }
    }

    private static java.util.List<java.lang.reflect.Field> arrayFields(Class<?> cls) {
        java.util.List<java.lang.reflect.Field> out = new ArrayList<>();
        for (Class<?> c = cls; c != null && c != Object.class; c = c.getSuperclass()) {
            for (java.lang.reflect.Field f : c.getDeclaredFields()) {
                if (java.lang.reflect.Modifier.isStatic(f.getModifiers())) continue;
                if (!INDArray.class.isAssignableFrom(f.getType()) && f.getType() != INDArray[].class) continue;
                try {
                    f.setAccessible(true);
                    out.add(f);
                } catch (RuntimeException e) {
                    // not accessible: not ours to keep alive either
                }
            }
        }
        return out;
    }

    private static void add(List<INDArray> out, INDArray a, INDArray output) {
        if (a == null || a.wasClosed() || a == output) return;
        for (INDArray b : out) if (b == a) return;
        out.add(a);
    }
}
