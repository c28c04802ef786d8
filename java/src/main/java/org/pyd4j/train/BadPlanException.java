package org.pyd4j.train;

/**
 * A plan whose records cannot be replayed on the network it was accepted for (a record reads a
 * tensor the plan freed, an output layer without a backward step, ...): the iteration stops with
 * the record and the reason. Write the plan again with {@code pyd4j plan --emit-plan}.
 */
public class BadPlanException extends IllegalStateException {
    public BadPlanException(String message) {
        super(message);
    }
}
