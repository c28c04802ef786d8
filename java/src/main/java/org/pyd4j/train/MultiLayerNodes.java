package org.pyd4j.train;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.api.layers.IOutputLayer;
import org.deeplearning4j.nn.api.layers.RecurrentLayer;
import org.deeplearning4j.nn.conf.BackpropType;
import org.deeplearning4j.nn.conf.InputPreProcessor;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.layers.wrapper.BaseWrapperLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
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
            String confClass = layers[i].conf().getLayer().getClass().getSimpleName();
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
            if (tbptt() && layers[i] instanceof MultiLayerNetwork) {
                out.add("layer " + name + " is a whole MultiLayerNetwork, which planned training does not replay under "
                        + "truncated BPTT; train it with DL4J's own fit()");
            }
        }
        if (tbptt()) {
            for (PlanFile.Record r : plan.records) {
                if (r.op == PlanFile.Op.RECOMPUTE && r.arg > 0 && r.arg <= layers.length && recurrent(layers[r.arg - 1]) != null) {
                    out.add("the plan " + plan.source + " recomputes " + plan.nodes.get(r.arg) + ", whose forward pass "
                            + "under truncated BPTT stores the state the next segment starts from: it runs once a "
                            + "segment; write the plan from this network's configuration");
                    break;
                }
            }
        }
        if (!(layers[layers.length - 1] instanceof IOutputLayer)) {
            out.add("the last layer (" + layers[layers.length - 1].getClass().getSimpleName() + ") is not an output "
                    + "layer: there is no loss to train");
        }
        return out;
    }

    /** Truncated BPTT: DL4J's fit() cuts each batch into segments of tbpttFwdLength steps and runs one
     *  iteration per segment ({@code doTruncatedBPTT}), each starting its recurrent layers from the state the
     *  segment before left; an iteration here is one segment, replayed as {@code computeGradientAndScore}
     *  does under it. */
    private boolean tbptt() {
        return conf.getBackpropType() == BackpropType.TruncatedBPTT;
    }

    /** The layer's own recurrent layer, where DL4J's forward pass with stored state runs it as one
     *  (a recurrent layer, or a wrapper such as LastTimeStep around one); else null. */
    private static RecurrentLayer recurrent(Layer layer) {
        if (layer instanceof RecurrentLayer) return (RecurrentLayer) layer;
        if (layer instanceof BaseWrapperLayer && ((BaseWrapperLayer) layer).getUnderlying() instanceof RecurrentLayer) {
            return (RecurrentLayer) ((BaseWrapperLayer) layer).getUnderlying();
        }
        return null;
    }

    private String layerName(int i) {
        String n = layers[i].conf().getLayer().getLayerName();
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
        RecurrentLayer rnn = tbptt() ? recurrent(layers[i]) : null;
        if (rnn != null) {
            // MultiLayerNetwork.ffToLayerActivationsInWs, RNN_ACTIVATE_WITH_STORED_STATE: from the state the
            // previous segment left, storing this segment's last state for the next
            // (the state is stored apart from the arrays the plan frees: LSTM keeps its last step's own
            // arrays, SimpleRnn a copy made out of workspaces)
            return rnn.rnnActivateUsingStoredState(x, true, true, mgr);
        }
        return layers[i].activate(x, true, mgr);
    }

    @Override
    void rebind(int node, int k, INDArray input, LayerWorkspaceMgr mgr) {
        layers[node - 1].setInput(preprocessed(node, input, mgr), mgr);
    }

    @Override
    Held[] backward(int node, INDArray epsilon, LayerWorkspaceMgr mgr) {
        int i = node - 1;
        // under truncated BPTT too: DL4J 1.0.0-M2.1's computeGradientAndScore calls calcBackpropGradients
        // with tbptt false, so every layer backpropagates its whole segment (tbpttBackLength is not applied)
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
