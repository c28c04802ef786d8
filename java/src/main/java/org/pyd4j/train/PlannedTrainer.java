package org.pyd4j.train;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;

import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.api.OptimizationAlgorithm;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.deeplearning4j.optimize.Solver;
import org.deeplearning4j.optimize.api.ConvexOptimizer;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.deeplearning4j.optimize.solvers.BaseOptimizer;
import org.deeplearning4j.optimize.solvers.StochasticGradientDescent;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.memory.conf.WorkspaceConfiguration;
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
 *
 * <p>This class is what DL4J, the agent and callers see: the entry points, the checks, attaching to
 * the network's optimizer and detaching. The replay of the records itself is {@link PlanInterpreter}'s.
 */
public final class PlannedTrainer implements AutoCloseable {
    /** The name of the working-memory workspace (temporaries of one forward or backward step). */
    public static final String WORKING_MEMORY = "PYD4J_PLANNED_WORKING_MEM";

    private final Model net;
    private final PlanFile plan;
    private final NetworkNodes nodes;
    private final OffloadTier tier;
    private final TrainStats stats = new TrainStats();
    private final BufferPool pool;   // released buffers for the next arrays of their size
    private final PlanInterpreter interpreter;   // replays the plan's records, one iteration at a time

    private Solver solver;
    private ConvexOptimizer original;
    private boolean attached;

    private PlannedTrainer(Model net, PlanFile plan, NetworkNodes nodes, OffloadTier tier) {
        this.net = net;
        this.plan = plan;
        this.nodes = nodes;
        this.tier = tier;
        this.stats.plannedPeakBytes = plan.predictedPeakBytes;
        this.pool = BufferPool.forPlan(plan);
        this.interpreter = new PlanInterpreter(net, plan, nodes, tier, stats, pool);
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
        interpreter.iteration();
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
    /** Free this thread's working-memory workspace: it keeps the largest size it ever needed. */
    private static void dropWorkingMemory() {
        if (!Nd4j.getWorkspaceManager().checkIfWorkspaceExists(WORKING_MEMORY)) return;
        MemoryWorkspace ws = Nd4j.getWorkspaceManager().getWorkspaceForCurrentThread(WORKING_MEMORY);
        if (!ws.isScopeActive()) Nd4j.getWorkspaceManager().destroyWorkspace(ws);
    }

    /** Size of this thread's working-memory workspace (0 before the first step). */
    static long workingMemoryBytes() {
        if (!Nd4j.getWorkspaceManager().checkIfWorkspaceExists(WORKING_MEMORY)) return 0;
        return Nd4j.getWorkspaceManager().getWorkspaceForCurrentThread(WORKING_MEMORY).getCurrentSize();
    }
}
