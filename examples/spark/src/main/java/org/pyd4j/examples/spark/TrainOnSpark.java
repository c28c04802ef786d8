package org.pyd4j.examples.spark;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.spark.api.RDDTrainingApproach;
import org.deeplearning4j.spark.api.TrainingMaster;
import org.deeplearning4j.spark.impl.graph.SparkComputationGraph;
import org.deeplearning4j.spark.impl.multilayer.SparkDl4jMultiLayer;
import org.deeplearning4j.spark.impl.paramavg.ParameterAveragingTrainingMaster;
import org.nd4j.evaluation.classification.Evaluation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.shade.jackson.databind.ObjectMapper;
import org.pyd4j.examples.DigitsData;

/**
 * Trains a DL4J network from its JSON configuration on Spark with dl4j-spark's parameter averaging,
 * and prints one JSON line per event on stdout (Spark logs to stderr):
 *
 * <pre>
 *   {"event": "start", ...}   the training master's settings and the score before training
 *   {"event": "epoch", "epoch": 1, "score": 1.23, "seconds": 4.5}   score on the training data after each epoch
 *   {"event": "done", "accuracy": 0.97, ...}   test accuracy (digits) and total time
 * </pre>
 *
 * <p>Run with pyspark's spark-submit, the job jar and {@code target/lib/*} on the driver and executor
 * class paths. Options ({@code --key value}): {@code --conf} network JSON (MultiLayerConfiguration
 * trains as {@link SparkDl4jMultiLayer}; ComputationGraphConfiguration, or {@code --graph true}, as
 * {@link SparkComputationGraph}); {@code --data digits:CSV} (examples/data/digits.csv) or
 * {@code synthetic:N} (N random examples made on the executors, shapes from {@code --features} and
 * {@code --labels}); {@code --reshape 1,8,8} (features per example for a CNN); {@code --epochs};
 * {@code --batch-per-worker}; {@code --averaging} (minibatches between averagings); {@code --workers};
 * {@code --approach direct|export}. Outside local mode use {@code direct}: DL4J's default Export
 * approach writes the data to a directory every executor must share.
 */
public final class TrainOnSpark {

    private TrainOnSpark() {
    }

    static Map<String, String> options(String[] argv) {
        Map<String, String> o = new LinkedHashMap<>();
        o.put("conf", "examples/data/digits_mlp.json");
        o.put("data", "digits:examples/data/digits.csv");
        o.put("reshape", "");
        o.put("features", "64");
        o.put("labels", "10");
        o.put("epochs", "3");
        o.put("batch-per-worker", "32");
        o.put("averaging", "5");
        o.put("workers", "0");
        o.put("examples-per-object", "16");
        o.put("approach", "direct");
        o.put("graph", "false");
        o.put("seed", "42");
        for (int i = 0; i < argv.length; i += 2) {
            String key = argv[i].replaceFirst("^--", "");
            if (!o.containsKey(key) || i + 1 >= argv.length) {
                throw new IllegalArgumentException("option " + argv[i] + (o.containsKey(key) ? " needs a value" : " is unknown")
                        + "; known: --" + String.join(", --", o.keySet()));
            }
            o.put(key, argv[i + 1]);
        }
        return o;
    }

    /** The network under Spark: MultiLayerNetwork or ComputationGraph behind one interface. */
    interface SparkNet {
        void fit(JavaRDD<DataSet> data);

        double score(JavaRDD<DataSet> data);

        Evaluation evaluate(JavaRDD<DataSet> data);

        long numParams();
    }

    static SparkNet build(JavaSparkContext sc, String json, boolean asGraph, TrainingMaster<?, ?> tm) {
        if (json.contains("\"vertices\"") || asGraph) {
            ComputationGraph graph = json.contains("\"vertices\"")
                    ? new ComputationGraph(ComputationGraphConfiguration.fromJson(json))
                    : toGraph(MultiLayerConfiguration.fromJson(json));
            graph.init();
            SparkComputationGraph net = new SparkComputationGraph(sc, graph, tm);
            return new SparkNet() {
                public void fit(JavaRDD<DataSet> data) {
                    net.fit(data);
                }

                public double score(JavaRDD<DataSet> data) {
                    return net.calculateScore(data, true);
                }

                public Evaluation evaluate(JavaRDD<DataSet> data) {
                    return net.evaluate(data);
                }

                public long numParams() {
                    return net.getNetwork().numParams();
                }
            };
        }
        MultiLayerNetwork model = new MultiLayerNetwork(MultiLayerConfiguration.fromJson(json));
        model.init();
        SparkDl4jMultiLayer net = new SparkDl4jMultiLayer(sc, model, tm);
        return new SparkNet() {
            public void fit(JavaRDD<DataSet> data) {
                net.fit(data);
            }

            public double score(JavaRDD<DataSet> data) {
                return net.calculateScore(data, true);
            }

            public Evaluation evaluate(JavaRDD<DataSet> data) {
                return net.evaluate(data);
            }

            public long numParams() {
                return net.getNetwork().numParams();
            }
        };
    }

    static ComputationGraph toGraph(MultiLayerConfiguration conf) {
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net.toComputationGraph();
    }

    static long[] dims(String csv) {
        return Arrays.stream(csv.split(",")).filter(s -> !s.isBlank()).mapToLong(s -> Long.parseLong(s.trim())).toArray();
    }

    /** Features reshaped per example (e.g. 64 -> 1x8x8 for a CNN), labels untouched. */
    static DataSet reshaped(DataSet d, long[] perExample) {
        if (perExample.length == 0) {
            return d;
        }
        long[] shape = new long[perExample.length + 1];
        shape[0] = d.getFeatures().size(0);
        System.arraycopy(perExample, 0, shape, 1, perExample.length);
        return new DataSet(d.getFeatures().reshape('c', shape), d.getLabels());
    }

