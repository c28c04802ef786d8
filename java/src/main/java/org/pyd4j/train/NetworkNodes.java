package org.pyd4j.train;

import java.util.ArrayList;
import java.util.LinkedList;
import java.util.List;

import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.api.layers.RecurrentLayer;
import org.deeplearning4j.nn.conf.InputPreProcessor;
import org.deeplearning4j.nn.gradient.DefaultGradient;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.layers.wrapper.BaseWrapperLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Triple;
import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * The nodes of a plan bound to a live network: each node's forward and backward step run DL4J's
 * own code ({@code Layer.activate}/{@code backpropGradient} with the layer's preprocessor for a
 * MultiLayerNetwork, {@code GraphVertex.doForward}/{@code doBackward} for a ComputationGraph).
 * Steps run inside the trainer's working-memory workspace scope; what they return is detached.
 */
abstract class NetworkNodes {
    final PlanFile plan;
    /** DL4J's gradient entries of this iteration, in the order DL4J's own backprop builds them. */
    protected final LinkedList<Triple<String, INDArray, Character>> gradients = new LinkedList<>();

    NetworkNodes(PlanFile plan) {
        this.plan = plan;
    }

    static NetworkNodes of(Model net, PlanFile plan) {
        if (net instanceof MultiLayerNetwork) return new MultiLayerNodes((MultiLayerNetwork) net, plan);
        if (net instanceof ComputationGraph) return new GraphNodes((ComputationGraph) net, plan);
        throw new IllegalArgumentException("planned training runs a MultiLayerNetwork or a ComputationGraph, not "
                + (net == null ? "null" : net.getClass().getName()));
    }

    abstract Model network();

    /** Problems that keep this network from planned training (empty: supported). */
    abstract List<String> unsupported();

    /** Prepare the network for planned iterations (e.g. forbid in-place input dropout). */
    abstract void attach();

    /** Undo {@link #attach}. */
    abstract void detach();

    /** Called at the start of every iteration, after the network's input and labels are set. */
    abstract void beginIteration();

    /** The network's input array for a DATA node (not owned by the trainer). */
    abstract INDArray input(int node);

    /** The DL4J layer of a node, or null (inputs, non-layer vertices). */
    abstract Layer layer(int node);

    /** Whether the node is an output (loss) layer: no output tensor, backward starts the gradient. */
    abstract boolean isOutput(int node);

    /** Run the node's forward step on its inputs; returns its output (null for output layers). */
    abstract INDArray forward(int node, INDArray[] inputs, LayerWorkspaceMgr mgr);

    /** Give the node's layer a new input array (its producer was freed and rebuilt since forward). */
    abstract void rebind(int node, int k, INDArray input, LayerWorkspaceMgr mgr);

    /** Run the node's backward step; returns the gradient of each input (null where none). */
    abstract Held[] backward(int node, INDArray epsilon, LayerWorkspaceMgr mgr);

    /** The input preprocessor of a layer node (null: none). */
    abstract InputPreProcessor preprocessor(int node);

    /** The minibatch size DL4J hands the network's preprocessors. */
    abstract int miniBatch();

    /** A layer node's input through its preprocessor, as DL4J's forward pass applies it. */
    final INDArray preprocessed(int node, INDArray x, LayerWorkspaceMgr mgr) {
        InputPreProcessor pp = preprocessor(node);
        return pp == null ? x : pp.preProcess(x, miniBatch(), mgr);
    }

    /**
     * The input gradient a layer node's backward step hands on: the layer's own, through the
     * backward of its input preprocessor if it has one (held as cut from the layer's array).
     */
    final Held[] inputGradient(int node, INDArray eps, LayerWorkspaceMgr mgr) {
        InputPreProcessor pp = preprocessor(node);
        if (pp == null || eps == null) return new Held[] {Held.own(eps)};
        INDArray processed = pp.backprop(eps, miniBatch(), mgr);
        // a weightless loss layer's gradient written over its own input (sigmoid, tanh): not a dead intermediate
        Layer l = layer(node);
        boolean overInput = l != null && l.input() != null && Held.sameMemory(eps, l.input());
        return new Held[] {overInput ? Held.own(processed) : Held.preprocessed(eps, processed)};
    }

