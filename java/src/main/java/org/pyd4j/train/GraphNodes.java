package org.pyd4j.train;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedList;
import java.util.List;
import java.util.Map;

import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.api.layers.IOutputLayer;
import org.deeplearning4j.nn.conf.BackpropType;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.InputPreProcessor;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.graph.vertex.GraphVertex;
import org.deeplearning4j.nn.graph.vertex.impl.ElementWiseVertex;
import org.deeplearning4j.nn.graph.vertex.impl.LayerVertex;
import org.deeplearning4j.nn.workspace.ArrayType;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Pair;
import org.nd4j.common.primitives.Triple;
import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * A ComputationGraph's plan nodes: one per network input and one per vertex, in DL4J's
 * topological order (the plan's forward order must be DL4J's own, so that dropout draws its
 * masks in the same order as {@code fit()}). Steps are {@code GraphVertex.setInput}/{@code
 * doForward} and {@code setEpsilon}/{@code doBackward}, as in {@code
 * ComputationGraph.computeGradientAndScore}; gradient entries are collected as DL4J collects them.
 * Any number of network inputs and output layers (MultiDataSets): every output layer's backward
 * starts a gradient, epsilons of shared vertices add up as DL4J adds them, and the score is DL4J's
 * sum over the outputs in network-output order (the regularization term with the first). Mask
 * arrays are replayed as DL4J sets them ({@code setLayerMaskArrays}, and each output layer's label
 * mask again before its score).
 */
final class GraphNodes extends NetworkNodes {
    /** Vertex classes whose steps are modelled (measured); every other vertex runs as an opaque
     *  step: its own doForward/doBackward, its inputs kept until its backward step. */
    static final List<String> MODELLED_VERTICES = Arrays.asList(
            "org.deeplearning4j.nn.graph.vertex.impl.InputVertex",
            "org.deeplearning4j.nn.graph.vertex.impl.LayerVertex",
            "org.deeplearning4j.nn.graph.vertex.impl.ElementWiseVertex",
            "org.deeplearning4j.nn.graph.vertex.impl.MergeVertex",
            "org.deeplearning4j.nn.graph.vertex.impl.SubsetVertex");

    private final ComputationGraph net;
    private final ComputationGraphConfiguration conf;
    private final GraphVertex[] vertices;   // by plan node
    private boolean[] allowedBefore;

    GraphNodes(ComputationGraph net, PlanFile plan) {
        super(plan);
        this.net = net;
        this.conf = net.getConfiguration();
        this.vertices = new GraphVertex[plan.nodes.size()];
        for (PlanFile.Node n : plan.nodes) {
            if (n.vertex != null) vertices[n.id] = net.getVertex(n.vertex);
        }
    }

    @Override
    Model network() {
        return net;
    }

    @Override
    List<String> unsupported() {
        List<String> out = new ArrayList<>();
        if (!"ComputationGraph".equals(plan.networkKind)) {
            out.add("the plan " + plan.source + " is for a " + plan.networkKind + ", this network is a ComputationGraph; "
                    + "write the plan from this network's configuration");
            return out;
        }
        for (String o : conf.getNetworkOutputs()) {
            GraphVertex v = net.getVertex(o);
            if (v == null || !v.hasLayer() || !(v.getLayer() instanceof IOutputLayer)) {
                out.add("network output '" + o + "' is not an output layer: there is no loss to train from it");
            }
        }
        if (plan.nodes.size() != net.getVertices().length) {
            out.add("the plan " + plan.source + " has " + plan.nodes.size() + " nodes; this graph has "
                    + net.getVertices().length + " vertices (inputs included): write the plan from this graph's configuration");
            return out;
        }
        int[] order = net.topologicalSortOrder();
        for (PlanFile.Node n : plan.nodes) {
            GraphVertex v = vertices[n.id];
            if (v == null) {
                out.add("plan node " + n + " names vertex '" + n.vertex + "', which this graph does not have");
                continue;
            }
            GraphVertex expected = net.getVertices()[order[n.id]];
            if (expected != v) {
                out.add("plan node " + n.id + " is vertex '" + n.vertex + "', DL4J's topological order has '"
                        + expected.getVertexName() + "' there: the plan must follow DL4J's order (so dropout draws its "
                        + "masks as fit() does); write the plan from this graph's configuration");
            }
            List<String> ins = v.isInputVertex() ? new ArrayList<>() : conf.getVertexInputs().get(v.getVertexName());
            List<String> planIns = new ArrayList<>();
            for (int k : n.inputs) planIns.add(plan.nodes.get(k).vertex);
            if (!planIns.equals(ins)) {
                out.add("plan node " + n + " reads " + planIns + "; vertex '" + n.vertex + "' reads " + ins
                        + ": write the plan from this graph's configuration");
            }
            if (v.hasLayer()) {
                String p = layerProblem(v.getLayer(), "'" + v.getVertexName() + "'");
                if (p != null) out.add(p);
            }
            if (v.isInputVertex() != n.isInput()) {
                out.add("plan node " + n + " and vertex '" + v.getVertexName() + "' disagree on being a network input");
            }
        }
        if (tbptt()) out.addAll(truncatedBpttProblems());
        return out;
    }

