package org.pyd4j.examples;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.MultiDataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.shade.jackson.databind.JsonNode;
import org.nd4j.shade.jackson.databind.ObjectMapper;

/**
 * Speed of planned training against DL4J's own fit() in one process, iteration by iteration: two
 * copies of the same network (same configuration and seed) train on the same random batches,
 * one with {@code fit()}, the other under a pyd4j plan; their iterations alternate (fit, planned,
 * planned, fit, ...), so that load from other processes on a shared machine falls on both alike.
 * Prints one JSON line: each iteration's seconds for both and the planned trainer's stats.
 *
 * <p>Usage: {@code TrainInterleaved <config.json> <batch> <iterations> <plan.json> [both|fit|planned]}, with the pyd4j
 * helper jar on the classpath (the planned trainer is reached by reflection, as the agent reaches
 * it). The planned trainer fixes glibc's mmap threshold for the whole process when it is attached
 * (org.pyd4j.train.ReturnFreedMemory), so fit() here runs under it too. With {@code fit} or
 * {@code planned} only that side trains (both are built and the plan attached all the same): the
 * same work in separate processes, where neither side's iteration follows the other's.
 */
public final class TrainInterleaved {

    private TrainInterleaved() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: TrainInterleaved <config.json> <batch> <iterations> <plan.json>");
            System.exit(2);
        }
        Path config = Paths.get(args[0]);
        int batch = Integer.parseInt(args[1]);
        int iterations = Integer.parseInt(args[2]);
        String planFile = args[3];
        String sides = args.length > 4 ? args[4] : "both";
        if (!Arrays.asList("both", "fit", "planned").contains(sides)) {
            System.err.println("sides '" + sides + "': use both, fit or planned");
            System.exit(2);
        }
        String json = new String(Files.readAllBytes(config), StandardCharsets.UTF_8);
        Path sidecar = Paths.get(config.toString().replaceAll("\\.json$", "") + ".input.json");
        List<InputType> inputs = new ArrayList<>();
        for (JsonNode n : new ObjectMapper().readTree(Files.readAllBytes(sidecar)).get("inputs")) {
            inputs.add(TrainSynthetic.inputType(n));
        }
        boolean graph = json.contains("\"vertices\"");
        Model fit = build(json, graph);
        Model planned = build(json, graph);
        Class<?> route = Class.forName("org.pyd4j.train.AgentRoute");
        String attached = (String) route.getMethod("attach", Object.class, String.class).invoke(null, planned, planFile);
        if (!attached.contains("\"attached\"")) {
            System.out.println("{\"status\": \"failed\", \"error\": " + new ObjectMapper().writeValueAsString(attached) + "}");
            System.exit(3);
        }
        long[][] shapes = shapes(json, graph, inputs, batch);
        double[] fitS = new double[iterations];
        double[] plannedS = new double[iterations];
        for (int i = 0; i < iterations; i++) {
            INDArray f = Nd4j.rand(DataType.FLOAT, shapes[0]);
            INDArray l = Nd4j.rand(DataType.FLOAT, shapes[1]);
            boolean fitFirst = i % 2 == 0;
            for (int k = 0; k < 2; k++) {
                boolean isFit = (k == 0) == fitFirst;
                if (!sides.equals("both") && isFit != sides.equals("fit")) continue;
                long t0 = System.nanoTime();
                step(isFit ? fit : planned, graph, f, l);
                (isFit ? fitS : plannedS)[i] = (System.nanoTime() - t0) / 1e9;
            }
        }
        String stats = (String) route.getMethod("stats", Object.class).invoke(null, planned);
        System.out.println("{\"status\": \"ok\", \"batch\": " + batch + ", \"iterations\": " + iterations
                + ", \"fit_s\": " + Arrays.toString(fitS) + ", \"planned_s\": " + Arrays.toString(plannedS)
                + ", \"trainer\": " + stats + "}");
        System.out.flush();
        System.exit(0);
    }

    private static Model build(String json, boolean graph) {
        if (graph) {
            ComputationGraph net = new ComputationGraph(ComputationGraphConfiguration.fromJson(json));
            net.init();
            return net;
        }
        MultiLayerNetwork net = new MultiLayerNetwork(MultiLayerConfiguration.fromJson(json));
        net.init();
        return net;
    }

    /** Shapes of one batch of features and labels (one network input and one output). */
    private static long[][] shapes(String json, boolean graph, List<InputType> inputs, int batch) {
        InputType out;
        if (graph) {
            ComputationGraphConfiguration conf = ComputationGraphConfiguration.fromJson(json);
            Map<String, InputType> types = conf.getLayerActivationTypes(inputs.toArray(new InputType[0]));
            out = types.get(conf.getNetworkOutputs().get(0));
        } else {
            List<InputType> types = MultiLayerConfiguration.fromJson(json).getLayerActivationTypes(inputs.get(0));
            out = types.get(types.size() - 1);
        }
        return new long[][] {TrainSynthetic.shape(inputs.get(0), batch), TrainSynthetic.shape(out, batch)};
    }

    private static void step(Model net, boolean graph, INDArray f, INDArray l) {
        if (graph) ((ComputationGraph) net).fit(new MultiDataSet(f, l));
        else ((MultiLayerNetwork) net).fit(new DataSet(f, l));
    }
}
