package org.pyd4j.train;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.api.layers.IOutputLayer;
import org.deeplearning4j.nn.conf.BackpropType;
import org.deeplearning4j.nn.conf.InputPreProcessor;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.workspace.ArrayType;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Pair;
import org.nd4j.common.primitives.Triple;
import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * A MultiLayerNetwork's plan nodes: node 0 is the features, node i + 1 is layer i (with the input
 * preprocessor of layer i, applied as DL4J's feed-forward applies it). The steps are those of
 * {@code MultiLayerNetwork.computeGradientAndScore}: the output layer gets its input and labels
 * but is not activated; its backprop starts the gradient; the score is computed from the output
 * layer with the regularization score of the whole network. Mask arrays are replayed as DL4J sets
 * them ({@code setLayerMaskArrays} with the features mask; the label mask stays on the output layer).
 */
final class MultiLayerNodes extends NetworkNodes {
    private final MultiLayerNetwork net;
    private final MultiLayerConfiguration conf;
    private final Layer[] layers;
    private boolean[] allowedBefore;

    MultiLayerNodes(MultiLayerNetwork net, PlanFile plan) {
        super(plan);
        this.net = net;
        this.conf = net.getLayerWiseConfigurations();
        this.layers = net.getLayers();
    }

    @Override
    Model network() {
        return net;
    }

    @Override
    List<String> unsupported() {
        List<String> out = new ArrayList<>();
        if (!"MultiLayerNetwork".equals(plan.networkKind)) {
            out.add("the plan " + plan.source + " is for a " + plan.networkKind + ", this network is a MultiLayerNetwork; "
                    + "write the plan from this network's configuration");
            return out;
        }
        if (plan.nodes.size() != layers.length + 1) {
            out.add("the plan " + plan.source + " has " + plan.nodes.size() + " nodes; this network needs "
                    + (layers.length + 1) + " (its input and " + layers.length + " layers): write the plan from this "
                    + "network's configuration");
            return out;
        }
        if (!plan.nodes.get(0).isInput()) out.add("plan node 0 (" + plan.nodes.get(0) + ") is not the network input");
        for (int i = 0; i < layers.length; i++) {
            PlanFile.Node n = plan.nodes.get(i + 1);
            // the configuration's own layer: a wrapper's instance (MaskZeroLayer) answers with the layer it wraps
            String confClass = conf.getConf(i).getLayer().getClass().getSimpleName();
            String name = "'" + layerName(i) + "' (index " + i + ")";
            if (n.layerIndex != i || (n.dl4jClass != null && !n.dl4jClass.equals(confClass))
                    || n.inputs.length != 1 || n.inputs[0] != i) {
                out.add("plan node " + (i + 1) + " is " + n + " reading " + java.util.Arrays.toString(n.inputs)
                        + "; the network's layer " + i + " is a " + confClass + " reading node " + i
                        + ": write the plan from this network's configuration");
                continue;
            }
            String p = layerProblem(layers[i], name);
            if (p != null) out.add(p);
        }
        if (tbptt()) out.addAll(truncatedBpttProblems());
        if (!(layers[layers.length - 1] instanceof IOutputLayer)) {
            out.add("the last layer (" + layers[layers.length - 1].getClass().getSimpleName() + ") is not an output "
                    + "layer: there is no loss to train");
        }
        return out;
    }

    private boolean tbptt() {
        return conf.getBackpropType() == BackpropType.TruncatedBPTT;
    }

    private String layerName(int i) {
        String n = conf.getConf(i).getLayer().getLayerName();
        return n == null ? "layer" + i : n;
    }

    @Override
    void attach() {
        allowedBefore = new boolean[layers.length];
        for (int i = 0; i < layers.length; i++) {
            allowedBefore[i] = LayerState.inputModificationAllowed(layers[i]);
            layers[i].allowInputModification(false);
        }
    }