    /** Add a backward step's parameter gradients to this iteration's, in DL4J's order. */
    abstract void addGradient(int node, Gradient g);

    /** The forward step of a convolution or LRN node in batch slices (see {@link ChunkedStep}); each
     *  slice runs in its own working-memory scope, so the caller opens none. */
    abstract INDArray forwardInChunks(int node, INDArray[] inputs, StepWorkspaceMgr mgr, int chunks);

    /** The backward step of a convolution or LRN node in batch slices, as {@link #backward} returns it;
     *  {@code inPlace}: a sliced batch normalization's input gradient written over {@code epsilon}. */
    Held[] backwardInChunks(int node, INDArray epsilon, StepWorkspaceMgr mgr, int chunks, boolean inPlace) {
        org.nd4j.common.primitives.Pair<Gradient, INDArray> p = ChunkedStep.backward(layer(node), epsilon, chunks, mgr, inPlace);
        addGradient(node, p.getFirst());
        return inputGradient(node, p.getSecond(), mgr);
    }

    /** Whether a record is a step in batch slices: chunks, or a node the plan runs sliced. */
    final boolean sliced(PlanFile.Record r) {
        return r.isCompute() && (r.chunks > 1 || plan.nodes.get(r.arg).sliced);
    }

    /** What keeps the plan's batch-chunked steps from running (empty: nothing). */
    List<String> chunkProblems() {
        List<String> out = new ArrayList<>();
        for (PlanFile.Record r : plan.records) {
            if (!sliced(r)) continue;
            String p = ChunkedStep.problem(layer(r.arg), "'" + plan.nodes.get(r.arg).name + "'", r.chunks,
                    plan.nodes.get(r.arg).sliced);
            if (p != null && !out.contains(p)) out.add(p);
        }
        return out;
    }

    /** The score of one output node, after its backward step. */
    abstract double score(int node, LayerWorkspaceMgr mgr);

    /** The network's score from its output nodes' ({@code byNode}, by node), summed as DL4J sums it. */
    abstract double totalScore(double[] byNode);

    /** Batch chunks slice a step's input, not the mask arrays its layer holds: refuse the combination. */
    void checkChunkedMasks() {
        for (PlanFile.Record r : plan.records) {
            if (!sliced(r)) continue;
            Layer l = layer(r.arg);
            if (l != null && l.getMaskArray() != null) {
                throw new UnsupportedOperationException("plan " + plan.source + " runs layer '" + plan.nodes.get(r.arg).name
                        + "' in " + r.chunks + " batch chunks, and this batch gives it a mask array, which chunked steps "
                        + "do not slice; write the plan without a budget (no chunks) for masked data");
            }
        }
    }

    /** Arrays the node's layer or vertex holds in its fields now (kept between steps). */
    abstract List<INDArray> referenced(int node);

    /** Whether the node's backward step reads the values of its k-th input. */
    boolean backwardReadsInput(int node, int k) {
        Layer l = layer(node);
        return l == null || LayerState.backwardReadsInput(l);
    }

    /** Store the iteration's gradient and score in the network, as its computeGradientAndScore does. */
    abstract void finishIteration(double score);

    /** Whether the node runs as an opaque step: DL4J's own forward and backward, its inputs kept,
     *  nothing it made closed by the trainer (a layer or vertex without a measured model). */
    boolean opaque(int node) {
        Layer l = layer(node);
        return l != null && LayerState.opaque(l);
    }

    /** The recurrent layer DL4J's forward pass with stored state runs for this layer under truncated BPTT
     *  (the layer itself, or the one a wrapper such as LastTimeStep holds); else null. */
    static RecurrentLayer recurrent(Layer layer) {
        if (layer instanceof RecurrentLayer) return (RecurrentLayer) layer;
        if (layer instanceof BaseWrapperLayer && ((BaseWrapperLayer) layer).getUnderlying() instanceof RecurrentLayer) {
            return (RecurrentLayer) ((BaseWrapperLayer) layer).getUnderlying();
        }
        return null;
    }

