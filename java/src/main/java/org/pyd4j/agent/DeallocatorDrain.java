package org.pyd4j.agent;

/**
 * The wait, after a full collection, until ND4J's and JavaCPP's deallocator threads have freed what the
 * collection released: a live point read before that would count dead arrays as kept. Its own class
 * because when "done" is reached is a judgement of its own (see {@link #await}).
 */
final class DeallocatorDrain {
    /** How often the deallocators' progress is read, ms. */
    static final long POLL_MS = 50;
    private static final int QUIET_POLLS = 3;
    private static final long MAX_MS = 10_000;
    private static final long SLACK = 50;

    /** How long the last wait took, ms. */
    private long lastMs;

    /**
     * Until ND4J's and JavaCPP's deallocator threads have caught up with what the collection released:
     * no ND4J object left whose owner is dead but whose deallocator has not run (a few, from young
     * collections meanwhile, are fine), and JavaCPP's count of Pointers not falling for 3 polls in a
     * row (where ND4J's registry is unknown: the bytes freed not rising). On a starved machine this can
     * take long; after 10 s the point is written as not drained, and the heap verdict leaves it out. When
     * {@code busy} says the job's own collections keep giving the deallocators more to free, the wait ends
     * after 3 polls, not drained: they may never be idle (a job calling System.gc() every iteration).
     */
    boolean await(java.util.function.BooleanSupplier busy) throws InterruptedException {
        long start = System.nanoTime();
        int polls = 0;
        long freed = Allocations.freedSoFar();
        long javacpp = javacppCount();
        int javacppQuiet = 0;
        int freedQuiet = 0;
        while (System.nanoTime() - start < MAX_MS * 1_000_000L) {
            Thread.sleep(POLL_MS);
            if (++polls > QUIET_POLLS && busy.getAsBoolean()) break;
            long javacppNow = javacppCount();
            javacppQuiet = javacppNow < 0 || javacppNow >= javacpp ? javacppQuiet + 1 : 0;
            javacpp = javacppNow;
            long freedNow = Allocations.freedSoFar();
            freedQuiet = freedNow == freed ? freedQuiet + 1 : 0;
            freed = freedNow;
            long awaiting = Allocations.nd4jAwaitingDeallocator();
            boolean nd4jDone = awaiting >= 0
                    ? awaiting <= Math.max(SLACK, Allocations.nd4jRegistered() / 100)
                    : freedQuiet >= QUIET_POLLS;
            if (nd4jDone && javacppQuiet >= QUIET_POLLS) {
                lastMs = (System.nanoTime() - start) / 1_000_000L;
                return true;
            }
        }
        lastMs = (System.nanoTime() - start) / 1_000_000L;
        return false;
    }

    /** How long the last {@link #await} took, ms. */
    long lastMs() {
        return lastMs;
    }

    private static long javacppCount() {
        JavaCpp.Counters c = JavaCpp.read(-1);
        return c != null ? c.count : -1;
    }
}
