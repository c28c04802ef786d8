package org.pyd4j.train;

import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;

/**
 * The agent's way into planned training ({@code -javaagent:pyd4j-java.jar=plan=FILE,...}): the
 * agent's hook on every {@code fit(...)} of an unchanged job calls {@link #attach} by reflection,
 * and from then on the network trains under the plan (DL4J's own fit() loop, planned gradient
 * steps) for the rest of the process; a plan that offloads activations gets the backend's offload
 * tier ({@link OffloadTier#forPlan}). Answers are JSON objects for the agent's timeline.
 */
public final class AgentRoute {
    private AgentRoute() {
    }

    /** Install the plan in {@code model} (once per network); never throws: a refusal is answered
     *  with its reason, and the agent ends the job with it (unless plan_fallback=fit). Nothing here
     *  keeps the network alive: a job that drops a network gets its memory back, as without the
     *  agent (the trainer is found through the network, {@link PlannedTrainer#of}). */
    public static String attach(Object model, String planFile) {
        if (model instanceof Model && PlannedTrainer.of((Model) model) != null) {
            return "{\"status\": \"attached\", \"again\": true}";
        }
        try {
            PlanFile plan = PlanFile.read(planFile);
            // an offloading plan gets the backend's tier, kept for the rest of the process
            OffloadTier tier = plan.offloads() ? OffloadTier.forPlan("auto", plan) : null;
            try {
                PlannedTrainer.attach((Model) model, plan, tier);
            } catch (RuntimeException e) {
                if (tier != null) tier.close();
                throw e;
            }
            if (tier != null) Runtime.getRuntime().addShutdownHook(new Thread(tier::close, "pyd4j-tier-close"));
            return "{\"status\": \"attached\", \"policy\": \"" + plan.policy + "\", \"nodes\": " + plan.nodes.size()
                    + ", \"predicted_peak_bytes\": " + plan.predictedPeakBytes + "}";
        } catch (Throwable e) {   // the agent ends the job, or it trains with fit() as asked (once per network)
            String why = String.valueOf(e.getMessage() == null ? e : e.getMessage());
            return "{\"status\": \"refused\", \"reason\": " + quote(why) + "}";
        }
    }

    /** What the planned trainer of {@code model} did so far (null JSON when none). */
    public static String stats(Object model) {
        PlannedTrainer t = model instanceof Model ? PlannedTrainer.of((Model) model) : null;
        return t == null ? "null" : t.stats().toJson();
    }

    /** The network's configuration and input shape, so that pyd4j can plan the job's network. */
    public static String network(Object model) {
        String kind;
        String conf;
        long[] shape;
        String shapes = "null";   // every input's shape (a ComputationGraph may have several)
        if (model instanceof MultiLayerNetwork) {
            MultiLayerNetwork n = (MultiLayerNetwork) model;
            kind = "MultiLayerNetwork";
            conf = n.getLayerWiseConfigurations().toJson();
            shape = n.getInput() == null ? null : n.getInput().shape();
        } else if (model instanceof ComputationGraph) {
            ComputationGraph g = (ComputationGraph) model;
            kind = "ComputationGraph";
            conf = g.getConfiguration().toJson();
            shape = g.getInputs() == null || g.getInputs()[0] == null ? null : g.getInputs()[0].shape();
            if (g.getInputs() != null) {
                java.util.List<String> each = new java.util.ArrayList<>();
                for (org.nd4j.linalg.api.ndarray.INDArray in : g.getInputs()) {
                    each.add(in == null ? "null" : java.util.Arrays.toString(in.shape()));
                }
                shapes = "[" + String.join(", ", each) + "]";
            }
        } else {
            return "null";
        }
        try {   // one line: the agent's timeline holds one event per line
            conf = new org.nd4j.shade.jackson.databind.ObjectMapper().readTree(conf).toString();
        } catch (java.io.IOException e) {
            return "null";
        }
        return "{\"kind\": \"" + kind + "\", \"input_shape\": " + (shape == null ? "null" : java.util.Arrays.toString(shape))
                + ", \"input_shapes\": " + shapes + ", \"conf\": " + conf + "}";
    }

    private static String quote(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') sb.append('\\').append(c);
            else if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
            else sb.append(c);
        }
        return sb.append('"').toString();
    }
}
