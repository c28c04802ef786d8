package org.pyd4j.train;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.List;

import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.api.OptimizationAlgorithm;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.workspace.ArrayType;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.deeplearning4j.optimize.Solver;
import org.deeplearning4j.optimize.api.ConvexOptimizer;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.deeplearning4j.optimize.solvers.BaseOptimizer;
import org.deeplearning4j.optimize.solvers.StochasticGradientDescent;
import org.nd4j.linalg.api.buffer.DataBuffer;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.memory.conf.WorkspaceConfiguration;
import org.nd4j.linalg.api.memory.enums.AllocationPolicy;
import org.nd4j.linalg.api.memory.enums.LearningPolicy;
import org.nd4j.linalg.api.memory.enums.ResetPolicy;
import org.nd4j.linalg.api.memory.enums.SpillPolicy;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.api.rng.Random;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;
import org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator;
import org.nd4j.linalg.factory.Nd4j;

/**
 * Trains a DL4J network with DL4J's own layers, updater and {@code fit()} loop, holding its
 * activations as a pyd4j plan says: each is kept, closed right after its last use, recomputed in
 * the backward pass, or offloaded through an {@link OffloadTier}.
 *
 * <pre>
 *   PlannedTrainer.fit(net, trainIterator, "net.plan.json");          // one epoch, as net.fit(iterator)
 *                                                                     // (an offloading plan gets the backend's tier)
 *
 *   try (PlannedTrainer t = PlannedTrainer.attach(net, PlanFile.read("net.plan.json"), tier)) {
 *       net.fit(trainIterator, 10);                                       // DL4J's loop, planned iterations
 *   }
 * </pre>
 *
 * {@link #attach} replaces only the gradient computation of the network's optimizer (see
 * {@link PlannedOptimizer}); DL4J's updater, listeners, iteration and epoch counts,
 * regularization and gradient normalization run as in {@code fit()}. One iteration replays the
 * plan's records on DL4J's layers and vertices ({@link NetworkNodes}); recomputation is exact
 * (the random state each node drew its dropout mask from is restored; batch normalization's
 * running statistics change only through the gradient its backprop writes, once). A
 * convolution's or LRN's step the plan gives batch chunks runs on slices of the batch ({@link ChunkedStep}:
 * its working memory, DL4J's largest, divided by the chunk count; the same result up to the order
 * of floating-point additions). What the trainer cannot replay exactly is refused before training
 * with the layer and the fix.
 */
public final class PlannedTrainer implements AutoCloseable {
    /** The name of the working-memory workspace (temporaries of one forward or backward step). */
    public static final String WORKING_MEMORY = "PYD4J_PLANNED_WORKING_MEM";

    private final Model net;
    private final PlanFile plan;
    private final NetworkNodes nodes;
    private final OffloadTier tier;
    private final StepWorkspaceMgr mgr;     // forward steps: activations are kept
    private final StepWorkspaceMgr bpMgr;   // backward steps: activations are temporaries
    private final StepWorkspaceMgr opaqueBpMgr;   // an opaque step's backward: activations outside (see StepWorkspaceMgr#of)
    private final TrainStats stats = new TrainStats();
    private final BufferPool pool;   // released buffers for the next arrays of their size
    private final int[] lastPrefetch;   // record index of each tensor's last PREFETCH, -1 if none
    private final boolean[] savedRecords;   // the plan frees what node i keeps for backward (5 * n + i) itself

    private Solver solver;
    private ConvexOptimizer original;
    private boolean attached;

    /** What the replay holds for one node during an iteration. */
    private static final class NodeState {
        Held y;                      // its output (activations), while live
        Held dy;                     // the gradient of the loss with respect to its output, while live
        List<INDArray> caches;       // what its layer kept for its backward step (null: nothing recorded)
        long cacheBytes;             // their bytes, counted in live
        boolean ready;               // its layer holds the state its backward step needs
        INDArray[] bound;            // the inputs its layer was last given
        long[] rng;                  // random state before its first forward: a recomputation replays it
        boolean hostCopy;            // its output has a copy in the offload tier
        boolean offloadPending;      // ... still being written
        boolean incoming;            // ... being brought back (prefetched, not yet taken)
        boolean cut;                 // a reader's backward passed no gradient back to it (a FrozenLayer)
    }

