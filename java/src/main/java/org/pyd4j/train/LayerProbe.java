package org.pyd4j.train;

import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.api.layers.IOutputLayer;
import org.deeplearning4j.nn.conf.InputPreProcessor;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.graph.vertex.GraphVertex;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.workspace.ArrayType;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.memory.conf.WorkspaceConfiguration;
import org.nd4j.linalg.api.memory.enums.AllocationPolicy;
import org.nd4j.linalg.api.memory.enums.LearningPolicy;
import org.nd4j.linalg.api.memory.enums.SpillPolicy;
import org.nd4j.linalg.api.memory.abstracts.Nd4jWorkspace;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.api.rng.Random;
import org.nd4j.linalg.factory.Nd4j;

/**
 * What DL4J itself says of a network's layers and vertices when a plan is made: each one's output
 * shape (one training-mode forward pass of the whole network on random features of the planned
 * batch shape: DL4J's own shape rules) and parameter count, and for each opaque step (a layer or
 * vertex without a measured model, see {@link LayerState#MODELLED_LAYERS}) a probe iteration of
 * that step alone: the bytes its forward and its backward step allocate in the trainer's
 * working-memory workspace and the bytes it keeps in its fields from forward to backward. The
 * random state and the network's parameters are left as they were. Returns JSON for
 * {@code pyd4j.dl4j.graph.graph_from_dl4j_json(info=...)}: {@code {name: {"shape": [...]
 * (per sample), "params": n, "opaque": bool, "measured": {"ws_forward", "ws_backward", "saved"}}}}.
 */
public final class LayerProbe {
    private static final String WS = "PYD4J_PROBE_WS";

    private LayerProbe() {
    }

    /** Probe {@code net} with random features of shape {@code featureShape} (one per network input). */
    public static String describe(Model net, long[]... featureShape) {
        Random r = Nd4j.getRandom();
        long[] state = {r.rootState(), r.nodeState()};
        // the gradient view as it was (zeros where the probe makes it): the probe's backward steps write there,
        // and a layer fit() gives no gradient (below a FrozenLayer) would be updated with what they left
        INDArray view = gradientView(net);
        INDArray before = view == null ? null : view.dup();
        try {
            INDArray[] f = new INDArray[featureShape.length];
            for (int i = 0; i < f.length; i++) f[i] = Nd4j.rand(net.params().dataType(), featureShape[i]).subi(0.5);
            StringBuilder sb = new StringBuilder("{");
            if (net instanceof MultiLayerNetwork) multiLayer((MultiLayerNetwork) net, f[0], sb);
            else graph((ComputationGraph) net, f, sb);
            return sb.append('}').toString();
        } finally {
            r.setStates(state[0], state[1]);
            if (before != null) view.assign(before);
            else if (gradientView(net) != null) gradientView(net).assign(0);
        }
    }

    private static INDArray gradientView(Model net) {
        return net instanceof MultiLayerNetwork ? ((MultiLayerNetwork) net).getFlattenedGradients()
                : ((ComputationGraph) net).getFlattenedGradients();
    }

    private static void multiLayer(MultiLayerNetwork net, INDArray features, StringBuilder sb) {
        if (net.getFlattenedGradients() == null) net.initGradientsView();   // as fit() does: backprop writes there
        List<INDArray> acts = forward(net, features);   // input, then each layer's output
        Layer[] layers = net.getLayers();
        for (int i = 0; i < layers.length; i++) {
            String name = layers[i].conf().getLayer().getLayerName();
            if (name == null) name = "layer" + i;
            String measured = null;
            if (LayerState.opaque(layers[i]) && !(layers[i] instanceof IOutputLayer)) {
                InputPreProcessor pp = net.getLayerWiseConfigurations().getInputPreProcess(i);
                INDArray x = acts.get(i);
                if (pp != null) x = pp.preProcess(x.dup(), (int) x.size(0), LayerWorkspaceMgr.noWorkspaces());
                measured = measureLayer(layers[i], x.dup());
            }
            entry(sb, name, acts.get(i + 1), layers[i].numParams(), LayerState.opaque(layers[i]), measured);
        }
        net.clear();
    }

