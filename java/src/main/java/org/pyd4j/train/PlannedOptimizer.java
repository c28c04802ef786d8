package org.pyd4j.train;

import java.util.Collection;

import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.deeplearning4j.optimize.api.StepFunction;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.deeplearning4j.optimize.solvers.StochasticGradientDescent;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.factory.Nd4j;

/**
 * DL4J's own StochasticGradientDescent with one change: the gradient and score come from a
 * planned iteration instead of {@code model.computeGradientAndScore}. Everything after that is
 * DL4J's code path of {@code fit()}: {@code onGradientCalculation} listeners, the updater
 * (gradient normalization, regularization, minibatch division, the update rule), the step
 * function, {@code iterationDone} listeners, iteration counts and constraints
 * ({@code StochasticGradientDescent.optimize}, inherited unchanged).
 */
final class PlannedOptimizer extends StochasticGradientDescent {
    private final transient PlannedTrainer trainer;

    PlannedOptimizer(NeuralNetConfiguration conf, StepFunction step, Collection<TrainingListener> listeners,
                     Model model, PlannedTrainer trainer) {
        super(conf, step, listeners, model);
        this.trainer = trainer;
    }

    PlannedTrainer trainer() {
        return trainer;
    }

    Collection<TrainingListener> listeners() {
        return trainingListeners;
    }

    /** BaseOptimizer.gradientAndScore of DL4J 1.0.0-M2.1, with the planned iteration in place of
     *  {@code model.computeGradientAndScore(workspaceMgr)}. */
    @Override
    public Pair<Gradient, Double> gradientAndScore(LayerWorkspaceMgr workspaceMgr) {
        oldScore = score;
        trainer.computeGradientAndScore();
        if (trainingListeners != null && !trainingListeners.isEmpty()) {
            try (MemoryWorkspace ws = Nd4j.getMemoryManager().scopeOutOfWorkspaces()) {
                for (TrainingListener l : trainingListeners) l.onGradientCalculation(model);
            }
        }
        Pair<Gradient, Double> pair = model.gradientAndScore();
        score = pair.getSecond();
        updateGradientAccordingToParams(pair.getFirst(), model, model.batchSize(), workspaceMgr);
        return pair;
    }
}
