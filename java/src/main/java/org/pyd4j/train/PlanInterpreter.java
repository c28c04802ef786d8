package org.pyd4j.train;

import java.util.Arrays;

import org.deeplearning4j.nn.api.Model;
import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * Runs one planned iteration: the plan's records in order, on DL4J's layers and vertices. The records
 * that only move memory (FREE, MOVE, OFFLOAD, PREFETCH) are handled here, where what each node holds
 * lives ({@link NodeState}); the compute records are {@link ComputeSteps}'; the bytes held and the
 * buffer pool, {@link ReplayMemory}'s. {@link PlannedTrainer} is what DL4J and callers see: it attaches
 * the plan and calls {@link #iteration} for each gradient DL4J asks for.
 */
final class PlanInterpreter {
    private final PlanFile plan;
    private final NetworkNodes nodes;
    private final OffloadTier tier;
    private final TrainStats stats;
    private final ReplayMemory memory;
    private final ComputeSteps steps;
    private final int[] lastPrefetch;   // record index of each tensor's last PREFETCH, -1 if none
    private final boolean[] savedRecords;   // the plan frees what node i keeps for backward (5 * n + i) itself

    // replay state of one iteration, by node
    private NodeState[] state = new NodeState[0];
    private int at;   // index of the record being replayed

    PlanInterpreter(Model net, PlanFile plan, NetworkNodes nodes, OffloadTier tier, TrainStats stats, BufferPool pool) {
        this.plan = plan;
        this.nodes = nodes;
        this.tier = tier;
        this.stats = stats;
        this.memory = new ReplayMemory(pool, stats, nodes, net.numParams() * net.params().dataType().width());
        this.steps = new ComputeSteps(this, plan, nodes, stats, memory, pool);
        this.lastPrefetch = new int[PlanFile.KINDS * plan.nodes.size()];
        Arrays.fill(lastPrefetch, -1);
        this.savedRecords = new boolean[plan.nodes.size()];
        for (int k = 0; k < plan.records.size(); k++) {
            PlanFile.Record r = plan.records.get(k);
            if (r.op == PlanFile.Op.PREFETCH) lastPrefetch[r.arg] = k;
            if (!r.isCompute() && plan.isSaved(r.arg)) savedRecords[plan.savedNode(r.arg)] = true;
        }
    }

    /** What the replay holds, by node, this iteration. */
    NodeState[] state() {
        return state;
    }

    /** The index of the record being replayed. */
    int at() {
        return at;
    }

    /** One planned iteration on the network's current input and labels: sets its gradient and score. */
    void iteration() {
        long started = System.nanoTime();
        int n = plan.nodes.size();
        state = new NodeState[n];
        for (int i = 0; i < n; i++) state[i] = new NodeState();
        memory.beginIteration(plan.records.size());
        double[] scores = new double[n];   // by output node
        boolean[] scored = new boolean[n];
        nodes.beginIteration();
        try {
            for (at = 0; at < plan.records.size(); at++) {
                PlanFile.Record r = plan.records.get(at);
                switch (r.op) {
                    case ALLOC:
                        break;   // arrays are created by the steps that produce them
                    case FREE:
                        free(r.arg);
                        break;
                    case MOVE:
                        // the planner's model let the step write over src; DL4J's layer wrote a new
                        // array, so src is simply dead now (what the node keeps stays)
                        move(r.src);
                        break;
                    case OFFLOAD:
                        offload(r.arg);
                        break;
                    case PREFETCH:
                        prefetch(r.arg);
                        break;
                    case FORWARD:
                        steps.forward(r.arg, false, r.chunks);
                        break;
                    case RECOMPUTE:
                        steps.forward(r.arg, true, r.chunks);
                        stats.recomputes++;
                        break;
                    case BACKWARD:
                        double s = steps.backward(r.arg);
                        if (nodes.isOutput(r.arg)) {
                            scores[r.arg] = s;
                            scored[r.arg] = true;
                        }
                        break;
                    default:
                        throw planError("operation " + r.op + " is not replayed by this trainer");
                }
            }
            for (int i = 0; i < n; i++) {
                if (!plan.nodes.get(i).isInput() && nodes.isOutput(i) && !scored[i]) {
                    throw planError("the plan has no BACKWARD record of the output layer " + plan.nodes.get(i).name);
                }
            }
        } finally {
            releaseAll();
            memory.endIteration();
        }
        nodes.finishIteration(nodes.totalScore(scores));
        stats.iterations++;
        stats.iterationNanos += System.nanoTime() - started;
        stats.workingMemoryBytes = Math.max(stats.workingMemoryBytes, PlannedTrainer.workingMemoryBytes());
    }

    /** The error naming the plan, the record being replayed and {@code why}. */
    BadPlanException planError(String why) {
        String rec = at < plan.records.size() ? " record " + at + " (" + describe(plan.records.get(at)) + ")" : "";
        return new BadPlanException("plan " + plan.source + rec + ": " + why);
    }

    private String describe(PlanFile.Record r) {
        if (r.isCompute()) return r.op + " " + plan.nodes.get(r.arg).name;
        if (plan.isSaved(r.arg)) return r.op + " " + plan.nodes.get(plan.savedNode(r.arg)).name + ":STATE";
        String[] kinds = {"Y", "DY", "W", "DW", "M"};
        if (r.op == PlanFile.Op.MOVE) {
            return "MOVE " + plan.nodes.get(PlanFile.node(r.arg)).name + ":" + kinds[PlanFile.kind(r.arg)] + " <- "
                    + plan.nodes.get(PlanFile.node(r.src)).name + ":" + kinds[PlanFile.kind(r.src)];
        }
        return r.op + " " + plan.nodes.get(PlanFile.node(r.arg)).name + ":" + kinds[PlanFile.kind(r.arg)];
    }

    /** Y of node j, bringing it back from the tier if a prefetch is on its way. */
    INDArray materialize(int j, String reader) {
        if (state[j].y != null) return state[j].y.array;
        if (plan.nodes.get(j).isInput()) {   // DL4J holds the network's input for the whole iteration
            state[j].y = Held.borrowed(nodes.input(j));
            return state[j].y.array;
        }
        if (state[j].incoming) {
            INDArray a = tier.take(PlanFile.KINDS * j);
            state[j].incoming = false;
            state[j].y = Held.own(a);
            memory.hold(state[j].y.bytes);
            if (lastPrefetch[PlanFile.KINDS * j] < at) dropHostCopy(j);
            return a;
        }
        throw planError(reader + " reads " + plan.nodes.get(j).name + ":Y, which is neither live nor on its way back "
                + "(freed without a host copy or a recomputation)");
    }

    private void free(int t) {
        if (plan.isSaved(t)) {
            // what the node's forward step kept for its backward step: a BACKWARD that finds it gone
            // runs the forward step again first (exactly; the plan normally RECOMPUTEs before it)
            steps.releaseState(plan.savedNode(t));
            return;
        }
        int node = PlanFile.node(t);
        int kind = PlanFile.kind(t);
        if (kind == PlanFile.Y) {
            if (state[node].offloadPending) {
                tier.awaitOffloaded(t);
                state[node].offloadPending = false;
            }
            if (state[node].incoming) materialize(node, "FREE");
            if (state[node].y != null) {
                memory.drop(state[node].y);
                state[node].y = null;
            }
            // What the layer keeps for its own backprop (batch norm's normalized input, a dropout
            // mask) goes with its output -- unless the output went to the tier: then it comes back
            // for the backward step and the layer's state waits for it (the tier holds activations only).
            if (!state[node].hostCopy && !savedRecords[node]) {
                boolean lost = state[node].caches != null && !state[node].caches.isEmpty();
                boolean wasReady = state[node].ready;
                steps.releaseState(node);
                state[node].ready = wasReady && !lost;   // a layer that kept nothing but its input can still run backward
            }
            if (lastPrefetch[t] < at && !state[node].incoming) dropHostCopy(node);
        } else if (kind == PlanFile.DY) {
            if (state[node].dy != null) {
                memory.drop(state[node].dy);
                state[node].dy = null;
            }
        }
        // W, DW, M: DL4J's parameters, gradients and updater state stay where DL4J keeps them
    }

    /** src's buffer went to another tensor in the planner's model: close DL4J's array of src. */
    private void move(int src) {
        int node = PlanFile.node(src);
        if (PlanFile.kind(src) == PlanFile.Y) {
            if (state[node].offloadPending) {
                tier.awaitOffloaded(src);
                state[node].offloadPending = false;
            }
            if (state[node].y != null) {
                memory.drop(state[node].y);
                state[node].y = null;
            }
        } else if (PlanFile.kind(src) == PlanFile.DY && state[node].dy != null) {
            memory.drop(state[node].dy);
            state[node].dy = null;
        }
    }

    /** The tier forgets node's activation: no PREFETCH of it follows. */
    private void dropHostCopy(int node) {
        if (!state[node].hostCopy) return;
        tier.release(PlanFile.KINDS * node);
        state[node].hostCopy = false;
    }

    private void offload(int t) {
        int node = PlanFile.node(t);
        if (PlanFile.kind(t) != PlanFile.Y) throw planError("only activations (Y) are offloaded");
        if (state[node].y == null) throw planError("offloads " + plan.nodes.get(node).name + ":Y, which is not live");
        if (state[node].y.base == null) return;   // the network's input: DL4J holds it anyway
        tier.offload(t, state[node].y.array);
        state[node].hostCopy = true;
        state[node].offloadPending = true;
        stats.offloads++;
    }

    private void prefetch(int t) {
        int node = PlanFile.node(t);
        if (plan.nodes.get(node).isInput()) {   // the network's input never left: DL4J holds it
            if (state[node].y == null) state[node].y = Held.borrowed(nodes.input(node));
            return;
        }
        if (!state[node].hostCopy) {
            if (state[node].y != null && state[node].y.base == null) return;   // the network's input never left
            throw planError("prefetches " + plan.nodes.get(node).name + ":Y, which has no host copy");
        }
        if (state[node].y != null || state[node].incoming) return;   // still live: nothing to bring back
        tier.prefetch(t);
        state[node].incoming = true;
        stats.prefetches++;
    }

    /** End of an iteration (or a failure): close everything still held, forget host copies. */
    private void releaseAll() {
        for (int i = 0; i < state.length; i++) {
            try {
                if (state[i].offloadPending) tier.awaitOffloaded(PlanFile.KINDS * i);
                if (state[i].incoming) tier.take(PlanFile.KINDS * i).close();
                dropHostCopy(i);
            } finally {
                if (state[i].y != null) memory.drop(state[i].y);
                if (state[i].dy != null) memory.drop(state[i].dy);
                steps.releaseState(i);
                state[i].y = state[i].dy = null;
                state[i].hostCopy = state[i].offloadPending = state[i].incoming = false;
            }
        }
        memory.clear();
    }
}