    private static void graph(ComputationGraph net, INDArray[] features, StringBuilder sb) {
        if (net.getFlattenedGradients() == null) net.initGradientsView();
        Map<String, INDArray> acts = forward(net, features);
        for (GraphVertex v : net.getVertices()) {
            if (v.isInputVertex()) continue;
            boolean opaque = v.hasLayer() ? LayerState.opaque(v.getLayer())
                    : !GraphNodes.MODELLED_VERTICES.contains(v.getClass().getName());
            String measured = null;
            if (opaque && !v.isOutputVertex()) {
                List<String> ins = net.getConfiguration().getVertexInputs().get(v.getVertexName());
                INDArray[] xs = new INDArray[ins.size()];
                for (int k = 0; k < xs.length; k++) xs[k] = acts.get(ins.get(k)).dup();
                measured = measureVertex(v, xs);
            }
            entry(sb, v.getVertexName(), acts.get(v.getVertexName()), v.numParams(), opaque, measured);
        }
        net.clearLayersStates();
    }

    /** DL4J's training-mode forward pass; where it fails, an IllegalArgumentException naming the first layer
     *  it fails at (each prefix of the network run again to find it) and the features' shape. */
    private static List<INDArray> forward(MultiLayerNetwork net, INDArray features) {
        try {
            return net.feedForward(features, true);
        } catch (RuntimeException e) {
            for (int i = 0; i < net.getnLayers(); i++) {
                try {
                    net.feedForwardToLayer(i, features, true);
                } catch (RuntimeException at) {
                    org.deeplearning4j.nn.conf.layers.Layer conf = net.getLayerWiseConfigurations().getConf(i).getLayer();
                    String name = conf.getLayerName() == null ? "layer" + i : conf.getLayerName();
                    throw failedAt(name, conf.getClass().getSimpleName(), features, at);
                } finally {
                    net.clear();
                }
            }
            throw e;
        }
    }

    private static Map<String, INDArray> forward(ComputationGraph net, INDArray[] features) {
        try {
            return net.feedForward(features, true, false);
        } catch (RuntimeException e) {
            List<Layer> layers = java.util.Arrays.asList(net.getLayers());
            for (int i : net.topologicalSortOrder()) {   // up to each layer (DL4J runs a graph up to a layer only)
                GraphVertex v = net.getVertices()[i];
                if (!v.hasLayer()) continue;
                try {
                    net.feedForward(features, layers.indexOf(v.getLayer()), true);
                } catch (RuntimeException at) {
                    String kind = v.hasLayer() ? v.getLayer().conf().getLayer().getClass().getSimpleName()
                            : v.getClass().getSimpleName();
                    throw failedAt(v.getVertexName(), kind, features[0], at);
                } finally {
                    net.clearLayersStates();
                }
            }
            throw e;
        }
    }

    private static IllegalArgumentException failedAt(String name, String kind, INDArray features, RuntimeException e) {
        return new IllegalArgumentException("DL4J's forward pass of this network fails at '" + name + "' (" + kind
                + ") on features of shape " + java.util.Arrays.toString(features.shape()) + ": " + e.getMessage()
                + "; a plan is made for the batch and input shape DL4J's fit() trains on (under truncated BPTT one "
                + "segment of tbpttFwdLength steps): give an input shape every layer takes", e);
    }

    private static void entry(StringBuilder sb, String name, INDArray y, long params, boolean opaque, String measured) {
        if (sb.length() > 1) sb.append(", ");
        sb.append('"').append(name.replace("\"", "'")).append("\": {\"shape\": ");
        if (y == null) sb.append("null");
        else {
            long[] s = y.shape();
            sb.append('[');
            for (int d = 1; d < s.length; d++) sb.append(d > 1 ? ", " : "").append(s[d]);
            sb.append(']');
        }
        sb.append(", \"params\": ").append(params).append(", \"opaque\": ").append(opaque);
        if (measured != null) sb.append(", \"measured\": ").append(measured);
        sb.append('}');
    }

    /** The trainer's manager for an opaque step (activations outside the working memory, in
     *  backward too), measuring into a fresh workspace. */
    private static StepWorkspaceMgr measuring() {
        WorkspaceConfiguration c = WorkspaceConfiguration.builder().initialSize(1L << 20)
                .policyAllocation(AllocationPolicy.STRICT).policyLearning(LearningPolicy.NONE)
                .policySpill(SpillPolicy.EXTERNAL).build();
        return StepWorkspaceMgr.of(WS, c, false);
    }