    // replay state of one iteration, by node
    private NodeState[] state = new NodeState[0];
    private long live;
    private int at;   // index of the record being replayed
    // The pool's bound: the most memory out of workspaces the replay had at once (arrays held when a
    // step began plus what the step made), and what each record's step made, this iteration and the last.
    private long outPeak;
    private long stepStartLive;
    private long[] stepMade = new long[0];
    private long[] lastStepMade;   // null in the first iteration: the pool keeps nothing before it knows the steps
    private final long parameterBytes;   // room the pool leaves between iterations for DL4J's update step

    private PlannedTrainer(Model net, PlanFile plan, NetworkNodes nodes, OffloadTier tier) {
        this.net = net;
        this.plan = plan;
        this.nodes = nodes;
        this.tier = tier;
        this.stats.plannedPeakBytes = plan.predictedPeakBytes;
        this.pool = BufferPool.forPlan(plan);
        this.parameterBytes = net.numParams() * net.params().dataType().width();
        WorkspaceConfiguration working = WorkspaceConfiguration.builder()
                .initialSize(0).overallocationLimit(0.02)
                .policyAllocation(AllocationPolicy.OVERALLOCATE).policyLearning(LearningPolicy.OVER_TIME)
                .cyclesBeforeInitialization(plan.nodes.size()).policySpill(SpillPolicy.REALLOCATE)
                .policyReset(ResetPolicy.BLOCK_LEFT).build();
        this.mgr = StepWorkspaceMgr.of(WORKING_MEMORY, working, false, pool);
        this.bpMgr = StepWorkspaceMgr.of(WORKING_MEMORY, working, true, pool);
        this.opaqueBpMgr = StepWorkspaceMgr.of(WORKING_MEMORY, working, false, pool);
        this.lastPrefetch = new int[PlanFile.KINDS * plan.nodes.size()];
        Arrays.fill(lastPrefetch, -1);
        this.savedRecords = new boolean[plan.nodes.size()];
        for (int k = 0; k < plan.records.size(); k++) {
            PlanFile.Record r = plan.records.get(k);
            if (r.op == PlanFile.Op.PREFETCH) lastPrefetch[r.arg] = k;
            if (!r.isCompute() && plan.isSaved(r.arg)) savedRecords[plan.savedNode(r.arg)] = true;
        }
    }

    /**
     * A workspace manager that puts the temporaries of a step (FF/BP working memory) in workspace
     * {@code name} and every other array type in no workspace, so that activations, gradients and
     * what layers keep are separate arrays the trainer can close. In the backward pass (as in
     * DL4J's own calcBackpropGradients) activations are temporaries too -- a layer's backprop
     * recomputes its pre-activation as an ACTIVATIONS array -- so {@code backward} puts them in
     * the workspace as well. (The builder's defaultNoWorkspace() cannot be combined with with():
     * the type stays out of workspaces.)
     */
    public static LayerWorkspaceMgr workingMemoryOnly(String name, WorkspaceConfiguration conf, boolean backward) {
        return StepWorkspaceMgr.of(name, conf, backward);
    }

    // ---------------------------------------------------------------- public entry points

    /** Train {@code net} for one epoch of {@code data} under the plan in {@code planFile}. Throws,
     *  before any training, {@link PlanRefusedException} when the plan cannot run on this network
     *  and an IOException for a plan file that cannot be read: never a quiet unplanned fit(). */
    public static TrainStats fit(MultiLayerNetwork net, DataSetIterator data, String planFile) throws IOException {
        return fit(net, data, planFile, 1, null);
    }

    /** Train for {@code epochs} epochs; {@code tier} holds offloaded activations (null: the
     *  backend's tier when the plan offloads, made and closed here). */
    public static TrainStats fit(MultiLayerNetwork net, DataSetIterator data, String planFile, int epochs,
                                 OffloadTier tier) throws IOException {
        return fit(net, planFile, tier, () -> net.fit(data, epochs));
    }

