package org.pyd4j.train;

import java.util.Collections;

import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.workspace.ArrayType;
import org.nd4j.linalg.api.buffer.DataBuffer;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.memory.conf.WorkspaceConfiguration;
import org.nd4j.linalg.api.memory.enums.AllocationPolicy;
import org.nd4j.linalg.api.memory.enums.LearningPolicy;
import org.nd4j.linalg.api.memory.enums.ResetPolicy;
import org.nd4j.linalg.api.memory.enums.SpillPolicy;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.api.rng.Random;
import org.nd4j.linalg.factory.Nd4j;

/**
 * A node's forward and backward steps (the plan's compute records: FORWARD, RECOMPUTE, BACKWARD) run
 * on DL4J's layer or vertex: its inputs bound, its output, its layer's kept state and its inputs'
 * gradients held as the replay's arrays, each step's temporaries in the working-memory workspace and
 * swept after it. A recomputation replays the random state of the first forward. The record loop and
 * the records that only move memory are {@link PlanInterpreter}'s, which runs these steps.
 */
final class ComputeSteps {
    private final PlanInterpreter replay;
    private final PlanFile plan;
    private final NetworkNodes nodes;
    private final TrainStats stats;
    private final ReplayMemory memory;
    private final StepWorkspaceMgr mgr;     // forward steps: activations are kept
    private final StepWorkspaceMgr bpMgr;   // backward steps: activations are temporaries
    private final StepWorkspaceMgr opaqueBpMgr;   // an opaque step's backward: activations outside (see StepWorkspaceMgr#of)

    ComputeSteps(PlanInterpreter replay, PlanFile plan, NetworkNodes nodes, TrainStats stats, ReplayMemory memory,
                 BufferPool pool) {
        this.replay = replay;
        this.plan = plan;
        this.nodes = nodes;
        this.stats = stats;
        this.memory = memory;
        WorkspaceConfiguration working = WorkspaceConfiguration.builder()
                .initialSize(0).overallocationLimit(0.02)
                .policyAllocation(AllocationPolicy.OVERALLOCATE).policyLearning(LearningPolicy.OVER_TIME)
                .cyclesBeforeInitialization(plan.nodes.size()).policySpill(SpillPolicy.REALLOCATE)
                .policyReset(ResetPolicy.BLOCK_LEFT).build();
        this.mgr = StepWorkspaceMgr.of(PlannedTrainer.WORKING_MEMORY, working, false, pool);
        this.bpMgr = StepWorkspaceMgr.of(PlannedTrainer.WORKING_MEMORY, working, true, pool);
        this.opaqueBpMgr = StepWorkspaceMgr.of(PlannedTrainer.WORKING_MEMORY, working, false, pool);
    }