    /** DataSet objects of `per` examples each, as the RDD holds them. */
    static List<DataSet> objects(DataSet all, int per, long[] reshape) {
        List<DataSet> out = new ArrayList<>();
        for (DataSet d : all.batchBy(per)) {
            out.add(reshaped(d, reshape));
        }
        return out;
    }

    /** N random examples made on the executors (seeded per partition), `per` examples to a DataSet. */
    static JavaRDD<DataSet> synthetic(JavaSparkContext sc, int examples, int per, int partitions, long[] features,
                                      int labels, long seed) {
        List<Integer> parts = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            parts.add(p);
        }
        return sc.parallelize(parts, partitions).mapPartitions((Iterator<Integer> it) -> {
            List<DataSet> out = new ArrayList<>();
            while (it.hasNext()) {
                int p = it.next();
                int mine = examples / partitions + (p < examples % partitions ? 1 : 0);
                Random rng = new Random(seed + p);
                for (int done = 0; done < mine; done += per) {
                    int n = Math.min(per, mine - done);
                    long[] shape = new long[features.length + 1];
                    shape[0] = n;
                    System.arraycopy(features, 0, shape, 1, features.length);
                    float[] values = new float[(int) Arrays.stream(shape).reduce(1, (a, b) -> a * b)];
                    for (int i = 0; i < values.length; i++) {
                        values[i] = rng.nextFloat();
                    }
                    INDArray x = Nd4j.create(values, shape, 'c');
                    INDArray y = Nd4j.zeros(DataType.FLOAT, n, labels);
                    for (int i = 0; i < n; i++) {
                        y.putScalar(i, rng.nextInt(labels), 1f);
                    }
                    out.add(new DataSet(x, y));
                }
            }
            return out.iterator();
        });
    }

    static void emit(Map<String, Object> event) throws Exception {
        System.out.println(new ObjectMapper().writeValueAsString(event));
        System.out.flush();
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> o = options(argv);
        String json = new String(Files.readAllBytes(Paths.get(o.get("conf"))), StandardCharsets.UTF_8);
        JavaSparkContext sc = new JavaSparkContext(new SparkConf().setAppName("pyd4j TrainOnSpark " + Paths.get(o.get("conf")).getFileName()));
        try {
            int workers = Integer.parseInt(o.get("workers"));
            if (workers <= 0) {
                workers = sc.defaultParallelism();
            }
            int per = Integer.parseInt(o.get("examples-per-object"));
            long seed = Long.parseLong(o.get("seed"));
            long[] reshape = dims(o.get("reshape"));
            RDDTrainingApproach approach = "export".equalsIgnoreCase(o.get("approach")) ? RDDTrainingApproach.Export : RDDTrainingApproach.Direct;
            ParameterAveragingTrainingMaster tm = new ParameterAveragingTrainingMaster.Builder(workers, per)
                    .batchSizePerWorker(Integer.parseInt(o.get("batch-per-worker")))
                    .averagingFrequency(Integer.parseInt(o.get("averaging")))
                    .workerPrefetchNumBatches(2)
                    .rddTrainingApproach(approach)
                    .rngSeed(seed)
                    .build();
            SparkNet net = build(sc, json, Boolean.parseBoolean(o.get("graph")), tm);

            String data = o.get("data");
            JavaRDD<DataSet> train;
            JavaRDD<DataSet> test = null;
            if (data.startsWith("digits:")) {
                DigitsData digits = DigitsData.load(data.substring("digits:".length()));
                train = sc.parallelize(objects(digits.train, per, reshape), workers);
                test = sc.parallelize(objects(digits.test, per, reshape), workers);
            } else if (data.startsWith("synthetic:")) {
                train = synthetic(sc, Integer.parseInt(data.substring("synthetic:".length())), per, workers,
                        dims(o.get("features")), Integer.parseInt(o.get("labels")), seed);
            } else {
                throw new IllegalArgumentException("--data " + data + ": give digits:CSV or synthetic:N");
            }
            // dl4j-spark persists the training data itself (MEMORY_ONLY_SER): no cache() here

            long t0 = System.nanoTime();
            Map<String, Object> start = new LinkedHashMap<>();
            start.put("event", "start");
            start.put("master", sc.master());
            start.put("app_id", sc.sc().applicationId());
            start.put("workers", workers);
            start.put("approach", approach.name());
            start.put("network", json.contains("\"vertices\"") || Boolean.parseBoolean(o.get("graph"))
                    ? "SparkComputationGraph" : "SparkDl4jMultiLayer");
            start.put("params", net.numParams());
            start.put("batch_per_worker", Integer.parseInt(o.get("batch-per-worker")));
            start.put("averaging", Integer.parseInt(o.get("averaging")));
            start.put("examples", train.map(DataSet::numExamples).reduce(Integer::sum));
            start.put("score", net.score(train));
            emit(start);

            int epochs = Integer.parseInt(o.get("epochs"));
            for (int epoch = 1; epoch <= epochs; epoch++) {
                long t = System.nanoTime();
                net.fit(train);
                Map<String, Object> e = new LinkedHashMap<>();
                e.put("event", "epoch");
                e.put("epoch", epoch);
                e.put("score", net.score(train));
                e.put("seconds", (System.nanoTime() - t) / 1e9);
                emit(e);
            }
            Map<String, Object> done = new LinkedHashMap<>();
            done.put("event", "done");
            done.put("epochs", epochs);
            if (test != null) {
                done.put("accuracy", net.evaluate(test).accuracy());
            }
            done.put("seconds", (System.nanoTime() - t0) / 1e9);
            emit(done);
        } finally {
            sc.stop();
        }
    }
}
