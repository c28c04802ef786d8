package org.pyd4j.examples;

import java.io.IOException;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.bytedeco.javacpp.Pointer;
import org.deeplearning4j.datasets.iterator.utilty.ListDataSetIterator;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.evaluation.classification.Evaluation;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.shade.jackson.databind.ObjectMapper;

/**
 * scikit-learn's handwritten digits (8x8 images, 10 classes), exported once to
 * {@code examples/data/digits.csv} by {@code examples/python/export_digits.py}: each line is
 * split (0 train, 1 test), label, 64 pixels in 0..16. Features are scaled to [0, 1].
 *
 * <p>Also the shared training loop of {@link DigitsMlp} and {@link DigitsLeNet}: in-JVM
 * ListDataSetIterator, a chosen workspace mode, and one JSON line of results (test accuracy,
 * samples/s, peak off-heap, GC count/time).
 */
public final class DigitsData {
    public static final int FEATURES = 64;
    public static final int CLASSES = 10;

    public final DataSet train;
    public final DataSet test;

    private DigitsData(DataSet train, DataSet test) {
        this.train = train;
        this.test = test;
    }

    /** Read the CSV (default examples/data/digits.csv, relative to the working directory). */
    public static DigitsData load(String path) throws IOException {
        List<String> lines = Files.readAllLines(Paths.get(path), StandardCharsets.US_ASCII);
        List<float[]> trainX = new ArrayList<>(), testX = new ArrayList<>();
        List<Integer> trainY = new ArrayList<>(), testY = new ArrayList<>();
        for (String line : lines) {
            if (line.isBlank()) {
                continue;
            }
            String[] cells = line.split(",");
            if (cells.length != 2 + FEATURES) {
                throw new IOException(path + ": expected " + (2 + FEATURES) + " values per line, got " + cells.length);
            }
            float[] x = new float[FEATURES];
            for (int i = 0; i < FEATURES; i++) {
                x[i] = Integer.parseInt(cells[2 + i]) / 16.0f;
            }
            boolean isTest = cells[0].equals("1");
            (isTest ? testX : trainX).add(x);
            (isTest ? testY : trainY).add(Integer.parseInt(cells[1]));
        }
        return new DigitsData(toDataSet(trainX, trainY), toDataSet(testX, testY));
    }

    private static DataSet toDataSet(List<float[]> xs, List<Integer> ys) {
        float[][] x = xs.toArray(new float[0][]);
        float[][] y = new float[ys.size()][CLASSES];
        for (int i = 0; i < ys.size(); i++) {
            y[i][ys.get(i)] = 1f;
        }
        return new DataSet(Nd4j.create(x), Nd4j.create(y));
    }

    /** Options shared by the digits examples: --data, --epochs, --batch, --workspaces, --seed. */
    static Map<String, String> args(String[] argv, int defaultEpochs) {
        Map<String, String> out = new LinkedHashMap<>();
        out.put("data", Paths.get("examples", "data", "digits.csv").toString());
        out.put("epochs", Integer.toString(defaultEpochs));
        out.put("batch", "64");
        out.put("workspaces", "ENABLED");
        out.put("seed", "42");
        for (int i = 0; i + 1 < argv.length; i += 2) {
            String key = argv[i].replaceFirst("^--", "");
            if (!out.containsKey(key)) {
                throw new IllegalArgumentException("unknown option " + argv[i] + "; known: " + out.keySet());
            }
            out.put(key, argv[i + 1]);
        }
        return out;
    }