    public static TrainStats fit(ComputationGraph net, DataSetIterator data, String planFile) throws IOException {
        return fit(net, data, planFile, 1, null);
    }

    public static TrainStats fit(ComputationGraph net, DataSetIterator data, String planFile, int epochs,
                                 OffloadTier tier) throws IOException {
        return fit(net, planFile, tier, () -> net.fit(data, epochs));
    }

    /** A graph with several inputs or output layers trains on MultiDataSets. */
    public static TrainStats fit(ComputationGraph net, MultiDataSetIterator data, String planFile) throws IOException {
        return fit(net, data, planFile, 1, null);
    }

    public static TrainStats fit(ComputationGraph net, MultiDataSetIterator data, String planFile, int epochs,
                                 OffloadTier tier) throws IOException {
        return fit(net, planFile, tier, () -> net.fit(data, epochs));
    }

    /** The one planned fit: read the plan, attach it (with the backend's tier when it offloads and
     *  none is given), run DL4J's own {@code training} loop, detach, close what was made here. */
    private static TrainStats fit(Model net, String planFile, OffloadTier tier, Runnable training) throws IOException {
        PlanFile plan = PlanFile.read(planFile);
        OffloadTier own = tier == null && plan.offloads() ? OffloadTier.forPlan("auto", plan) : null;
        try (PlannedTrainer t = attach(net, plan, own != null ? own : tier)) {
            training.run();
            return t.stats();
        } finally {
            if (own != null) own.close();
        }
    }

    /**
     * What keeps {@code net} from training under {@code plan}: each entry names the layer, vertex
     * or setting and the fix. Empty when planned training can run.
     */
    public static List<String> check(Model net, PlanFile plan) {
        NetworkNodes nodes = NetworkNodes.of(net, plan);
        List<String> out = new ArrayList<>(nodes.unsupported());
        if (out.isEmpty()) out.addAll(sizeProblems(net, plan));
        if (out.isEmpty()) out.addAll(nodes.chunkProblems());
        OptimizationAlgorithm algo = net.conf().getOptimizationAlgo();
        if (algo != OptimizationAlgorithm.STOCHASTIC_GRADIENT_DESCENT) {
            out.add("the network's optimization algorithm is " + algo + "; planned training replaces the gradient step "
                    + "of STOCHASTIC_GRADIENT_DESCENT only; use DL4J's own fit()");
        }
        out.addAll(Listeners.problems(net));
        return out;
    }

    /** Layers whose output size is not the plan's: a plan of another network with the same layer
     *  types (its records would free and move arrays of other sizes than it predicted). */
    private static List<String> sizeProblems(Model net, PlanFile plan) {
        List<String> out = new ArrayList<>();
        for (PlanFile.Node n : plan.nodes) {
            org.deeplearning4j.nn.conf.layers.Layer conf = null;
            if (net instanceof MultiLayerNetwork && n.layerIndex >= 0
                    && n.layerIndex < ((MultiLayerNetwork) net).getnLayers()) {
                conf = ((MultiLayerNetwork) net).getLayerWiseConfigurations().getConf(n.layerIndex).getLayer();
            } else if (net instanceof ComputationGraph && n.vertex != null && !n.isInput()) {
                org.deeplearning4j.nn.conf.graph.GraphVertex v =
                        ((ComputationGraph) net).getConfiguration().getVertices().get(n.vertex);
                if (v instanceof org.deeplearning4j.nn.conf.graph.LayerVertex) {
                    conf = ((org.deeplearning4j.nn.conf.graph.LayerVertex) v).getLayerConf().getLayer();
                }
            }
            if (conf instanceof org.deeplearning4j.nn.conf.layers.FeedForwardLayer && n.shape.length >= 2) {
                long nOut = ((org.deeplearning4j.nn.conf.layers.FeedForwardLayer) conf).getNOut();
                if (nOut > 0 && nOut != n.shape[1]) {   // layers without sizes of their own (dropout, loss layers) write nOut 0
                    out.add("the plan " + plan.source + " gives " + n + " " + n.shape[1] + " outputs; this network's has "
                            + nOut + ": the plan is of another network; write the plan from this network's configuration");
                }
            }
        }
        return out;
    }

