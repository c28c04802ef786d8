package org.pyd4j.train;

import java.util.Collections;
import java.util.List;

/**
 * Planned training cannot run this network under this plan: each problem names the layer, vertex,
 * setting or plan record and the fix. Thrown before any training step, so nothing trains unplanned.
 */
public class PlanRefusedException extends UnsupportedOperationException {
    private final List<String> problems;

    public PlanRefusedException(List<String> problems) {
        super("planned training cannot run this network:\n  - " + String.join("\n  - ", problems));
        this.problems = Collections.unmodifiableList(problems);
    }

    /** What keeps the network from planned training, one entry per problem. */
    public List<String> problems() {
        return problems;
    }
}