    /** Bytes of the arrays a step made outside workspaces and did not return or keep: its
     *  temporaries outside the working memory (they count as its working memory). */
    private static long temporaries(StepWorkspaceMgr m, List<INDArray> keep, INDArray... returned) {
        Set<Object> skip = Collections.newSetFromMap(new IdentityHashMap<>());
        for (INDArray a : keep) if (a != null) skip.add(Held.root(a));
        for (INDArray a : returned) if (a != null) skip.add(Held.root(a));
        long b = 0;
        for (INDArray a : m.drain()) {
            if (a.wasClosed() || !skip.add(Held.root(a))) continue;
            b += a.length() * a.dataType().width();
        }
        return b;
    }

    private static long used(MemoryWorkspace ws) {
        return ws.getPrimaryOffset() + ((Nd4jWorkspace) ws).getSpilledSize();
    }

    private static String measureLayer(Layer layer, INDArray x) {
        StepWorkspaceMgr mgr = measuring();
        StepWorkspaceMgr bpMgr = measuring();
        INDArray y;
        long fwd;
        try (MemoryWorkspace ws = mgr.notifyScopeEntered(ArrayType.FF_WORKING_MEM)) {
            y = layer.activate(x, true, mgr);
            fwd = used(ws);
            if (y.isAttached()) y = y.detach();
        }
        List<INDArray> held = LayerState.referenced(layer);
        fwd += temporaries(mgr, held, y);
        long saved = kept(held, x, y);
        long bwd;
        INDArray eps = Nd4j.rand(y.dataType(), y.shape());
        try (MemoryWorkspace ws = bpMgr.notifyScopeEntered(ArrayType.BP_WORKING_MEM)) {
            org.nd4j.common.primitives.Pair<org.deeplearning4j.nn.gradient.Gradient, INDArray> p = layer.backpropGradient(eps, bpMgr);
            bwd = used(ws) + temporaries(bpMgr, LayerState.referenced(layer), p.getSecond());
        }
        layer.clear();
        return "{\"ws_forward\": " + fwd + ", \"ws_backward\": " + bwd + ", \"saved\": " + saved + "}";
    }

    private static String measureVertex(GraphVertex v, INDArray[] xs) {
        StepWorkspaceMgr mgr = measuring();
        StepWorkspaceMgr bpMgr = measuring();
        INDArray y;
        long fwd;
        try (MemoryWorkspace ws = mgr.notifyScopeEntered(ArrayType.FF_WORKING_MEM)) {
            for (int k = 0; k < xs.length; k++) v.setInput(k, xs[k], mgr);
            y = v.doForward(true, mgr);
            fwd = used(ws);
            if (y.isAttached()) y = y.detach();
        }
        List<INDArray> held = new ArrayList<>(LayerState.referenced(v));
        if (v.hasLayer()) held.addAll(LayerState.referenced(v.getLayer()));
        List<INDArray> keep = new ArrayList<>(held);
        keep.addAll(java.util.Arrays.asList(xs));
        fwd += temporaries(mgr, keep, y);
        long saved = kept(held, y, xs);
        long bwd;
        try (MemoryWorkspace ws = bpMgr.notifyScopeEntered(ArrayType.BP_WORKING_MEM)) {
            v.setEpsilon(Nd4j.rand(y.dataType(), y.shape()));
            INDArray[] grads = v.doBackward(false, bpMgr).getSecond();
            List<INDArray> now = new ArrayList<>(LayerState.referenced(v));
            if (v.hasLayer()) now.addAll(LayerState.referenced(v.getLayer()));
            bwd = used(ws) + temporaries(bpMgr, now, grads);
        }
        v.setEpsilon(null);
        v.clear();
        return "{\"ws_forward\": " + fwd + ", \"ws_backward\": " + bwd + ", \"saved\": " + saved + "}";
    }

    /** Bytes of the distinct arrays in {@code held} that are not {@code known} (inputs, output) nor views (parameters). */
    private static long kept(List<INDArray> held, INDArray y, INDArray... known) {
        Set<Object> skip = Collections.newSetFromMap(new IdentityHashMap<>());
        for (INDArray a : known) if (a != null) skip.add(Held.root(a));
        if (y != null) skip.add(Held.root(y));
        long b = 0;
        for (INDArray a : held) {
            if (a == null || a.wasClosed() || a.isView() || !skip.add(Held.root(a))) continue;
            b += a.length() * a.dataType().width();
        }
        return b;
    }
}