    /** FORWARD (or RECOMPUTE) of {@code node}, in {@code chunks} batch slices. */
    void forward(int node, boolean recompute, int chunks) {
        NodeState[] state = replay.state();
        int at = replay.at();
        PlanFile.Node pn = plan.nodes.get(node);
        if (pn.isInput()) {
            if (state[node].y == null) state[node].y = Held.borrowed(nodes.input(node));
            state[node].ready = true;
            return;
        }
        INDArray[] ins = new INDArray[pn.inputs.length];
        for (int k = 0; k < ins.length; k++) ins[k] = replay.materialize(pn.inputs[k], (recompute ? "RECOMPUTE " : "FORWARD ") + pn.name);
        releaseState(node);
        if (state[node].y != null) {   // recomputing a live output: the new one replaces it
            memory.drop(state[node].y);
            state[node].y = null;
        }
        Random random = Nd4j.getRandom();
        long[] saved = null;
        if (recompute && state[node].rng != null) {
            saved = new long[] {random.rootState(), random.nodeState()};
            random.setStates(state[node].rng[0], state[node].rng[1]);
        } else {
            state[node].rng = new long[] {random.rootState(), random.nodeState()};
        }
        INDArray out;
        memory.stepStart(at);
        try {
            long t = System.nanoTime();
            if (chunks > 1 || pn.sliced) {   // batch slices, each in its own working-memory scope
                out = nodes.forwardInChunks(node, ins, mgr, chunks);
                stats.chunkedSteps++;
            } else {
                try (MemoryWorkspace ws = mgr.notifyScopeEntered(ArrayType.FF_WORKING_MEM)) {
                    out = nodes.forward(node, ins, mgr);
                    if (out != null && out.isAttached()) out = out.detach();
                }
            }
            stats.layerNanos += System.nanoTime() - t;
        } finally {
            if (saved != null) random.setStates(saved[0], saved[1]);
        }
        stats.forwards++;
        if (out != null) {
            // A view of a buffer the step made itself is the trainer's to own (a convolution's output is a
            // permuted view of its own result); a view of anything else, or an array sharing memory with an
            // input or with what the layer keeps, is copied (e.g. a subset vertex's view of its input).
            DataBuffer root = Held.root(out);
            boolean alias = out.isView() && !mgr.made(root);
            for (INDArray in : ins) alias |= in != null && Held.sameMemory(in, out);
            if (!alias && out.isView()) for (INDArray k : nodes.referenced(node)) alias |= k != out && Held.root(k) == root;
            if (alias) out = Held.detachedCopy(out);
            state[node].y = Held.own(out);
            memory.hold(state[node].y.bytes);
        }
        memory.sweep(mgr, node, at, out);
        state[node].bound = ins;
        Layer l = nodes.layer(node);
        state[node].caches = l == null ? Collections.emptyList() : LayerState.caches(l, out);
        state[node].cacheBytes = Held.bytes(state[node].caches);
        memory.hold(state[node].cacheBytes);
        state[node].ready = true;
    }

    /** Close what the node's layer kept for its backward step. */
    void releaseState(int node) {
        NodeState[] state = replay.state();
        Layer l = nodes.layer(node);
        if (l != null && (state[node].ready || state[node].caches != null)) {
            LayerState.release(l, state[node].caches == null ? Collections.emptyList() : state[node].caches,
                    state[node].y == null ? null : state[node].y.array);
        }
        memory.forget(state[node].cacheBytes);
        state[node].cacheBytes = 0;
        state[node].caches = null;
        state[node].ready = false;
    }