    /**
     * Install the plan in {@code net}'s optimizer: from now on its fit() computes gradients with
     * planned iterations, until {@link #close}. Refuses (before any training) what it cannot
     * replay exactly: {@link PlanRefusedException} naming each problem.
     */
    public static PlannedTrainer attach(Model net, PlanFile plan, OffloadTier tier) {
        List<String> problems = check(net, plan);
        if (!problems.isEmpty()) throw new PlanRefusedException(problems);
        if (plan.offloads() && tier == null) {
            throw new IllegalArgumentException("plan " + plan.source + " (" + plan.policy + ") offloads activations: "
                    + "give an OffloadTier (OffloadTier.forPlan(\"auto\", plan): DiskTier on the CPU backend), or write a plan that does not offload "
                    + "(policy liveness or recompute without a tier: `pyd4j plan ... --policy liveness --emit-plan FILE`)");
        }
        PlannedTrainer t = new PlannedTrainer(net, plan, NetworkNodes.of(net, plan), tier);
        dropWorkingMemory();   // this plan's steps (their batch chunks) decide its size, not an earlier plan's
        t.stats.mallocReturnsMemory = ReturnFreedMemory.apply();
        t.install();
        return t;
    }

    /**
     * The planned trainer installed in {@code net} (attached and not closed), or null. Found through
     * the network's own solver, so that nothing outside the network keeps it alive.
     */
    public static PlannedTrainer of(Model net) {
        if (!(net instanceof MultiLayerNetwork) && !(net instanceof ComputationGraph)) return null;
        Class<?> owner = net instanceof MultiLayerNetwork ? MultiLayerNetwork.class : ComputationGraph.class;
        Solver s = (Solver) Reflect.get(net, owner, "solver");
        ConvexOptimizer o = s == null ? null : s.getOptimizer();
        return o instanceof PlannedOptimizer ? ((PlannedOptimizer) o).trainer() : null;
    }

    /** One planned iteration on the network's current input and labels: sets its gradient and score
     *  exactly as its own {@code computeGradientAndScore()} would. */
    public void computeGradientAndScore() {
        if (!attached) throw new IllegalStateException("this PlannedTrainer was closed");
        iteration();
    }

    public TrainStats stats() {
        if (tier != null) stats.tier = tier.stats();
        stats.bufferPool = pool.enabled();
        stats.pooledReuses = pool.reuses;
        stats.pooledReusedBytes = pool.reusedBytes;
        stats.staleReleases = pool.staleReleases;
        return stats;
    }

    public PlanFile plan() {
        return plan;
    }

    /** Give the network its own optimizer back. Does not close the tier (its owner does). */
    @Override
    public void close() {
        if (!attached) return;
        attached = false;
        Reflect.set(solver, Solver.class, "optimizer", original);
        nodes.detach();
        pool.clear();
        dropWorkingMemory();
    }

    // ---------------------------------------------------------------- installation

    private void install() {
        Class<?> owner = net instanceof MultiLayerNetwork ? MultiLayerNetwork.class : ComputationGraph.class;
        Object updater = net instanceof MultiLayerNetwork ? ((MultiLayerNetwork) net).getUpdater()
                : ((ComputationGraph) net).getUpdater();   // creates the solver and its updater when absent
        solver = (Solver) Reflect.get(net, owner, "solver");
        original = solver.getOptimizer();
        if (!(original instanceof StochasticGradientDescent) || original instanceof PlannedOptimizer) {
            throw new IllegalStateException("the network's optimizer is " + original.getClass().getName()
                    + "; planned training replaces DL4J's StochasticGradientDescent only (is another PlannedTrainer attached?)");
        }
        BaseOptimizer base = (BaseOptimizer) original;
        @SuppressWarnings("unchecked")
        Collection<TrainingListener> listeners = (Collection<TrainingListener>) Reflect.get(base, BaseOptimizer.class, "trainingListeners");
        PlannedOptimizer planned = new PlannedOptimizer(base.getConf(), base.getStepFunction(), listeners, net, this);
        if (net instanceof MultiLayerNetwork) planned.setUpdater((org.deeplearning4j.nn.api.Updater) updater);
        else planned.setUpdaterComputationGraph(base.getComputationGraphUpdater());
        Reflect.set(solver, Solver.class, "optimizer", planned);
        nodes.attach();
        attached = true;
    }