    private boolean tbptt() {
        return conf.getBackpropType() == BackpropType.TruncatedBPTT;
    }

    @Override
    void attach() {
        allowedBefore = new boolean[vertices.length];
        for (int i = 0; i < vertices.length; i++) {
            Layer l = layer(i);
            if (l == null) continue;
            allowedBefore[i] = LayerState.inputModificationAllowed(l);
            l.allowInputModification(false);
        }
    }

    @Override
    void detach() {
        if (allowedBefore == null) return;
        for (int i = 0; i < vertices.length; i++) {
            Layer l = layer(i);
            if (l != null) l.allowInputModification(allowedBefore[i]);
        }
        allowedBefore = null;
    }

    @Override
    void beginIteration() {
        gradients.clear();
        if (net.getFlattenedGradients() == null) net.initGradientsView();
        Reflect.call(net, ComputationGraph.class, "synchronizeIterEpochCounts");
        // as ComputationGraph.ffToLayerActivationsInWS does before its forward pass: feature masks
        // through every vertex (feedForwardMaskArrays), then the label masks on the output layers
        net.setLayerMaskArrays(net.getInputMaskArrays(), net.getLabelMaskArrays());
        checkChunkedMasks();
    }

    @Override
    INDArray input(int node) {
        return net.getInput(plan.nodes.get(node).inputIndex);
    }

    @Override
    Layer layer(int node) {
        GraphVertex v = vertices[node];
        return v != null && v.hasLayer() ? v.getLayer() : null;
    }

    @Override
    List<INDArray> referenced(int node) {
        List<INDArray> out = LayerState.referenced(vertices[node]);
        if (vertices[node].hasLayer()) out.addAll(LayerState.referenced(vertices[node].getLayer()));
        return out;
    }

    @Override
    boolean isOutput(int node) {
        return vertices[node].isOutputVertex();
    }

    @Override
    boolean opaque(int node) {
        GraphVertex v = vertices[node];
        return v.hasLayer() ? LayerState.opaque(v.getLayer()) : !MODELLED_VERTICES.contains(v.getClass().getName());
    }

    @Override
    boolean backwardReadsInput(int node, int k) {
        GraphVertex v = vertices[node];
        if (v.hasLayer()) return LayerState.backwardReadsInput(v.getLayer());
        if (opaque(node)) return true;   // an opaque step keeps its inputs
        if (v instanceof ElementWiseVertex) {
            String op = String.valueOf(Reflect.get(v, ElementWiseVertex.class, "op"));
            return op.equals("Product") || op.equals("Max");
        }
        return false;   // MergeVertex, SubsetVertex: their backward needs only the shapes they kept
    }

    @Override
    INDArray forward(int node, INDArray[] inputs, LayerWorkspaceMgr mgr) {
        GraphVertex v = vertices[node];
        Layer l = layer(node);
        boolean inPlace = !isOutput(node) && dropsInPlace(l, allowedBefore[node]);
        for (int k = 0; k < inputs.length; k++) v.setInput(k, inPlace ? mgr.dup(ArrayType.INPUT, inputs[k]) : inputs[k], mgr);
        if (isOutput(node)) {
            INDArray[] labels = (INDArray[]) Reflect.get(net, ComputationGraph.class, "labels");
            ((IOutputLayer) v.getLayer()).setLabels(labels[conf.getNetworkOutputs().indexOf(v.getVertexName())]);
            return null;
        }
        // ComputationGraph.ffToLayerActivationsInWS with stored state: the layer on the vertex's first input
        // as set, without the vertex's preprocessor (see truncatedBpttProblems)
        if (inPlace) l.allowInputModification(true);
        try {
            INDArray out = tbptt() && v.hasLayer() ? withStoredState(v.getLayer(), v.getInputs()[0], mgr) : null;
            out = out != null ? out : v.doForward(true, mgr);
            if (inPlace && LayerState.dropoutApplied(l)) refuseSharedInPlaceDropout(node, inputs[0]);
            return out;
        } finally {
            if (inPlace) l.allowInputModification(false);
        }
    }