    @Override
    void detach() {
        if (allowedBefore == null) return;
        for (int i = 0; i < layers.length; i++) layers[i].allowInputModification(allowedBefore[i]);
        allowedBefore = null;
    }

    @Override
    void beginIteration() {
        gradients.clear();
        if (net.getFlattenedGradients() == null) net.initGradientsView();
        Reflect.call(net, MultiLayerNetwork.class, "synchronizeIterEpochCounts");
        // as MultiLayerNetwork.ffToLayerActivationsInWs does before its forward pass: the features
        // mask through every layer; the output layer keeps the label mask fit() gave it otherwise
        net.setLayerMaskArrays(net.getMask(), null);
        checkChunkedMasks();
    }

    @Override
    INDArray input(int node) {
        return net.getInput();
    }

    @Override
    Layer layer(int node) {
        return node == 0 ? null : layers[node - 1];
    }

    @Override
    List<INDArray> referenced(int node) {
        return node == 0 ? new ArrayList<>() : LayerState.referenced(layers[node - 1]);
    }

    @Override
    boolean isOutput(int node) {
        return node == layers.length;
    }

    @Override
    InputPreProcessor preprocessor(int node) {
        return node > 0 ? conf.getInputPreProcess(node - 1) : null;
    }

    @Override
    int miniBatch() {
        return net.getInputMiniBatchSize();
    }

    @Override
    INDArray forward(int node, INDArray[] inputs, LayerWorkspaceMgr mgr) {
        int i = node - 1;
        INDArray x = preprocessed(node, inputs[0], mgr);
        if (isOutput(node)) {
            layers[i].setInput(x, mgr);
            ((IOutputLayer) layers[i]).setLabels(net.getLabels());
            return null;
        }
        boolean inPlace = dropsInPlace(layers[i], allowedBefore[i]);
        if (inPlace) {
            x = mgr.dup(ArrayType.INPUT, x);
            layers[i].allowInputModification(true);
        }
        try {
            INDArray out = tbptt() ? withStoredState(layers[i], x, mgr) : null;   // see truncatedBpttProblems
            return out != null ? out : layers[i].activate(x, true, mgr);
        } finally {
            if (inPlace) layers[i].allowInputModification(false);
        }
    }

    @Override
    void rebind(int node, int k, INDArray input, LayerWorkspaceMgr mgr) {
        layers[node - 1].setInput(preprocessed(node, input, mgr), mgr);
    }

    @Override
    Held[] backward(int node, INDArray epsilon, LayerWorkspaceMgr mgr) {
        int i = node - 1;
        Pair<Gradient, INDArray> p = layers[i].backpropGradient(epsilon, mgr);
        addGradient(node, p.getFirst());
        return inputGradient(node, p.getSecond(), mgr);
    }

    @Override
    void addGradient(int node, Gradient g) {
        for (Map.Entry<String, INDArray> e : g.gradientForVariable().entrySet()) {
            gradients.addLast(new Triple<>((node - 1) + "_" + e.getKey(), e.getValue(), g.flatteningOrderForVariable(e.getKey())));
        }
    }

    @Override
    INDArray forwardInChunks(int node, INDArray[] inputs, StepWorkspaceMgr mgr, int chunks) {
        // the preprocessor on the whole batch (a reshape per sample), the convolution in slices
        return ChunkedStep.forward(layers[node - 1], preprocessed(node, inputs[0], mgr), chunks, mgr);
    }

    @Override
    double score(int node, LayerWorkspaceMgr mgr) {
        return ((IOutputLayer) layers[node - 1]).computeScore(net.calcRegularizationScore(true), true, mgr);
    }

    @Override
    double totalScore(double[] byNode) {
        return byNode[layers.length];
    }

    @Override
    void finishIteration(double score) {
        net.setGradient(gradient(net.getFlattenedGradients()));
        net.setScore(score);
        net.getOutputLayer().clearNoiseWeightParams();
    }
}