    // ---------------------------------------------------------------- one iteration

    private void iteration() {
        long started = System.nanoTime();
        int n = plan.nodes.size();
        state = new NodeState[n];
        for (int i = 0; i < n; i++) state[i] = new NodeState();
        live = 0;
        stepMade = new long[plan.records.size()];
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
                        forward(r.arg, false, r.chunks);
                        break;
                    case RECOMPUTE:
                        forward(r.arg, true, r.chunks);
                        stats.recomputes++;
                        break;
                    case BACKWARD:
                        double s = backward(r.arg);
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
            pool.prune();
            // between iterations DL4J's update step makes arrays of its own, up to the parameters' size
            // (without this room the pool raised deep_cnn_bn's liveness peak 2.8%, with it 0.5%: benchmarks/buffer_pool.py)
            pool.trim(outPeak - parameterBytes);
            lastStepMade = stepMade;
        }
        nodes.finishIteration(nodes.totalScore(scores));
        stats.iterations++;
        stats.iterationNanos += System.nanoTime() - started;
        stats.workingMemoryBytes = Math.max(stats.workingMemoryBytes, workingMemoryBytes());
    }

    private BadPlanException planError(String why) {
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

    /**
     * Close what DL4J handed out during a step outside workspaces and neither returned ({@code
     * kept}) nor left in the node's layer or vertex: the step's temporaries.
     */
    private void sweep(StepWorkspaceMgr m, int node, INDArray... kept) {
        List<INDArray> made = m.drain();
        // what the step made and still has, and the largest array it made and closed again (a sliced
        // step's slices come and go one at a time)
        long closed = 0;
        for (INDArray a : made) {
            if (a.wasClosed()) closed = Math.max(closed, Held.bytes(a));
            else stepMade[at] += Held.bytes(a);
        }
        stepMade[at] += closed;
        outPeak = Math.max(outPeak, stepStartLive + stepMade[at]);
        if (made.isEmpty() || nodes.opaque(node)) return;   // an opaque step's arrays may live on where we cannot see
        java.util.Set<Object> keep = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
        for (INDArray a : kept) if (a != null) keep.add(Held.root(a));
        for (INDArray a : nodes.referenced(node)) keep.add(Held.root(a));
        for (INDArray a : made) {
            if (a.wasClosed() || keep.contains(Held.root(a)) || !a.closeable()) continue;
            stats.sweptBytes += Held.bytes(a);
            if (!pool.release(Held.root(a), Long.MAX_VALUE, live, poolLimit())) a.close();
        }
    }

    /** Give up a held array: its buffer to the pool (which keeps it for the next array of its size
     *  while the trainer holds less than its peak) or closed. Callers take its bytes off {@code live} first. */
    private void release(Held h) {
        if (h.base != null && pool.release(h.base, h.since, live, poolLimit())) return;
        if (!h.close()) {
            stats.leftToGc++;
            stats.leftToGcBytes += h.bytes;
        }
    }

    /** What the pool and the held arrays may have together: the replay's own peak out of workspaces
     *  (0 in the first iteration), so that the pool never raises the peak. */
    private long poolLimit() {
        return lastStepMade == null ? 0 : outPeak;
    }

    /** Before a step makes arrays: the pool gives up what this step would take above the peak (what
     *  it made in the last iteration). */
    private void stepStart() {
        stepStartLive = live;
        if (lastStepMade != null) pool.trim(outPeak - live - lastStepMade[at]);
    }

    private void hold(long bytes) {
        live += bytes;
        if (live > stats.peakLiveBytes) stats.peakLiveBytes = live;
    }

    /** Y of node j, bringing it back from the tier if a prefetch is on its way. */
    private INDArray materialize(int j, String reader) {
        if (state[j].y != null) return state[j].y.array;
        if (plan.nodes.get(j).isInput()) {   // DL4J holds the network's input for the whole iteration
            state[j].y = Held.borrowed(nodes.input(j));
            return state[j].y.array;
        }
        if (state[j].incoming) {
            INDArray a = tier.take(PlanFile.KINDS * j);
            state[j].incoming = false;
            state[j].y = Held.own(a);
            hold(state[j].y.bytes);
            if (lastPrefetch[PlanFile.KINDS * j] < at) dropHostCopy(j);
            return a;
        }
        throw planError(reader + " reads " + plan.nodes.get(j).name + ":Y, which is neither live nor on its way back "
                + "(freed without a host copy or a recomputation)");
    }

    private void forward(int node, boolean recompute, int chunks) {
        PlanFile.Node pn = plan.nodes.get(node);
        if (pn.isInput()) {
            if (state[node].y == null) state[node].y = Held.borrowed(nodes.input(node));
            state[node].ready = true;
            return;
        }
        INDArray[] ins = new INDArray[pn.inputs.length];
        for (int k = 0; k < ins.length; k++) ins[k] = materialize(pn.inputs[k], (recompute ? "RECOMPUTE " : "FORWARD ") + pn.name);
        releaseState(node);
        if (state[node].y != null) {   // recomputing a live output: the new one replaces it
            live -= state[node].y.bytes;
            release(state[node].y);
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
        stepStart();
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
            hold(state[node].y.bytes);
        }
        sweep(mgr, node, out);
        state[node].bound = ins;
        Layer l = nodes.layer(node);
        state[node].caches = l == null ? Collections.emptyList() : LayerState.caches(l, out);
        state[node].cacheBytes = Held.bytes(state[node].caches);
        hold(state[node].cacheBytes);
        state[node].ready = true;
    }

    /** Close what the node's layer kept for its backward step. */
    private void releaseState(int node) {
        Layer l = nodes.layer(node);
        if (l != null && (state[node].ready || state[node].caches != null)) {
            LayerState.release(l, state[node].caches == null ? Collections.emptyList() : state[node].caches,
                    state[node].y == null ? null : state[node].y.array);
        }
        live -= state[node].cacheBytes;
        state[node].cacheBytes = 0;
        state[node].caches = null;
        state[node].ready = false;
    }

    private double backward(int node) {
        PlanFile.Node pn = plan.nodes.get(node);
        if (pn.isInput()) throw planError("network inputs have no backward step");
        if (state[node].cut && state[node].dy == null && !nodes.isOutput(node)) return cutOff(node);
        if (!state[node].ready) {
            // the plan released the layer's state (with its output) and did not rebuild it: rebuild
            // it now from the inputs, exactly (same random state); its output is not needed again
            Held keep = state[node].y;
            state[node].y = null;
            forward(node, true, plan.records.get(at).chunks);
            stats.rebuilds++;
            if (state[node].y != null) {
                live -= state[node].y.bytes;
                release(state[node].y);
            }
            state[node].y = keep;
        }
        Layer l = nodes.layer(node);
        boolean ownInput = l != null && LayerState.dropoutApplied(l);
        stepStart();
        for (int k = 0; k < pn.inputs.length; k++) {
            int j = pn.inputs[k];
            INDArray cur = state[j].y != null || state[j].incoming ? materialize(j, "BACKWARD " + pn.name) : null;
            if (cur == state[node].bound[k]) continue;
            if (cur == null) {
                if (!ownInput && nodes.backwardReadsInput(node, k)) {
                    throw planError("BACKWARD " + pn.name + " reads its input " + plan.nodes.get(j).name
                            + ":Y (DL4J's " + (l == null ? "vertex" : l.getClass().getSimpleName())
                            + " backprop reads it), which the plan freed");
                }
                continue;
            }
            if (!ownInput) {
                try (MemoryWorkspace ws = mgr.notifyScopeEntered(ArrayType.FF_WORKING_MEM)) {
                    nodes.rebind(node, k, cur, mgr);
                }
                sweep(mgr, node);
            }
            state[node].bound[k] = cur;
        }
        boolean output = nodes.isOutput(node);
        INDArray eps = state[node].dy == null ? null : state[node].dy.array;
        if (!output && eps == null) throw planError("BACKWARD " + pn.name + " has no gradient of its output");
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
                live -= state[node].dy.bytes;
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
        sweep(nodes.opaque(node) ? opaqueBpMgr : bpMgr, node, returned);
        handOn(node, pn, grads);
        releaseState(node);   // the layer's kept arrays are dead once its backprop ran
        return score;
    }

    /** Each input its gradient from this backward step: kept (a copy where it shares memory with what the
     *  step or a live activation holds), or added to what another reader gave it, as DL4J accumulates. */
    private void handOn(int node, PlanFile.Node pn, Held[] grads) {
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
                if (!alias) release(g);
                continue;
            }
            if (alias) g = Held.own(Held.detachedCopy(g.array));   // e.g. an add vertex passing its gradient on
            if (state[j].dy == null) {
                state[j].dy = g;
                hold(g.bytes);
            } else {
                state[j].dy.array.addi(g.array);   // as ComputationGraph accumulates epsilons: existing.addi(new)
                release(g);
            }
        }
    }

    /** A node whose readers passed it no gradient (a FrozenLayer): backprop stops there and below it. */
    private double cutOff(int node) {
        releaseState(node);
        for (int j : plan.nodes.get(node).inputs) state[j].cut = true;
        return Double.NaN;
    }

    private void free(int t) {
        if (plan.isSaved(t)) {
            // what the node's forward step kept for its backward step: a BACKWARD that finds it gone
            // runs the forward step again first (exactly; the plan normally RECOMPUTEs before it)
            releaseState(plan.savedNode(t));
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
                live -= state[node].y.bytes;
                release(state[node].y);
                state[node].y = null;
            }
            // What the layer keeps for its own backprop (batch norm's normalized input, a dropout
            // mask) goes with its output -- unless the output went to the tier: then it comes back
            // for the backward step and the layer's state waits for it (the tier holds activations only).
            if (!state[node].hostCopy && !savedRecords[node]) {
                boolean lost = state[node].caches != null && !state[node].caches.isEmpty();
                boolean wasReady = state[node].ready;
                releaseState(node);
                state[node].ready = wasReady && !lost;   // a layer that kept nothing but its input can still run backward
            }
            if (lastPrefetch[t] < at && !state[node].incoming) dropHostCopy(node);
        } else if (kind == PlanFile.DY) {
            if (state[node].dy != null) {
                live -= state[node].dy.bytes;
                release(state[node].dy);
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
                live -= state[node].y.bytes;
                release(state[node].y);
                state[node].y = null;
            }
        } else if (PlanFile.kind(src) == PlanFile.DY && state[node].dy != null) {
            live -= state[node].dy.bytes;
            release(state[node].dy);
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
                if (state[i].y != null) {
                    live -= state[i].y.bytes;
                    release(state[i].y);
                }
                if (state[i].dy != null) {
                    live -= state[i].dy.bytes;
                    release(state[i].dy);
                }
                releaseState(i);
                state[i].y = state[i].dy = null;
                state[i].hostCopy = state[i].offloadPending = state[i].incoming = false;
            }
        }
        live = 0;
    }

    /** Free this thread's working-memory workspace: it keeps the largest size it ever needed. */
    private static void dropWorkingMemory() {
        if (!Nd4j.getWorkspaceManager().checkIfWorkspaceExists(WORKING_MEMORY)) return;
        MemoryWorkspace ws = Nd4j.getWorkspaceManager().getWorkspaceForCurrentThread(WORKING_MEMORY);
        if (!ws.isScopeActive()) Nd4j.getWorkspaceManager().destroyWorkspace(ws);
    }

    /** Size of this thread's working-memory workspace (0 before the first step). */
    private static long workingMemoryBytes() {
        if (!Nd4j.getWorkspaceManager().checkIfWorkspaceExists(WORKING_MEMORY)) return 0;
        return Nd4j.getWorkspaceManager().getWorkspaceForCurrentThread(WORKING_MEMORY).getCurrentSize();
    }
}