    /** DL4J's fit() lets the last reader of an activation drop it in place; a reader before it that keeps that
     *  very array (it applies no dropout of its own) then computes its backward step from the dropped values.
     *  The trainer keeps every activation intact, so it refuses that case, in the first forward pass (before
     *  any update), naming both vertices; a layer that ignores its dropout setting drops nothing. */
    private void refuseSharedInPlaceDropout(int node, INDArray input) {
        String name = vertices[node].getVertexName();
        String from = conf.getVertexInputs().get(name).get(0);
        for (PlanFile.Node n : plan.nodes) {
            GraphVertex w = vertices[n.id];
            List<String> ins = w == null || n.id == node ? null : conf.getVertexInputs().get(w.getVertexName());
            if (ins == null || !ins.contains(from) || !backwardReadsInput(n.id, ins.indexOf(from))) continue;
            for (INDArray a : referenced(n.id)) {
                if (a != null && !a.wasClosed() && Held.sameMemory(a, input)) {
                    throw new PlanRefusedException(java.util.Collections.singletonList("vertex '" + name + "' applies its "
                            + "input dropout in place on the output of '" + from + "' in DL4J's fit(), and '"
                            + w.getVertexName() + "' computes its backward step from that same array, dropped: planned "
                            + "training keeps activations intact and cannot reproduce it; remove the input dropout of '"
                            + name + "' or train with DL4J's own fit()"));
                }
            }
        }
    }

    @Override
    void rebind(int node, int k, INDArray input, LayerWorkspaceMgr mgr) {
        vertices[node].setInput(k, input, mgr);
    }

    @Override
    Held[] backward(int node, INDArray epsilon, LayerWorkspaceMgr mgr) {
        GraphVertex v = vertices[node];
        Gradient g;
        Held[] out;
        if (v instanceof LayerVertex) {
            // LayerVertex.doBackward for a non-recurrent layer: the layer's backprop, then the
            // preprocessor's; called directly so the trainer knows the array a preprocessor's view is cut from
            Pair<Gradient, INDArray> p = v.getLayer().backpropGradient(epsilon, mgr);
            g = p.getFirst();
            out = inputGradient(node, p.getSecond(), mgr);
        } else {
            v.setEpsilon(epsilon);
            Pair<Gradient, INDArray[]> p = v.doBackward(false, mgr);
            v.setEpsilon(null);
            g = p.getFirst();
            INDArray[] eps = p.getSecond();
            out = new Held[eps.length];
            for (int k = 0; k < eps.length; k++) out[k] = Held.own(eps[k]);
        }
        if (g != null) addGradient(node, g);
        return out;
    }

    @Override
    void addGradient(int node, Gradient g) {
        LinkedList<Triple<String, INDArray, Character>> mine = new LinkedList<>();
        for (Map.Entry<String, INDArray> e : g.gradientForVariable().entrySet()) {
            mine.addFirst(new Triple<>(vertices[node].getVertexName() + "_" + e.getKey(), e.getValue(), g.flatteningOrderForVariable(e.getKey())));
        }
        for (Triple<String, INDArray, Character> t : mine) gradients.addFirst(t);
    }

    @Override
    InputPreProcessor preprocessor(int node) {
        return vertices[node] instanceof LayerVertex ? ((LayerVertex) vertices[node]).getLayerPreProcessor() : null;
    }

    @Override
    int miniBatch() {
        return net.batchSize();
    }

    @Override
    INDArray forwardInChunks(int node, INDArray[] inputs, StepWorkspaceMgr mgr, int chunks) {
        GraphVertex v = vertices[node];
        v.setInput(0, inputs[0], mgr);   // the vertex holds its input, as after doForward
        // as LayerVertex.doForward: the preprocessor on the whole batch (a reshape per sample), then the layer, here in slices
        return ChunkedStep.forward(v.getLayer(), preprocessed(node, inputs[0], mgr), chunks, mgr);
    }

    @Override
    double score(int node, LayerWorkspaceMgr mgr) {
        // as ComputationGraph.computeGradientAndScore after its backward pass: the output layer's
        // mask is its label mask (or none), and the regularization term counts with the first output only
        int k = conf.getNetworkOutputs().indexOf(vertices[node].getVertexName());
        INDArray[] labelMasks = net.getLabelMaskArrays();
        Layer l = vertices[node].getLayer();
        l.setMaskArray(labelMasks == null ? null : labelMasks[k]);
        return ((IOutputLayer) l).computeScore(k == 0 ? net.calcRegularizationScore(true) : 0.0, true, mgr);
    }

    @Override
    double totalScore(double[] byNode) {
        double score = 0;   // DL4J's sum, in network-output order
        for (String o : conf.getNetworkOutputs()) score += byNode[nodeOf(o)];
        return score;
    }

    private int nodeOf(String vertex) {
        for (PlanFile.Node n : plan.nodes) if (vertex.equals(n.vertex)) return n.id;
        throw new IllegalStateException("the plan " + plan.source + " has no node for output '" + vertex + "'");
    }

    @Override
    void finishIteration(double score) {
        net.setGradient(gradient(net.getFlattenedGradients()));
        net.setScore(score);
        for (GraphVertex v : vertices) {
            if (v.isOutputVertex() && v.hasLayer()) v.getLayer().clearNoiseWeightParams();
        }
    }
}
