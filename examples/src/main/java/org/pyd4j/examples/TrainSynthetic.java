package org.pyd4j.examples;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.lang.management.MemoryMXBean;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.bytedeco.javacpp.Pointer;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.graph.GraphVertex;
import org.deeplearning4j.nn.conf.graph.LayerVertex;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.objdetect.Yolo2OutputLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.MultiDataSet;
import org.nd4j.linalg.dataset.api.DataSetPreProcessor;
import org.nd4j.linalg.dataset.api.MultiDataSetPreProcessor;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;
import org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.shade.jackson.databind.JsonNode;
import org.nd4j.shade.jackson.databind.ObjectMapper;

/**
 * Trains a DL4J network from its JSON configuration on random data of the right shapes for a
 * fixed number of iterations, sampling memory peaks, and prints one JSON line of results.
 *
 * <p>Usage: {@code TrainSynthetic <config.json> <batch> <iterations>}. The input types come from
 * the sidecar {@code <config>.input.json} written by {@link Networks}. Data go through DL4J's own
 * {@code fit(iterator)}, so DL4J wraps the iterator in its AsyncDataSetIterator (queue 2), as a
 * real job's would be. Exit 0 on success; on any Throwable the JSON says which, and exit is 3.
 */
public final class TrainSynthetic {

    private TrainSynthetic() {
    }

    static InputType inputType(JsonNode n) {
        String type = n.get("type").asText();
        switch (type) {
            case "feedForward":
                return InputType.feedForward(n.get("size").asLong());
            case "convolutional":
                return InputType.convolutional(n.get("height").asLong(), n.get("width").asLong(), n.get("channels").asLong());
            case "convolutionalFlat":
                return InputType.convolutionalFlat(n.get("height").asLong(), n.get("width").asLong(), n.get("channels").asLong());
            case "recurrent":
                return InputType.recurrent(n.get("size").asLong(), n.get("timeSeriesLength").asLong());
            default:
                throw new IllegalArgumentException("unknown input type '" + type + "'");
        }
    }

    /** Shape of one minibatch of features or labels for an activation type. */
    static long[] shape(InputType t, int batch) {
        long[] s = t.getShape(false);
        if (t.getType() == InputType.Type.RNN) {
            InputType.InputTypeRecurrent r = (InputType.InputTypeRecurrent) t;
            return new long[] {batch, r.getSize(), r.getTimeSeriesLength()};
        }
        long[] out = new long[s.length + 1];
        out[0] = batch;
        System.arraycopy(s, 0, out, 1, s.length);
        return out;
    }

    /** Peak sampler: JavaCPP totalBytes (ND4J off-heap), physicalBytes (RSS), heap used. */
    static final class Sampler extends Thread {
        final AtomicLong maxTotal = new AtomicLong();
        final AtomicLong maxPhysical = new AtomicLong();
        final AtomicLong maxHeap = new AtomicLong();
        final AtomicLong maxNative = new AtomicLong(Long.MIN_VALUE);
        volatile boolean running = true;
        final MemoryMXBean mx = ManagementFactory.getMemoryMXBean();

        Sampler() {
            setDaemon(true);
            setName("pyd4j-peak-sampler");
        }

        void sample() {
            maxTotal.accumulateAndGet(Pointer.totalBytes(), Math::max);
            maxPhysical.accumulateAndGet(Pointer.physicalBytes(), Math::max);
            maxHeap.accumulateAndGet(mx.getHeapMemoryUsage().getUsed(), Math::max);
            maxNative.accumulateAndGet(nativeBytes(), Math::max);
        }

        /** RSS less the JVM's committed heap and non-heap (metaspace, code cache): ND4J's native memory and the rest. */
        long nativeBytes() {
            return Pointer.physicalBytes() - mx.getHeapMemoryUsage().getCommitted() - mx.getNonHeapMemoryUsage().getCommitted();
        }

        @Override
        public void run() {
            while (running) {
                sample();
                try {
                    Thread.sleep(2);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }
    }

    static long procStatusKb(String key) {
        try {
            for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
                if (line.startsWith(key + ":")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024L;
                }
            }
        } catch (IOException | NumberFormatException e) {
            return -1;
        }
        return -1;
    }

    static String esc(String s) {
        return s == null ? "" : s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ").replace("\r", " ").replace("\t", " ");
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: TrainSynthetic <config.json> <batch> <iterations>");
            System.exit(2);
        }
        Path config = Paths.get(args[0]);
        int batch = Integer.parseInt(args[1]);
        int iterations = Integer.parseInt(args[2]);
        String json = new String(Files.readAllBytes(config), StandardCharsets.UTF_8);
        Path sidecarPath = Paths.get(config.toString().replaceAll("\\.json$", "") + ".input.json");
        JsonNode sidecar = new ObjectMapper().readTree(Files.readAllBytes(sidecarPath));
        List<InputType> inputs = new ArrayList<>();
        for (JsonNode n : sidecar.get("inputs")) {
            inputs.add(inputType(n));
        }