    /** Under truncated BPTT, DL4J's fit() trains one iteration per segment of tbpttFwdLength steps
     *  ({@code doTruncatedBPTT}), each starting its recurrent layers from the state the segment before left;
     *  {@code computeGradientAndScore} runs them forward with that stored state, and backward as usual (in
     *  1.0.0-M2.1 it passes tbptt=false to its backward pass: tbpttBackLength is not applied). What of that a
     *  plan cannot replay: a whole network as a layer, and a recurrent layer recomputed (its forward stores
     *  the next segment's state, so it runs once a segment). */
    List<String> truncatedBpttProblems() {
        List<String> out = new ArrayList<>();
        for (PlanFile.Node n : plan.nodes) {
            if (layer(n.id) instanceof MultiLayerNetwork) {
                out.add(n + " is a whole MultiLayerNetwork, which planned training does not replay under truncated "
                        + "BPTT; train it with DL4J's own fit()");
            }
        }
        for (PlanFile.Record r : plan.records) {
            if (r.op == PlanFile.Op.RECOMPUTE && recurrent(layer(r.arg)) != null) {
                out.add("the plan " + plan.source + " recomputes " + plan.nodes.get(r.arg) + ", whose forward pass under "
                        + "truncated BPTT stores the state the next segment starts from: it runs once a segment; write "
                        + "the plan from this network's configuration");
                break;
            }
        }
        return out;
    }

    /** The forward step of a recurrent layer under truncated BPTT, as DL4J's forward pass with stored state
     *  runs it (on the layer's raw input, storing this segment's last state for the next); null for a layer
     *  that runs as usual. The state is kept apart from the arrays the plan frees: LSTM stores its last
     *  step's own arrays, SimpleRnn a copy made out of workspaces. */
    static INDArray withStoredState(Layer layer, INDArray input, LayerWorkspaceMgr mgr) {
        RecurrentLayer rnn = recurrent(layer);
        return rnn == null ? null : rnn.rnnActivateUsingStoredState(input, true, true, mgr);
    }

    /** Problems common to every layer (null: none). Any layer type trains (opaque where not
     *  modelled); what is refused is what cannot be replayed exactly. */
    static String layerProblem(Layer layer, String name) {
        if (LayerState.hasWeightNoise(layer)) {
            return "layer " + name + " uses weight noise (DropConnect/WeightNoise), which planned training does not "
                    + "replay; remove it or train with DL4J's own fit()";
        }
        Object d = LayerState.inputDropout(layer);
        if (d != null && d.getClass() != org.deeplearning4j.nn.conf.dropout.Dropout.class) {
            return "layer " + name + " uses " + d.getClass().getSimpleName() + "; planned training replays only "
                    + "Dropout (inverted dropout); use Dropout or train with DL4J's own fit()";
        }
        return null;
    }

    /** Whether the layer applies its input dropout in place on its input in DL4J's own fit(): DL4J allowed it
     *  input modification ({@code allowed}, as its network's init set it: every MultiLayerNetwork layer after the
     *  first, a graph layer its input's last reader) and it has an input dropout. The result can depend on it
     *  (ElementWiseMultiplicationLayer computes from the array it was given, dropped only when in place), so the
     *  trainer lets such a layer drop in place too -- on its own copy of its input, which it keeps as its dropped
     *  input: the producer's output stays intact for the plan. */
    static boolean dropsInPlace(Layer layer, boolean allowed) {
        return allowed && layer != null && LayerState.inputDropout(layer) != null && LayerState.appliesInputDropout(layer);
    }

    /** DL4J's gradient object for this iteration, built from {@link #gradients} as DL4J does. */
    Gradient gradient(INDArray flattened) {
        Gradient g = new DefaultGradient(flattened);
        for (Triple<String, INDArray, Character> t : gradients) g.setGradientFor(t.getFirst(), t.getSecond(), t.getThird());
        return g;
    }

    static List<String> names(List<PlanFile.Node> nodes) {
        List<String> out = new ArrayList<>();
        for (PlanFile.Node n : nodes) out.add(n.name);
        return out;
    }
}
