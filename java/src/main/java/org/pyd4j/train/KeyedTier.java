package org.pyd4j.train;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * The per-key life cycle every {@link OffloadTier} shares, written once: the keys and their slots,
 * offload → awaitOffloaded → prefetch → take (as often as wanted) → release, the time callers wait
 * on copies, and closing. How the bytes move is the injected {@link TierTransport}: the disk
 * tier's memory-mapped file or the pinned host pool of the native side-agent.
 *
 * <p>Thread safety: every method may be called from any thread; one key should be driven by
 * one thread at a time. Only {@link #awaitOffloaded}, {@link #take} and {@link #release} block,
 * and only on their own key's copies. {@link #close} waits for every copy.
 */
abstract class KeyedTier<S> implements OffloadTier {
    private final TierTransport<S> transport;
    private final String name;        // in messages: "disk tier"
    private final String className;   // named in "open a new ..."
    private final Map<Integer, Entry<S>> entries = new HashMap<>();
    private final AtomicLong waitNanos = new AtomicLong();
    private boolean closed;
    private TierStats finalStats;

    /** One key: its slot, and a read-back the tier owns until take hands it out. */
    private static final class Entry<S> {
        final ArraySpec spec;
        final S slot;
        INDArray fresh;                   // the read-back's destination, or null
        TierTransport.Copy reading;       // its copy, while fresh is the tier's

        Entry(ArraySpec spec, S slot) {
            this.spec = spec;
            this.slot = slot;
        }
    }

    KeyedTier(TierTransport<S> transport, String name, String className) {
        this.transport = transport;
        this.name = name;
        this.className = className;
    }

    @Override
    public synchronized void offload(int key, INDArray array) {
        ensureOpen();
        ArraySpec spec = ArraySpec.of(key, array);
        if (entries.containsKey(key)) {
            throw new IllegalStateException("key " + key + " already holds an offloaded array in "
                    + "the " + name + "; release(" + key + ") it before offloading under "
                    + "that key again");
        }
        entries.put(key, new Entry<>(spec, transport.write(key, spec, array, entries.size())));
    }

    @Override
    public void awaitOffloaded(int key) {
        S slot;
        synchronized (this) {
            slot = entry(key).slot;
        }
        long t0 = System.nanoTime();
        try {
            transport.awaitWritten(key, slot);
        } finally {
            waitNanos.addAndGet(System.nanoTime() - t0);
        }
        synchronized (this) {
            Entry<S> e = entries.get(key);
            if (e != null) {
                transport.written(e.slot);
            }
        }
    }

    @Override
    public synchronized void prefetch(int key) {
        Entry<S> entry = entry(key);
        if (entry.fresh == null) {
            startRead(key, entry);
        }
    }

    @Override
    public INDArray take(int key) {
        INDArray fresh;
        TierTransport.Copy reading;
        S slot;
        synchronized (this) {
            Entry<S> entry = entry(key);
            if (entry.fresh == null) {
                startRead(key, entry);
            }
            fresh = entry.fresh;
            reading = entry.reading;
            slot = entry.slot;
            entry.fresh = null;
            entry.reading = null;
        }
        long t0 = System.nanoTime();
        try {
            reading.await();
        } catch (RuntimeException e) {
            fresh.close();
            throw e;
        } finally {
            waitNanos.addAndGet(System.nanoTime() - t0);
        }
        return transport.taken(slot, fresh);
    }

    @Override
    public void release(int key) {
        Entry<S> entry;
        synchronized (this) {
            ensureOpen();
            entry = entries.remove(key);
            if (entry == null) {
                throw unknownKey(key);
            }
        }
        long t0 = System.nanoTime();
        try {
            transport.settle(key, entry.slot, entry.reading);
        } finally {
            waitNanos.addAndGet(System.nanoTime() - t0);
        }
        if (entry.fresh != null) {
            entry.fresh.close();
        }
        synchronized (this) {
            transport.drop(entry.slot, !closed);
        }
    }

    /** Counters; a transport may wait for the copies in flight so that their timings are known
     *  (call it between iterations, not inside one). */
    @Override
    public synchronized TierStats stats() {
        return finalStats != null ? finalStats : transport.stats(waitNanos.get());
    }

    @Override
    public void close() {
        List<Entry<S>> left;
        synchronized (this) {
            if (closed) {
                return;
            }
            left = new ArrayList<>(entries.values());
            entries.clear();
            List<S> slots = new ArrayList<>();
            for (Entry<S> e : left) {
                slots.add(e.slot);
            }
            transport.closing(slots);
            closed = true;
        }
        boolean stopped = transport.stop();
        synchronized (this) {
            for (Entry<S> e : left) {
                if (e.fresh != null && stopped) {
                    e.fresh.close();
                }
                transport.drop(e.slot, false);
            }
            finalStats = transport.stats(waitNanos.get());
        }
        transport.close();
    }

    private void startRead(int key, Entry<S> entry) {  // holds this
        INDArray fresh = entry.spec.allocateDetached();
        try {
            entry.reading = transport.read(key, entry.slot, fresh);
        } catch (RuntimeException | Error e) {
            fresh.close();
            throw e;
        }
        entry.fresh = fresh;
    }

    private Entry<S> entry(int key) {  // holds this
        ensureOpen();
        Entry<S> e = entries.get(key);
        if (e == null) {
            throw unknownKey(key);
        }
        return e;
    }

    private IllegalArgumentException unknownKey(int key) {
        return new IllegalArgumentException("key " + key + " is not in the " + name
                + " (never offloaded, or already released); offload(" + key + ", array) first");
    }

    private void ensureOpen() {  // holds this
        if (closed) {
            throw new IllegalStateException("the " + name + " is closed; open a new "
                    + className);
        }
    }
}