        Sampler sampler = new Sampler();
        Nd4j.create(DataType.FLOAT, 1).addi(1);
        // Warm-up at batch 1: classes, JIT and libnd4j's one-time buffers then sit in the baseline, so the
        // measured peak is what this batch size adds. train() closes its network (DL4J's close(): parameters,
        // gradients, updater state and workspaces freed at once): were the warm-up's left to the garbage
        // collector, they would sit in the baseline and be freed during the measured run, hiding the measured
        // network's own parameters, gradients and updater state from its peak (AlexNet at batch 16: 41 MB
        // above the idle JVM instead of 300 MB).
        train(json, inputs, 1, 2);
        System.gc();
        long baseNative = sampler.nativeBytes();
        long baseTotal = Pointer.totalBytes();
        long basePhysical = Pointer.physicalBytes();
        long baseHeap = sampler.mx.getHeapMemoryUsage().getUsed();
        sampler.start();
        long t0 = System.nanoTime();
        String status = "ok";
        String error = "";
        String errorClass = "";
        try {
            train(json, inputs, batch, iterations);
        } catch (Throwable t) {
            status = "failed";
            Throwable root = t;
            while (root.getCause() != null && !(root instanceof OutOfMemoryError)) {
                root = root.getCause();
            }
            errorClass = root.getClass().getName();
            error = root.getMessage();
        }
        long seconds = System.nanoTime() - t0;
        sampler.running = false;
        sampler.join();
        sampler.sample();
        System.out.println("{\"status\": \"" + status + "\", \"error_class\": \"" + errorClass + "\", \"error\": \"" + esc(error)
                + "\", \"batch\": " + batch + ", \"iterations\": " + iterations
                + ", \"seconds\": " + (seconds / 1e9)
                + ", \"baseline_javacpp_total_bytes\": " + baseTotal
                + ", \"baseline_physical_bytes\": " + basePhysical
                + ", \"baseline_heap_used_bytes\": " + baseHeap
                + ", \"baseline_native_bytes\": " + baseNative
                + ", \"peak_javacpp_total_bytes\": " + sampler.maxTotal.get()
                + ", \"peak_physical_bytes\": " + sampler.maxPhysical.get()
                + ", \"peak_heap_used_bytes\": " + sampler.maxHeap.get()
                + ", \"peak_native_bytes\": " + sampler.maxNative.get()
                + ", \"peak_rss_bytes\": " + procStatusKb("VmHWM")
                + ", \"max_bytes\": " + Pointer.maxBytes()
                + ", \"max_physical_bytes\": " + Pointer.maxPhysicalBytes()
                + ", \"heap_max_bytes\": " + Runtime.getRuntime().maxMemory()
                + ", \"workspaces\": " + lastWorkspaces + "}");
        System.out.flush();
        System.exit("ok".equals(status) ? 0 : 3);
    }

    /** The workspaces of the training thread after the last train(), as JSON: id to size in bytes. */
    static String lastWorkspaces = "{}";

    /** What fit() learned: each workspace of this thread and its current size (a cross-check of the memory model). */
    static String workspaceSizes() {
        StringBuilder b = new StringBuilder("{");
        for (org.nd4j.linalg.api.memory.MemoryWorkspace w : Nd4j.getWorkspaceManager().getAllWorkspacesForCurrentThread()) {
            b.append(b.length() > 1 ? ", " : "").append('"').append(esc(w.getId())).append("\": ").append(w.getCurrentSize());
        }
        return b.append('}').toString();
    }

    static boolean allPositive(long[][] shapes) {
        for (long[] s : shapes) {
            for (long d : s) {
                if (d < 1) {
                    return false;
                }
            }
        }
        return true;
    }

    static void train(String json, List<InputType> inputs, int batch, int iterations) {
        {
            if (json.contains("\"vertices\"")) {
                ComputationGraphConfiguration conf = ComputationGraphConfiguration.fromJson(json);
                InputType[] in = inputs.toArray(new InputType[0]);
                Map<String, InputType> types = conf.getLayerActivationTypes(in);
                List<String> outs = conf.getNetworkOutputs();
                ComputationGraph net = new ComputationGraph(conf);
                net.init();
                long[][] fShapes = new long[in.length][];
                for (int i = 0; i < in.length; i++) {
                    fShapes[i] = shape(in[i], batch);
                }
                long[][] lShapes = new long[outs.size()][];
                for (int i = 0; i < outs.size(); i++) {
                    lShapes[i] = shape(types.get(outs.get(i)), batch);
                }
                if (!allPositive(lShapes)) {
                    // Some zoo graphs (Darknet19, SqueezeNet) report an output type with a 0 size; the
                    // network's own output at batch 1 has the right shape
                    INDArray[] one = new INDArray[in.length];
                    for (int i = 0; i < in.length; i++) {
                        one[i] = Nd4j.rand(DataType.FLOAT, shape(in[i], 1));
                    }
                    INDArray[] out = net.output(false, one);
                    for (int i = 0; i < out.length; i++) {
                        lShapes[i] = out[i].shape().clone();
                        lShapes[i][0] = batch;
                    }
                }
                // a YOLO output takes boxes, not its activations' shape: [batch, 4 + classes, H, W]
                boolean[] yolo = new boolean[outs.size()];
                for (int i = 0; i < outs.size(); i++) {
                    GraphVertex v = conf.getVertices().get(outs.get(i));
                    if (v instanceof LayerVertex && ((LayerVertex) v).getLayerConf().getLayer() instanceof Yolo2OutputLayer) {
                        long boxes = ((Yolo2OutputLayer) ((LayerVertex) v).getLayerConf().getLayer()).getBoundingBoxes().size(0);
                        long[] s = lShapes[i];
                        lShapes[i] = new long[] {batch, 4 + s[1] / boxes - 5, s[2], s[3]};
                        yolo[i] = true;
                    }
                }
                net.fit(new RandomMultiIterator(fShapes, lShapes, yolo, iterations));
                lastWorkspaces = workspaceSizes();
                net.close();
            } else {
                MultiLayerConfiguration conf = MultiLayerConfiguration.fromJson(json);
                List<InputType> types = conf.getLayerActivationTypes(inputs.get(0));
                MultiLayerNetwork net = new MultiLayerNetwork(conf);
                net.init();
                net.fit(new RandomIterator(shape(inputs.get(0), batch), shape(types.get(types.size() - 1), batch), iterations, batch));
                lastWorkspaces = workspaceSizes();
                net.close();
            }
        }
    }