    /** BACKWARD of {@code node}: its score when it is an output layer, else NaN. */
    double backward(int node) {
        NodeState[] state = replay.state();
        int at = replay.at();
        PlanFile.Node pn = plan.nodes.get(node);
        if (pn.isInput()) throw replay.planError("network inputs have no backward step");
        if (state[node].cut && state[node].dy == null && !nodes.isOutput(node)) return cutOff(node);
        if (!state[node].ready) {
            // the plan released the layer's state (with its output) and did not rebuild it: rebuild
            // it now from the inputs, exactly (same random state); its output is not needed again
            Held keep = state[node].y;
            state[node].y = null;
            forward(node, true, plan.records.get(at).chunks);
            stats.rebuilds++;
            if (state[node].y != null) memory.drop(state[node].y);
            state[node].y = keep;
        }
        Layer l = nodes.layer(node);
        boolean ownInput = l != null && LayerState.dropoutApplied(l);
        memory.stepStart(at);
        for (int k = 0; k < pn.inputs.length; k++) {
            int j = pn.inputs[k];
            INDArray cur = state[j].y != null || state[j].incoming ? replay.materialize(j, "BACKWARD " + pn.name) : null;
            if (cur == state[node].bound[k]) continue;
            if (cur == null) {
                if (!ownInput && nodes.backwardReadsInput(node, k)) {
                    throw replay.planError("BACKWARD " + pn.name + " reads its input " + plan.nodes.get(j).name
                            + ":Y (DL4J's " + (l == null ? "vertex" : l.getClass().getSimpleName())
                            + " backprop reads it), which the plan freed");
                }
                continue;
            }
            if (!ownInput) {
                try (MemoryWorkspace ws = mgr.notifyScopeEntered(ArrayType.FF_WORKING_MEM)) {
                    nodes.rebind(node, k, cur, mgr);
                }
                memory.sweep(mgr, node, at);
            }
            state[node].bound[k] = cur;
        }
        boolean output = nodes.isOutput(node);
        INDArray eps = state[node].dy == null ? null : state[node].dy.array;
        if (!output && eps == null) throw replay.planError("BACKWARD " + pn.name + " has no gradient of its output");
        Held[] grads;
        double score = Double.NaN;
        int chunks = plan.records.get(at).chunks;
        long t = System.nanoTime();
        // the plan writes the input's gradient over this node's (a MOVE of its DY follows): a sliced batch
        // normalization does so, and the array changes hands
        PlanFile.Record next = at + 1 < plan.records.size() ? plan.records.get(at + 1) : null;
        boolean inPlace = pn.sliced && !output && next != null && next.op == PlanFile.Op.MOVE
                && next.src == PlanFile.KINDS * node + PlanFile.DY && nodes.preprocessor(node) == null;
        if ((chunks > 1 || pn.sliced) && !output) {   // batch slices, each in its own working-memory scope
            grads = nodes.backwardInChunks(node, eps, bpMgr, chunks, inPlace);
            stats.chunkedSteps++;
            if (inPlace) {   // the gradient is dy's array now: held again below as the input's
                memory.forget(state[node].dy.bytes);
                state[node].dy = null;
            }
        } else {
            StepWorkspaceMgr m = nodes.opaque(node) ? opaqueBpMgr : bpMgr;
            try (MemoryWorkspace ws = m.notifyScopeEntered(ArrayType.BP_WORKING_MEM)) {
                grads = nodes.backward(node, eps, m);
                for (int k = 0; k < grads.length; k++) {
                    if (grads[k] != null && grads[k].array.isAttached()) grads[k] = Held.own(grads[k].array.detach());
                }
                if (output) score = nodes.score(node, m);
            }
        }
        stats.layerNanos += System.nanoTime() - t;
        INDArray[] returned = new INDArray[grads.length];
        for (int k = 0; k < grads.length; k++) returned[k] = grads[k] == null ? null : grads[k].array;
        memory.sweep(nodes.opaque(node) ? opaqueBpMgr : bpMgr, node, at, returned);
        handOn(node, pn, grads);
        releaseState(node);   // the layer's kept arrays are dead once its backprop ran
        return score;
    }

    /** Each input its gradient from this backward step: kept (a copy where it shares memory with what the
     *  step or a live activation holds), or added to what another reader gave it, as DL4J accumulates. */
    private void handOn(int node, PlanFile.Node pn, Held[] grads) {
        NodeState[] state = replay.state();
        for (int k = 0; k < grads.length && k < pn.inputs.length; k++) {
            Held g = grads[k];
            if (g == null) state[pn.inputs[k]].cut = true;   // a FrozenLayer passes no gradient back
            if (g == null) continue;
            int j = pn.inputs[k];
            boolean alias = state[node].dy != null && state[node].dy.sharesMemoryWith(g.array);
            for (int m = 0; m < k; m++) alias |= grads[m] != null && grads[m].sharesMemoryWith(g.array);
            // a loss layer without weights (LossLayer, CnnLossLayer, RnnLossLayer) computes its input gradient
            // in place on its input (sigmoid's or tanh's derivative): the plan frees that input on its own
            for (int i : pn.inputs) alias |= state[i].y != null && state[i].y.sharesMemoryWith(g.array);
            if (plan.nodes.get(j).isInput()) {   // DL4J computes the input's gradient; nobody needs it
                if (!alias) memory.release(g);
                continue;
            }
            if (alias) g = Held.own(Held.detachedCopy(g.array));   // e.g. an add vertex passing its gradient on
            if (state[j].dy == null) {
                state[j].dy = g;
                memory.hold(g.bytes);
            } else {
                state[j].dy.array.addi(g.array);   // as ComputationGraph accumulates epsilons: existing.addi(new)
                memory.release(g);
            }
        }
    }

    /** A node whose readers passed it no gradient (a FrozenLayer): backprop stops there and below it. */
    private double cutOff(int node) {
        NodeState[] state = replay.state();
        releaseState(node);
        for (int j : plan.nodes.get(node).inputs) state[j].cut = true;
        return Double.NaN;
    }
}
