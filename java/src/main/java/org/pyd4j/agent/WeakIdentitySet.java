package org.pyd4j.agent;

import java.lang.ref.ReferenceQueue;
import java.lang.ref.WeakReference;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Objects of the job seen by the agent, by identity, without keeping them alive: a network the
 * job drops is collected as it would be without the agent (entries of collected objects go).
 */
public final class WeakIdentitySet {
    private static final class Ref extends WeakReference<Object> {
        final int hash;

        Ref(Object o, int hash, ReferenceQueue<Object> queue) {
            super(o, queue);
            this.hash = hash;
        }
    }

    private final Map<Integer, List<Ref>> buckets = new HashMap<>();
    private final ReferenceQueue<Object> queue = new ReferenceQueue<>();

    /** Adds {@code o}; false when it was there already. */
    public synchronized boolean add(Object o) {
        expunge();
        int h = System.identityHashCode(o);
        List<Ref> bucket = buckets.computeIfAbsent(h, k -> new ArrayList<>(1));
        for (Ref r : bucket) {
            if (r.get() == o) return false;
        }
        bucket.add(new Ref(o, h, queue));
        return true;
    }

    public synchronized boolean contains(Object o) {
        expunge();
        List<Ref> bucket = buckets.get(System.identityHashCode(o));
        if (bucket == null) return false;
        for (Ref r : bucket) {
            if (r.get() == o) return true;
        }
        return false;
    }

    /** Entries whose objects are still alive (or not yet found collected). */
    public synchronized int size() {
        expunge();
        int n = 0;
        for (List<Ref> bucket : buckets.values()) n += bucket.size();
        return n;
    }

    private void expunge() {
        for (java.lang.ref.Reference<?> r; (r = queue.poll()) != null; ) {
            Ref ref = (Ref) r;
            List<Ref> bucket = buckets.get(ref.hash);
            if (bucket != null) {
                bucket.remove(ref);
                if (bucket.isEmpty()) buckets.remove(ref.hash);
            }
        }
    }
}