    /** Train with an in-JVM ListDataSetIterator, evaluate on the test split, print one JSON line. */
    static Map<String, Object> run(String name, MultiLayerNetwork net, Map<String, String> opts,
                                   java.util.function.Function<INDArray, INDArray> reshape) throws Exception {
        DigitsData digits = load(opts.get("data"));
        WorkspaceMode mode = WorkspaceMode.valueOf(opts.get("workspaces"));
        net.getLayerWiseConfigurations().setTrainingWorkspaceMode(mode);
        net.getLayerWiseConfigurations().setInferenceWorkspaceMode(mode);
        int epochs = Integer.parseInt(opts.get("epochs"));
        int batch = Integer.parseInt(opts.get("batch"));
        long seed = Long.parseLong(opts.get("seed"));
        DataSet train = new DataSet(reshape.apply(digits.train.getFeatures()), digits.train.getLabels());
        DataSet test = new DataSet(reshape.apply(digits.test.getFeatures()), digits.test.getLabels());

        // ND4J M2.1's CPU buffers live in libnd4j, outside JavaCPP's totalBytes(); off-heap is
        // measured as resident memory minus what the JVM has committed (heap + non-heap). It is
        // exact only when the committed heap is resident (-Xms = -Xmx and -XX:+AlwaysPreTouch, as
        // benchmarks/workspaces.py runs it); otherwise untouched heap makes it low, even negative.
        AtomicLong peakOffHeap = new AtomicLong(offHeapBytes());
        AtomicLong peakPhysical = new AtomicLong(Pointer.physicalBytes());
        Thread sampler = new Thread(() -> {
            while (!Thread.currentThread().isInterrupted()) {
                peakOffHeap.accumulateAndGet(offHeapBytes(), Math::max);
                peakPhysical.accumulateAndGet(Pointer.physicalBytes(), Math::max);
                try {
                    Thread.sleep(20);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "digits-memory-sampler");
        sampler.setDaemon(true);
        sampler.start();

        long[] gc0 = gcCountAndMillis();
        long samples = 0;
        long start = System.nanoTime();
        long firstEpochNanos = 0;
        for (int epoch = 0; epoch < epochs; epoch++) {
            long t = System.nanoTime();
            train.shuffle(seed + epoch);
            // the usual DL4J idiom: a list of single examples, merged `batch` at a time
            net.fit(new ListDataSetIterator<>(train.asList(), batch));
            samples += train.numExamples();
            if (epoch == 0) {
                firstEpochNanos = System.nanoTime() - t;
            }
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        long[] gc1 = gcCountAndMillis();
        sampler.interrupt();

        Evaluation eval = new Evaluation(CLASSES);
        eval.eval(test.getLabels(), net.output(test.getFeatures(), false));

        Map<String, Object> out = new LinkedHashMap<>();
        out.put("example", name);
        out.put("workspace_mode", mode.name());
        out.put("epochs", epochs);
        out.put("batch", batch);
        out.put("train_samples", train.numExamples());
        out.put("test_samples", test.numExamples());
        out.put("test_accuracy", eval.accuracy());
        out.put("seconds", seconds);
        out.put("samples_per_s", samples / seconds);
        double rest = (seconds - firstEpochNanos / 1e9);
        out.put("samples_per_s_after_first_epoch", epochs > 1 ? samples * (epochs - 1) / (double) epochs / rest : null);
        out.put("peak_offheap_bytes", peakOffHeap.get());
        out.put("peak_physical_bytes", peakPhysical.get());
        out.put("gc_count", gc1[0] - gc0[0]);
        out.put("gc_millis", gc1[1] - gc0[1]);
        out.put("params", net.numParams());
        System.out.println(new ObjectMapper().writeValueAsString(out));
        return out;
    }

    /** Resident bytes not committed by the JVM: ND4J arrays, workspaces, native libraries. */
    static long offHeapBytes() {
        java.lang.management.MemoryMXBean mx = ManagementFactory.getMemoryMXBean();
        return Pointer.physicalBytes() - mx.getHeapMemoryUsage().getCommitted()
                - mx.getNonHeapMemoryUsage().getCommitted();
    }

    static long[] gcCountAndMillis() {
        long count = 0, millis = 0;
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
            count += Math.max(0, gc.getCollectionCount());
            millis += Math.max(0, gc.getCollectionTime());
        }
        return new long[] {count, millis};
    }

}
