package org.pyd4j.train;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The byte ranges of the disk tier's file: which are free, which hold an offloaded array.
 *
 * <p>A slot is a list of extents, not one range: an allocation takes the free gaps in address
 * order (first fit, the last gap split) and then grows the file at its end. So the file never
 * refuses an array for fragmentation, only when the free bytes of the limit do not add up;
 * the price of a fragmented file is more, smaller mappings per copy. Extents are whole pages
 * (internal fragmentation: under one page per array). Freed extents merge with free
 * neighbours. The file never shrinks ({@link #end()} is its high-water mark): in steady
 * training the same pages are written every iteration, and rewriting pages the kernel still
 * caches measured several times faster than writing new ones ({@code benchmarks/tiers.py},
 * {@code first_round}).
 */
final class FileSpace {
    /** One contiguous range of the file. */
    static final class Extent {
        final long offset;
        final long length;

        Extent(long offset, long length) {
            this.offset = offset;
            this.length = length;
        }
    }

    private final long limit;
    private final long page;
    private final TreeMap<Long, Long> free = new TreeMap<>();  // offset -> length, below end
    private long end;
    private long held;
    private long peak;

    FileSpace(long limit, long page) {
        this.limit = limit;
        this.page = page;
    }

    static long roundUp(long bytes, long page) {
        return (bytes + page - 1) / page * page;
    }

    /** Extents holding {@code bytes} (rounded up to whole pages), or null if the limit is short. */
    synchronized List<Extent> allocate(long bytes) {
        long need = roundUp(bytes, page);
        List<Extent> out = new ArrayList<>();
        if (need > limit - held) {
            return null;
        }
        long remaining = need;
        while (remaining > 0 && !free.isEmpty()) {
            Map.Entry<Long, Long> gap = free.pollFirstEntry();
            long take = Math.min(gap.getValue(), remaining);
            out.add(new Extent(gap.getKey(), take));
            if (take < gap.getValue()) {
                free.put(gap.getKey() + take, gap.getValue() - take);
            }
            remaining -= take;
        }
        if (remaining > 0) {
            out.add(new Extent(end, remaining));
            end += remaining;
        }
        held += need;
        peak = Math.max(peak, held);
        return out;
    }

    /** Gives the extents back, merging them with free neighbours. */
    synchronized void release(List<Extent> extents) {
        for (Extent e : extents) {
            long offset = e.offset;
            long length = e.length;
            Map.Entry<Long, Long> before = free.floorEntry(offset);
            if (before != null && before.getKey() + before.getValue() == offset) {
                offset = before.getKey();
                length += before.getValue();
                free.remove(before.getKey());
            }
            Long after = free.get(offset + length);
            if (after != null) {
                free.remove(offset + length);
                length += after;
            }
            free.put(offset, length);
            held -= e.length;
        }
    }

    /** The file length the extents ever handed out need (the high-water mark). */
    synchronized long end() {
        return end;
    }

    synchronized long held() {
        return held;
    }

    synchronized long peak() {
        return peak;
    }
}
