package org.pyd4j;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Map;

import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.MultiDataSet;
import org.nd4j.linalg.factory.Nd4j;

/**
 * Training speed of one network on the ND4J build this JVM loaded (pyd4j nd4j-build runs one JVM per
 * nd4j-native build, each with only that build's jar on its class path).
 *
 * <p>Usage: {@code BackendBench <config.json> <MultiLayerNetwork|ComputationGraph> <seconds> <d0,d1,...>}
 * where the dims are the input's shape with the batch first. Fits random data (labels: random
 * distributions over the output's classes, shaped like the network's output) for 3 warm-up
 * iterations, then for that many seconds, and prints one JSON line: iterations, seconds, iterations
 * per second, the native library file ND4J loaded (which build really ran) and the BLAS its calls
 * went to (openblas, or mkl under -Dorg.bytedeco.openblas.load=mkl_rt).
 */
public final class BackendBench {
    private BackendBench() {
    }

    public static void main(String[] args) throws Exception {
        String json = new String(Files.readAllBytes(Paths.get(args[0])), StandardCharsets.UTF_8);
        boolean graph = "ComputationGraph".equals(args[1]);
        double seconds = Double.parseDouble(args[2]);
        String[] dims = args[3].split(",");
        long[] shape = new long[dims.length];
        for (int i = 0; i < dims.length; i++) shape[i] = Long.parseLong(dims[i].trim());
        Nd4j.getRandom().setSeed(1);
        INDArray x = Nd4j.rand(DataType.FLOAT, shape);
        Model model;
        INDArray out;
        if (graph) {
            ComputationGraph net = new ComputationGraph(ComputationGraphConfiguration.fromJson(json));
            net.init();
            model = net;
            out = net.output(x)[0];
        } else {
            MultiLayerNetwork net = new MultiLayerNetwork(MultiLayerConfiguration.fromJson(json));
            net.init();
            model = net;
            out = net.output(x);
        }
        INDArray labels = Nd4j.rand(DataType.FLOAT, out.shape());
        labels.divi(labels.sum(true, 1));
        for (int i = 0; i < 3; i++) fit(model, graph, x, labels);
        long start = System.nanoTime();
        long end = start + (long) (seconds * 1e9);
        long n = 0;
        while (System.nanoTime() < end) {
            fit(model, graph, x, labels);
            n++;
        }
        double took = (System.nanoTime() - start) / 1e9;
        String library = "";
        String blas = "";
        for (Map.Entry<String, String> e : org.bytedeco.javacpp.Loader.getLoadedLibraries().entrySet()) {
            if (e.getKey().contains("nd4jcpu") && e.getValue() != null) library = e.getValue();
            if (e.getKey().startsWith("mkl_rt")) blas = "mkl";
            else if (e.getKey().startsWith("openblas_nolapack") && blas.isEmpty()) blas = "openblas";
        }
        System.out.println("{\"iterations\":" + n + ",\"seconds\":" + took + ",\"iterations_per_s\":" + (n / took)
                + ",\"library\":\"" + library.replace("\\", "/").replace("\"", "'") + "\",\"blas\":\"" + blas + "\"}");
    }

    private static void fit(Model model, boolean graph, INDArray x, INDArray labels) {
        if (graph) {
            ((ComputationGraph) model).fit(new MultiDataSet(x, labels));
        } else {
            ((MultiLayerNetwork) model).fit(new DataSet(x, labels));
        }
    }
}