    /**
     * Counting, reset and preprocessor bookkeeping of the random iterators: {@code total} batches of
     * type B, each made fresh per call like a real loader's; P is the batch type's preprocessor.
     */
    abstract static class RandomBatches<B, P> {
        final int total;
        int served;
        P pre;

        RandomBatches(int total) {
            this.total = total;
        }

        abstract B make();

        public B next() {
            served++;
            return make();
        }

        public B next(int num) {
            return next();
        }

        public boolean hasNext() {
            return served < total;
        }

        public boolean resetSupported() {
            return true;
        }

        public boolean asyncSupported() {
            return true;
        }

        public void reset() {
            served = 0;
        }

        public void setPreProcessor(P p) {
            pre = p;
        }

        public P getPreProcessor() {
            return pre;
        }
    }

    /** Random DataSets for a MultiLayerNetwork. */
    static final class RandomIterator extends RandomBatches<DataSet, DataSetPreProcessor> implements DataSetIterator {
        final long[] fShape;
        final long[] lShape;
        final int batch;

        RandomIterator(long[] fShape, long[] lShape, int total, int batch) {
            super(total);
            this.fShape = fShape;
            this.lShape = lShape;
            this.batch = batch;
        }

        @Override
        DataSet make() {
            INDArray f = Nd4j.rand(DataType.FLOAT, fShape);
            INDArray l = Nd4j.rand(DataType.FLOAT, lShape);
            return new DataSet(f, l);
        }

        @Override
        public int inputColumns() {
            return (int) fShape[1];
        }

        @Override
        public int totalOutcomes() {
            return (int) lShape[1];
        }

        @Override
        public int batch() {
            return batch;
        }

        @Override
        public List<String> getLabels() {
            return null;
        }
    }

    /** Random MultiDataSets for a ComputationGraph. */
    static final class RandomMultiIterator extends RandomBatches<MultiDataSet, MultiDataSetPreProcessor>
            implements MultiDataSetIterator {
        final long[][] fShapes;
        final long[][] lShapes;
        final boolean[] yolo;

        RandomMultiIterator(long[][] fShapes, long[][] lShapes, boolean[] yolo, int total) {
            super(total);
            this.fShapes = fShapes;
            this.lShapes = lShapes;
            this.yolo = yolo;
        }

        /**
         * Labels of a Yolo2OutputLayer ([batch, 4 + classes, H, W]): one object per image, a box from
         * (0.2, 0.2) to (0.8, 0.8) grid units in a random cell, of a random class; every other cell empty.
         */
        static INDArray yoloLabels(long[] shape) {
            INDArray l = Nd4j.zeros(DataType.FLOAT, shape);
            java.util.Random r = new java.util.Random(shape[0]);
            for (long b = 0; b < shape[0]; b++) {
                long y = r.nextInt((int) shape[2]);
                long x = r.nextInt((int) shape[3]);
                l.putScalar(new long[] {b, 0, y, x}, x + 0.2);
                l.putScalar(new long[] {b, 1, y, x}, y + 0.2);
                l.putScalar(new long[] {b, 2, y, x}, x + 0.8);
                l.putScalar(new long[] {b, 3, y, x}, y + 0.8);
                l.putScalar(new long[] {b, 4 + r.nextInt((int) shape[1] - 4), y, x}, 1.0);
            }
            return l;
        }

        @Override
        MultiDataSet make() {
            INDArray[] f = new INDArray[fShapes.length];
            for (int i = 0; i < f.length; i++) {
                f[i] = Nd4j.rand(DataType.FLOAT, fShapes[i]);
            }
            INDArray[] l = new INDArray[lShapes.length];
            for (int i = 0; i < l.length; i++) {
                l[i] = yolo[i] ? yoloLabels(lShapes[i]) : Nd4j.rand(DataType.FLOAT, lShapes[i]);
            }
            return new MultiDataSet(f, l);
        }
    }
}
